// Decode (split-KV) attention instantiations: tensor-core GQA path and CUDA-core path, for
// __nv_bfloat16.
#include "backends/cuda/attention/decode_mma.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_split_kv<__nv_bfloat16, __nv_bfloat16>(const AttentionParams&, const AttentionPlan&,
                                                    float*, float*, cudaStream_t);
template int split_kv_blocks_per_sm<__nv_bfloat16, __nv_bfloat16>(const AttentionParams&);
}  // namespace pagellm::cuda::attention
