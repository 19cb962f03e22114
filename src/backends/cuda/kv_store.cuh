// Stores of new K / V elements into the paged cache, shared by write_kv_cache and the fused
// rope_and_write_kv_cache: the model dtype copied, or FP8 codes of x / scale.
#pragma once

#include <type_traits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"

namespace pagellm::cuda {

// Stores 16 bytes' worth of T values (f, each exactly a T) into the cache row as S: the T values
// themselves, or 8 FP8 codes of f / scale.
template <typename T, typename S>
__device__ __forceinline__ void store_vec16_elems(const float (&f)[Vec16<T>::kSize], S* dst,
                                                  float inv_scale) {
  if constexpr (std::is_same_v<S, T>) {
    store16(dst, f);
  } else {
    static_assert(Vec16<T>::kSize == 8, "16 bytes of a 16-bit dtype become 8 FP8 codes");
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = float2_to_fp8x2<kFp8Interp<S>>(f[2 * i] * inv_scale, f[2 * i + 1] * inv_scale);
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
  }
}

// Stores VEC elements of one K or V row into the cache row, converting to the cache's type S.
template <typename T, typename S, int VEC>
__device__ __forceinline__ void store_elems(const T* src, S* dst, float inv_scale) {
  if constexpr (std::is_same_v<S, T>) {
    if constexpr (VEC > 1) {
      *reinterpret_cast<Vec16<T>*>(dst) = *reinterpret_cast<const Vec16<T>*>(src);
    } else {
      *dst = *src;
    }
  } else if constexpr (VEC > 1) {
    float f[VEC];
    load16(src, f);
    store_vec16_elems<T, S>(f, dst, inv_scale);
  } else {
    const __nv_fp8_storage_t code =
        __nv_cvt_float_to_fp8(to_float(*src) * inv_scale, __NV_SATFINITE, kFp8Interp<S>);
    *reinterpret_cast<__nv_fp8_storage_t*>(dst) = code;
  }
}

// Fills a write's default token strides; false when its shapes or dtypes are unusable, or, with
// tokens to write, a pointer is missing. Shared by write_kv_cache and rope_and_write_kv_cache.
inline bool prepare_kv_write(KvCacheWriteParams& p) {
  if (p.num_tokens < 0 || p.num_kv_heads <= 0 || p.head_dim <= 0) return false;
  if (p.cache_dtype != p.dtype && !is_fp8(p.cache_dtype)) return false;
  if (p.num_tokens > 0 &&
      (!p.key || !p.value || !p.k_cache || !p.v_cache || !p.slot_mapping))
    return false;
  const int row = p.num_kv_heads * p.head_dim;
  if (p.key_token_stride == 0) p.key_token_stride = row;
  if (p.value_token_stride == 0) p.value_token_stride = row;
  return true;
}

// f(static_cast<S*>(nullptr)) with S the cache's element type for model type T: T itself, or the
// FP8 code of cache_dtype.
template <typename T, typename F>
cudaError_t with_cache_type(DType cache_dtype, F&& f) {
  if (cache_dtype == DType::kF8E4M3) return f(static_cast<__nv_fp8_e4m3*>(nullptr));
  if (cache_dtype == DType::kF8E5M2) return f(static_cast<__nv_fp8_e5m2*>(nullptr));
  return f(static_cast<T*>(nullptr));
}

// Whether the value rows and both caches take VEC-wide (16-byte source) stores.
template <typename T, typename S>
bool kv_value_vectorizable(const KvCacheWriteParams& p) {
  constexpr int kVec = Vec16<T>::kSize;
  return (p.num_kv_heads * p.head_dim) % kVec == 0 && p.value_token_stride % kVec == 0 &&
         aligned16(p.value) && aligned16(p.k_cache) && aligned16(p.v_cache) &&
         (!kIsFp8<S> || kVec == 8);
}

}  // namespace pagellm::cuda
