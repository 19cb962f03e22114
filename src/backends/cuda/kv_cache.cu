// Writes new K/V rows into the paged cache through the slot mapping, in the model dtype or, for an
// FP8 cache, quantized with the per-tensor scales.
#include "backends/cuda/kv_store.cuh"

namespace pagellm::cuda {
namespace {

// One block per token; threads cover num_kv_heads * head_dim in VEC-wide pieces. The cache row of a
// slot is contiguous ([num_kv_heads, head_dim]) because of the [block, offset, head, dim] layout.
template <typename T, typename S, int VEC>
__global__ void write_kv_cache_kernel(const __grid_constant__ KvCacheWriteParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slot_mapping[t];
  if (slot < 0 || slot >= p.num_slots) return;
  const int row = p.num_kv_heads * p.head_dim;
  const T* k = static_cast<const T*>(p.key) + t * p.key_token_stride;  // [num_kv_heads, head_dim]
  const T* v =
      static_cast<const T*>(p.value) + t * p.value_token_stride;  // [num_kv_heads, head_dim]
  S* kc = static_cast<S*>(p.k_cache) + slot * row;                // [num_kv_heads, head_dim]
  S* vc = static_cast<S*>(p.v_cache) + slot * row;
  // x / scale as x * (1 / scale): one division per block, not per element.
  float inv_k = 1.f, inv_v = 1.f;
  if constexpr (kIsFp8<S>) {
    inv_k = p.k_scale ? 1.f / *p.k_scale : 1.f;
    inv_v = p.v_scale ? 1.f / *p.v_scale : 1.f;
  }
  for (int i = threadIdx.x * VEC; i < row; i += blockDim.x * VEC) {
    store_elems<T, S, VEC>(k + i, kc + i, inv_k);
    store_elems<T, S, VEC>(v + i, vc + i, inv_v);
  }
}

template <typename T, typename S>
cudaError_t launch_write(const KvCacheWriteParams& p, cudaStream_t stream) {
  constexpr int kVec = Vec16<T>::kSize;
  const int row = p.num_kv_heads * p.head_dim;
  const bool vec = row % kVec == 0 && p.key_token_stride % kVec == 0 && aligned16(p.key) &&
                   kv_value_vectorizable<T, S>(p);
  const int threads = 128;
  if constexpr (!kIsFp8<S> || kVec == 8)
    if (vec) return launch_kernel(write_kv_cache_kernel<T, S, kVec>, p.num_tokens, threads, 0, stream, p);
  return launch_kernel(write_kv_cache_kernel<T, S, 1>, p.num_tokens, threads, 0, stream, p);
}

// Block 0 reduces the keys, block 1 the values.
template <typename T>
__global__ void kv_scales_kernel(const __grid_constant__ KvCacheWriteParams p, float* k_scale,
                                 float* v_scale, float fp8_max) {
  pdl_launch_dependents();
  pdl_wait();
  const bool key = blockIdx.x == 0;
  const T* x = static_cast<const T*>(key ? p.key : p.value);
  const int64_t stride = key ? p.key_token_stride : p.value_token_stride;
  const int row = p.num_kv_heads * p.head_dim;
  float amax = 0.f;
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0 || slot >= p.num_slots) continue;
    for (int i = threadIdx.x; i < row; i += blockDim.x)
      amax = fmaxf(amax, fabsf(to_float(x[t * stride + i])));
  }
  __shared__ float scratch[32];
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w) amax = fmaxf(amax, scratch[w]);
    *(key ? k_scale : v_scale) = 2.f * fmaxf(amax, 1e-6f) / fp8_max;
  }
}

}  // namespace

cudaError_t compute_kv_scales(const KvCacheWriteParams& in, float* k_scale, float* v_scale,
                              cudaStream_t stream) {
  KvCacheWriteParams p = in;
  if (!is_fp8(p.cache_dtype) || !k_scale || !v_scale || p.num_tokens < 0 || p.num_kv_heads <= 0 ||
      p.head_dim <= 0 || !p.key || !p.value || !p.slot_mapping)
    return cudaErrorInvalidValue;
  const int row = p.num_kv_heads * p.head_dim;
  if (p.key_token_stride == 0) p.key_token_stride = row;
  if (p.value_token_stride == 0) p.value_token_stride = row;
  const float fp8_max = p.cache_dtype == DType::kF8E4M3 ? 448.f : 57344.f;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    return launch_kernel(kv_scales_kernel<scalar_t>, 2, 256, 0, stream, p, k_scale, v_scale, fp8_max);
  });
}

cudaError_t write_kv_cache(const KvCacheWriteParams& in, cudaStream_t stream) {
  KvCacheWriteParams p = in;
  if (!prepare_kv_write(p)) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    return with_cache_type<scalar_t>(p.cache_dtype, [&](auto* cache_elem) {
      return launch_write<scalar_t, std::remove_pointer_t<decltype(cache_elem)>>(p, stream);
    });
  });
}

}  // namespace pagellm::cuda
