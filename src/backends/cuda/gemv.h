// Skinny GEMM for decode-sized m, used by gemm() when it applies (see gemv.cu).
#pragma once

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

constexpr int kGemvMaxRows = 8;

// m in [1, kGemvMaxRows], k a multiple of one 16-byte vector, x and w 16-byte aligned.
bool gemv_applies(const GemmParams& p);
cudaError_t gemv(const GemmParams& p, cudaStream_t stream);

}  // namespace pagellm::cuda
