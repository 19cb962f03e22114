// Tensor-core tile attention instantiations over FP8 caches (e4m3, e5m2) for __half models.
#include "backends/cuda/attention/tile.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_tile<__half, __nv_fp8_e4m3>(const AttentionParams&, const AttentionPlan&,
                                                   cudaStream_t);
template cudaError_t launch_tile<__half, __nv_fp8_e5m2>(const AttentionParams&, const AttentionPlan&,
                                                   cudaStream_t);
}  // namespace pagellm::cuda::attention
