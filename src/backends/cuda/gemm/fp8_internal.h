// Launchers behind fp8_linear (gemm/fp8_linear.cpp), shared with the device tests and benchmarks
// that pin one of them.
#pragma once

#include "backends/cuda/gemm/fp8_gemm.h"

namespace pagellm::cuda {

// Weight-only kernels, any m >= 1: y = x · dequant(wq)ᵀ (+ bias) with unquantized activations.
// `variant` 0 is fp8_linear's choice: variant 1 for m <= kFp8DefaultMaxRows and for block-scaled
// weights, variant 2 otherwise. The others pin one kernel for tests and the benchmark: 1 = the
// default configuration (at m = 1 the tensor-core stream kernel, fp8_weight_only_stream.cu, where
// its shape allows; else the CUDA-core kernel, fp8_weight_only.cu), 2 = tensor cores with the
// weights loaded straight into fragments (fp8_weight_only_mma.cu; per-channel scales only), 3, 4
// and 5 = CUDA cores with 4 rows per warp, 2 rows with k split over two warps, 4 rows split over
// two (bf16 only).
constexpr int kFp8WeightOnlyNumVariants = 6;
// Measured (docs/PERF.md): at m = 1 the CUDA-core kernel beat variant 2 on every Llama-3.1-8B
// shape (H100) and the stream kernel beats both (H200); variant 2 ties at m = 2 and wins from m =
// 4 on.
constexpr int kFp8DefaultMaxRows = 1;
// Whether variant 0 picks variant 1 for p.
inline bool fp8_weight_only_takes_default(const Fp8LinearParams& p) {
  return p.m <= kFp8DefaultMaxRows || p.w_block != 0;
}
const char* fp8_weight_only_variant_name(int variant);
cudaError_t fp8_weight_only(const Fp8LinearParams& p, int variant, cudaStream_t stream);
cudaError_t fp8_weight_only_mma(const Fp8LinearParams& p, cudaStream_t stream);
// One activation row (m == 1, k <= 32768, bf16 / f16) on tensor cores, the weights streamed
// through shared memory in whole lines (fp8_weight_only_stream.cu); gated: wq = [gate; up] and y
// [inner] = silu(gate) * up. Variant 1's (and so variant 0's) kernel at m = 1.
// cudaErrorNotSupported for other shapes.
cudaError_t fp8_weight_only_stream(const Fp8LinearParams& p, bool gated, cudaStream_t stream);
// Variant 1 with the gated MLP's activation in its epilogue, m <= 2: wq = [gate; up] (p.n = 2 x
// inner), y [m, inner] = silu(gate) * up, the same bits as variant 1 followed by silu_and_mul.
// cudaErrorNotSupported for m > 2 or fp32.
cudaError_t fp8_weight_only_silu_and_mul(const Fp8LinearParams& p, cudaStream_t stream);

// y [m, n]: in place, from the unscaled product stored as bf16 to dtype,
// y[i, j] = y[i, j] * x_scale[i] * w_scale[j] (+ bias[j]) (fp8_quantize.cu).
cudaError_t fp8_scale_output(const Fp8LinearParams& p, cudaStream_t stream);

// y [m, n] += bias [n] in place (fp8_quantize.cu).
cudaError_t fp8_add_bias(const Fp8LinearParams& p, cudaStream_t stream);

}  // namespace pagellm::cuda
