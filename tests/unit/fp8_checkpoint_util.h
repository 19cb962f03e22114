// Writing FP8 checkpoints in tests: a weight quantized to e4m3 with one scale per block (per
// tensor, per output channel and 128x128 blocks are all block shapes), and raw tensors added to a
// safetensors builder.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "model_files_util.h"

namespace pagellm::testing {

// Quantizes w [n, k] with one scale per block of bn rows x bk columns (bn = n, bk = k: per
// tensor; bn = 1, bk = k: per channel) into bytes (e4m3) and scales [ceil(n / bn), ceil(k / bk)];
// returns the dequantized weight, e4m3 value times its scale in fp32.
inline std::vector<float> quantize_fp8(const std::vector<float>& w, int64_t n, int64_t k,
                                       int64_t bn, int64_t bk, std::string& bytes,
                                       std::vector<float>& scales) {
  std::vector<float> deq(w.size());
  const int64_t nb = (n + bn - 1) / bn, kb = (k + bk - 1) / bk;
  scales.assign(size_t(nb * kb), 0.f);
  for (int64_t bi = 0; bi < nb; ++bi)
    for (int64_t bj = 0; bj < kb; ++bj) {
      float amax = 0;
      for (int64_t r = bi * bn; r < std::min(n, (bi + 1) * bn); ++r)
        for (int64_t c = bj * bk; c < std::min(k, (bj + 1) * bk); ++c)
          amax = std::max(amax, std::fabs(w[size_t(r * k + c)]));
      scales[size_t(bi * kb + bj)] = std::max(amax, 1e-12f) / 448.f;
    }
  bytes.resize(w.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const float s = scales[size_t(r / bn * kb + c / bk)];
      const uint8_t q = f32_to_fp8(w[size_t(r * k + c)] / s, Fp8Format::kE4M3);
      bytes[size_t(r * k + c)] = char(q);
      deq[size_t(r * k + c)] = fp8_to_f32(q, Fp8Format::kE4M3) * s;
    }
  return deq;
}

inline void add_raw(SafetensorsBuilder& b, const std::string& name, const char* dtype,
                    const std::vector<int64_t>& shape, const std::string& raw) {
  const size_t begin = b.data.size();
  b.data += raw;
  b.header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, b.data.size()}}};
}

}  // namespace pagellm::testing
