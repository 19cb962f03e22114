// Split-KV attention instantiations for float.
#include "backends/cuda/attention/split_kv.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_split_kv<float>(const AttentionParams&, const AttentionPlan&, float*, float*,
                                             cudaStream_t);
}  // namespace pagellm::cuda::attention
