// Helpers of the FP8 device tests and benchmark (fp8_tests.cpp, fp8_bench.cpp): a device buffer,
// the host twin of the per-row e4m3 quantization kernels, and an error measure.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/gemm/fp8_gemm.h"
#include "common/fp8.h"
#include "device_test_util.h"

namespace pagellm::cuda::test {

// Device bytes, freed with the object.
struct DevMem {
  void* ptr = nullptr;
  size_t bytes = 0;
  DevMem() = default;
  explicit DevMem(size_t b) { alloc(b); }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  ~DevMem() {
    if (ptr) cudaFree(ptr);
  }
  void alloc(size_t b) {
    if (ptr) cudaFree(ptr);
    bytes = b;
    CK(cudaMalloc(&ptr, std::max<size_t>(b, 16)));
  }
};

inline std::vector<float> download(const DevMem& buf, DType t, size_t n) {
  std::vector<uint8_t> raw(n * dsize(t));
  CK(cudaMemcpy(raw.data(), buf.ptr, raw.size(), cudaMemcpyDeviceToHost));
  return decode(t, raw);
}

// The math of quantize_fp8_per_token / _per_channel on one row (fp8_gemm.h): q [k] e4m3 bytes,
// returns the scale. Float operations in the kernel's order, so results are bit-exact.
inline float host_quantize_row(const float* x, int k, uint8_t* q) {
  float amax = 0.f;
  for (int i = 0; i < k; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = std::fmax(amax, kFp8MinAmax) / kFp8Max;
  for (int i = 0; i < k; ++i) q[i] = f32_to_fp8(x[i] / scale, Fp8Format::kE4M3);
  return scale;
}

// Block-scaled weight w [n, k] (k % 128 == 0) as a DeepSeek / Qwen3-FP8 checkpoint holds it:
// q [n, k] e4m3 and the returned scales [ceil(n / 128), fp8_block_scale_stride(k)], one per 128x128
// block with the same math as host_quantize_row; the padding columns hold NaN (nothing may read
// them).
inline std::vector<float> host_quantize_blocks(const std::vector<float>& w, int n, int k,
                                               std::vector<uint8_t>& q) {
  const int stride = fp8_block_scale_stride(k), num_row_blocks = (n + kFp8Block - 1) / kFp8Block;
  std::vector<float> scales(size_t(num_row_blocks) * stride, NAN);
  for (int b = 0; b < num_row_blocks; ++b)
    for (int g = 0; g < k / kFp8Block; ++g) {
      const int j_end = std::min(n, (b + 1) * kFp8Block);
      float amax = 0.f;
      for (int j = b * kFp8Block; j < j_end; ++j)
        for (int l = g * kFp8Block; l < (g + 1) * kFp8Block; ++l)
          amax = std::fmax(amax, std::fabs(w[size_t(j) * k + l]));
      const float scale = std::fmax(amax, kFp8MinAmax) / kFp8Max;
      scales[size_t(b) * stride + g] = scale;
      for (int j = b * kFp8Block; j < j_end; ++j)
        for (int l = g * kFp8Block; l < (g + 1) * kFp8Block; ++l)
          q[size_t(j) * k + l] = f32_to_fp8(w[size_t(j) * k + l] / scale, Fp8Format::kE4M3);
    }
  return scales;
}

// Named checks of a suite run under a --filter substring.
struct Suite {
  std::string filter;
  int passed = 0, failed = 0;
  bool selected(const std::string& name) const {
    return filter.empty() || name.find(filter) != std::string::npos;
  }
  void report(const std::string& name, bool ok, const std::string& detail) {
    ++(ok ? passed : failed);
    std::printf("  %s %-66s %s\n", ok ? "ok  " : "FAIL", name.c_str(), detail.c_str());
  }
};

}  // namespace pagellm::cuda::test
