// Tensor-core tile attention instantiations for __half.
#include "backends/cuda/attention/tile.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_tile<__half, __half>(const AttentionParams&, const AttentionPlan&,
                                         cudaStream_t);
}  // namespace pagellm::cuda::attention
