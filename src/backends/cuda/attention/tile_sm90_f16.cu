// Hopper (wgmma) prefill attention instantiations for __half.
#include "backends/cuda/attention/tile_sm90.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_tile_sm90<__half>(const AttentionParams&, const AttentionPlan&,
                                              cudaStream_t);
}  // namespace pagellm::cuda::attention
