// Quantized checkpoints in tests: an FP8 weight quantized to e4m3 with one scale per block (per
// tensor, per output channel and 128x128 blocks are all block shapes), raw tensors added to a
// safetensors builder, and the loaded runtime weights compared with the expected dequantized
// parts (the FP8 and INT checkpoint tests).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/fp8.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"

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

// The rank's runtime tensors of the plan entries `slot_of_interest` picks, part by part, against
// the expected dequantized parts by name (sliced as the shard slices them); returns how many
// parts were compared.
template <class Pick>
int expect_parts_dequantized(models::LlamaWeights& w, const io::ModelConfig& c,
                             const parallel::ShardSpec& shard,
                             const std::map<std::string, std::vector<float>>& deq,
                             Pick slot_of_interest) {
  int checked = 0;
  for (const models::WeightTensorSpec& t : models::llama_weight_plan(c, shard)) {
    if (!slot_of_interest(t.slot)) continue;
    const std::vector<float>& got = models::weight_slot(w, t);
    size_t off = 0;
    for (const models::HfTensorSpec& part : t.parts) {
      const std::vector<float>& full = deq.at(part.name);
      models::for_each_slice_run(part, [&](int64_t f, int64_t l, int64_t count) {
        for (int64_t i = 0; i < count; ++i)
          ASSERT_EQ(got[off + size_t(l + i)], full[size_t(f + i)]) << part.name << " " << l + i;
      });
      off += size_t(part.num_elements());
      ++checked;
    }
  }
  return checked;
}

}  // namespace pagellm::testing
