// Decode (split-KV) attention instantiations: tensor-core GQA path and CUDA-core path, for __half.
#include "backends/cuda/attention/decode_mma.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_split_kv<__half, __half>(const AttentionParams&, const AttentionPlan&, float*,
                                             float*, cudaStream_t);
template int split_kv_blocks_per_sm<__half, __half>(const AttentionParams&);
}  // namespace pagellm::cuda::attention
