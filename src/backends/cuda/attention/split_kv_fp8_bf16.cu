// Decode (split-KV) attention instantiations over FP8 caches (e4m3, e5m2) for __nv_bfloat16 models.
#include "backends/cuda/attention/decode_mma.cuh"

namespace pagellm::cuda::attention {
template cudaError_t launch_split_kv<__nv_bfloat16, __nv_fp8_e4m3>(const AttentionParams&,
                                                       const AttentionPlan&, float*, float*,
                                                       cudaStream_t);
template cudaError_t launch_split_kv<__nv_bfloat16, __nv_fp8_e5m2>(const AttentionParams&,
                                                       const AttentionPlan&, float*, float*,
                                                       cudaStream_t);
template int split_kv_blocks_per_sm<__nv_bfloat16, __nv_fp8_e4m3>(const AttentionParams&);
template int split_kv_blocks_per_sm<__nv_bfloat16, __nv_fp8_e5m2>(const AttentionParams&);
}  // namespace pagellm::cuda::attention
