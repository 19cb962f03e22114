// The activation row of the tensor-core GEMVs (gemm/fp8_weight_only_stream.cu,
// gemm/int_weight_gemv.cu), staged once per block in shared memory as f16: exact for bf16 values
// in f16's normal range, and a block whose largest |x| lies outside [2^-6, 2^15] rescales x by a
// power of two, undone on the sums.
#pragma once

#include <cuda_fp16.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_act_quant.cuh"

namespace pagellm::cuda {

// One pass of x (k values, k % 8 == 0) into xs[0, k_pad) as f16 times `scale`, zeros past k;
// returns the largest |x|. Blocks of kThreads threads.
template <int kThreads, typename T>
__device__ float stage_x_pass(const T* x, int k, int k_pad, float scale, __half* xs) {
  float amax = 0.f;
  for (int i = threadIdx.x * 8; i < k_pad; i += kThreads * 8) {
    float f[8] = {};
    if (i < k) load16(x + i, f);
    uint4 h;
    uint32_t* words = &h.x;
    amax = abs_max(f, amax);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const __half2 pair = __floats2half2_rn(f[2 * q] * scale, f[2 * q + 1] * scale);
      words[q] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    *reinterpret_cast<uint4*>(xs + i) = h;
  }
  return amax;
}

// Stages x as f16 for the whole block and returns what the sums are multiplied by: 1, or the
// inverse of the power of two that brought the largest |x| into [2^13, 2^14) when it lay outside
// [2^-6, 2^15] (a NaN or infinity is staged as it is and reaches the output, as in the other
// kernels). Blocks of kThreads threads; ends with a barrier.
template <int kThreads, typename T>
__device__ float stage_x_f16(const T* x, int k, int k_pad, __half* xs, float* scratch) {
  const float amax = block_max(stage_x_pass<kThreads>(x, k, k_pad, 1.f, xs), scratch);
  if (!(amax > 32768.f || (amax < 1.f / 64 && amax > 0.f))) return 1.f;
  int e = 0;
  frexpf(amax, &e);  // amax in [2^(e - 1), 2^e)
  e = max(-100, min(100, e));
  stage_x_pass<kThreads>(x, k, k_pad, ldexpf(1.f, 14 - e), xs);  // each thread rewrites its own
  __syncthreads();
  return ldexpf(1.f, e - 14);
}

}  // namespace pagellm::cuda
