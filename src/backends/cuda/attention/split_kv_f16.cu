// Split-KV attention instantiations for __half.
#include "backends/cuda/attention/split_kv.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_split_kv<__half>(const AttentionParams&, const AttentionPlan&, float*, float*,
                                             cudaStream_t);
}  // namespace pagellm::cuda::attention
