// Hopper (wgmma) prefill attention instantiations for __nv_bfloat16.
#include "backends/cuda/attention/tile_sm90.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_tile_sm90<__nv_bfloat16>(const AttentionParams&, const AttentionPlan&,
                                                     cudaStream_t);
}  // namespace pagellm::cuda::attention
