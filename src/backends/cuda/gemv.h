// Skinny GEMM for decode-sized m, used by gemm() when it applies (see gemv.cu).
#pragma once

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

// Measured on H100 (docs/PERF.md): faster than cuBLASLt at m = 1 (weight reads 1.1-1.2x), slower at
// m = 8; so only the smallest batches take it.
constexpr int kGemvMaxRows = 2;

// m in [1, kGemvMaxRows], k a multiple of one 16-byte vector, x and w 16-byte aligned.
bool gemv_applies(const GemmParams& p);
cudaError_t gemv(const GemmParams& p, cudaStream_t stream);
// The gate/up projection and SiLU-and-mul in one kernel: w = [gate; up] (p.n = 2 x inner rows),
// y [m, inner] = silu(x · gateᵀ) * (x · upᵀ), bit-identical to gemv() then silu_and_mul().
cudaError_t gemv_silu_and_mul(const GemmParams& p, cudaStream_t stream);

}  // namespace pagellm::cuda
