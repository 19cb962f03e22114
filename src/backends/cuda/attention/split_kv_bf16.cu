// Split-KV attention instantiations for __nv_bfloat16.
#include "backends/cuda/attention/split_kv.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_split_kv<__nv_bfloat16>(const AttentionParams&, const AttentionPlan&, float*, float*,
                                             cudaStream_t);
}  // namespace pagellm::cuda::attention
