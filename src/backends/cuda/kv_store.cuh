// Stores of new K / V elements into the paged cache, shared by write_kv_cache and the fused
// rope_and_write_kv_cache: the model dtype copied, or FP8 codes of x / scale.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"

namespace pagellm::cuda {

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
    static_assert(VEC == 8, "16 bytes of a 16-bit dtype become 8 FP8 codes");
    float f[VEC];
    load16(src, f);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = float2_to_fp8x2<kFp8Interp<S>>(f[2 * i] * inv_scale, f[2 * i + 1] * inv_scale);
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
  } else {
    const __nv_fp8_storage_t code =
        __nv_cvt_float_to_fp8(to_float(*src) * inv_scale, __NV_SATFINITE, kFp8Interp<S>);
    *reinterpret_cast<__nv_fp8_storage_t*>(dst) = code;
  }
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
