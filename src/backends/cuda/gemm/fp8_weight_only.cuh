// Device pieces shared by the FP8 weight-only kernels (fp8_weight_only.cu on CUDA cores,
// fp8_weight_only_stream.cu on tensor cores): how a finished sum becomes an output (which weight
// row a kernel's row reads: gemm/mma.cuh's weight_row).
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/fp8_gemm.h"
#include "backends/cuda/gemm/mma.cuh"

namespace pagellm::cuda {

// The finished sum of weight row `row`: per-channel scale (block scales are applied during the
// sum), bias.
template <typename T>
__device__ __forceinline__ float finish_sum(const Fp8LinearParams& p, float acc, int row) {
  float out = p.w_block != 0 ? acc : acc * p.w_scale[row];
  if (p.bias) out += to_float(static_cast<const T*>(p.bias)[row]);
  return out;
}

// Gated output j (w = [gate; up], n = 2 x inner) from its gate and up sums, with silu_and_mul's
// roundings (each projection stored in T first): the same bits as the two kernels.
template <typename T>
__device__ __forceinline__ float gated_output(const Fp8LinearParams& p, float gate, float up,
                                              int j) {
  const float g = round_to<T>(finish_sum<T>(p, gate, j));
  const float u = round_to<T>(finish_sum<T>(p, up, p.n / 2 + j));
  return silu_mul<T>(g, u);
}

}  // namespace pagellm::cuda
