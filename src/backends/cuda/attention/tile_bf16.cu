// Tensor-core tile attention instantiations for __nv_bfloat16.
#include "backends/cuda/attention/tile.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_tile<__nv_bfloat16, __nv_bfloat16>(const AttentionParams&, const AttentionPlan&,
                                                cudaStream_t);
}  // namespace pagellm::cuda::attention
