// Writes new K/V rows into the paged cache through the slot mapping.
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

// One block per token; threads cover num_kv_heads * head_dim in VEC-wide pieces. The cache row of a
// slot is contiguous ([num_kv_heads, head_dim]) because of the [block, offset, head, dim] layout.
template <typename T, int VEC>
__global__ void write_kv_cache_kernel(const __grid_constant__ KvCacheWriteParams p) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.num_slots) return;
  const int row = p.num_kv_heads * p.head_dim;
  const T* k = static_cast<const T*>(p.key) + t * p.key_token_stride;  // [num_kv_heads, head_dim]
  const T* v =
      static_cast<const T*>(p.value) + t * p.value_token_stride;  // [num_kv_heads, head_dim]
  T* kc = static_cast<T*>(p.k_cache) + slot * row;                // [num_kv_heads, head_dim]
  T* vc = static_cast<T*>(p.v_cache) + slot * row;
  for (int i = threadIdx.x * VEC; i < row; i += blockDim.x * VEC) {
    if constexpr (VEC > 1) {
      *reinterpret_cast<Vec16<T>*>(kc + i) = *reinterpret_cast<const Vec16<T>*>(k + i);
      *reinterpret_cast<Vec16<T>*>(vc + i) = *reinterpret_cast<const Vec16<T>*>(v + i);
    } else {
      kc[i] = k[i];
      vc[i] = v[i];
    }
  }
}

}  // namespace

cudaError_t write_kv_cache(const KvCacheWriteParams& in, cudaStream_t stream) {
  KvCacheWriteParams p = in;
  if (p.num_tokens < 0 || p.num_kv_heads <= 0 || p.head_dim <= 0) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.key || !p.value || !p.k_cache || !p.v_cache || !p.slot_mapping)
    return cudaErrorInvalidValue;
  const int row = p.num_kv_heads * p.head_dim;
  if (p.key_token_stride == 0) p.key_token_stride = row;
  if (p.value_token_stride == 0) p.value_token_stride = row;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    constexpr int kVec = Vec16<scalar_t>::kSize;
    const bool vec = row % kVec == 0 && p.key_token_stride % kVec == 0 &&
                     p.value_token_stride % kVec == 0 && aligned16(p.key) && aligned16(p.value) &&
                     aligned16(p.k_cache) && aligned16(p.v_cache);
    const int threads = 128;
    if (vec) {
      write_kv_cache_kernel<scalar_t, kVec><<<p.num_tokens, threads, 0, stream>>>(p);
    } else {
      write_kv_cache_kernel<scalar_t, 1><<<p.num_tokens, threads, 0, stream>>>(p);
    }
    return launch_status();
  });
}

}  // namespace pagellm::cuda
