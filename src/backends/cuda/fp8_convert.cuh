// FP8 (e4m3 / e5m2) conversions on the device, shared by the FP8 GEMMs and the FP8 KV cache.
// Decoding is exact (every e4m3 and e5m2 value is an f16 value, and a bf16 value); encoding rounds
// to nearest even and saturates finite values, the host encoding of common/fp8.h.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace pagellm::cuda {

// The FP8 storage types used as template arguments: __nv_fp8_e4m3 / __nv_fp8_e5m2 (one byte).
template <typename S>
inline constexpr bool kIsFp8 = std::is_same_v<S, __nv_fp8_e4m3> || std::is_same_v<S, __nv_fp8_e5m2>;

template <typename S>
inline constexpr __nv_fp8_interpretation_t kFp8Interp =
    std::is_same_v<S, __nv_fp8_e5m2> ? __NV_E5M2 : __NV_E4M3;

// A cache of element type KV's per-tensor scale: *scale for FP8 caches (1 when null), 1 otherwise.
template <typename KV>
__device__ __forceinline__ float kv_scale(const float* scale) {
  if constexpr (kIsFp8<KV>) return scale ? *scale : 1.f;
  return 1.f;
}

// Two FP8 codes (low byte first) -> a packed pair of T (low half first), exactly (one cvt
// instruction on sm_89+).
template <typename T, __nv_fp8_interpretation_t kInterp = __NV_E4M3>
__device__ __forceinline__ uint32_t fp8x2_to_pair(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), kInterp);
  if constexpr (std::is_same_v<T, __half>) {
    return uint32_t{h.x} | uint32_t{h.y} << 16;
  } else {
    const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(__half2(h)));
    return *reinterpret_cast<const uint32_t*>(&b);
  }
}

// 16 FP8 codes -> 8 packed pairs of T (pair q = codes 2q, 2q + 1).
template <typename T, __nv_fp8_interpretation_t kInterp = __NV_E4M3>
__device__ __forceinline__ void fp8x16_to_pairs(const uint4& v, uint32_t (&pairs)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    pairs[2 * i] = fp8x2_to_pair<T, kInterp>(words[i] & 0xffffu);
    pairs[2 * i + 1] = fp8x2_to_pair<T, kInterp>(words[i] >> 16);
  }
}

// The pairs of fp8x4_to_pairs_fast and fp8x4_to_pairs_02_13 hold each code's bits at the top
// of a T: this multiplies them by the power of two that restores the value. From its bits (a
// conversion here would cost what the bit tricks save): bf16 2^120 = 0x7b80, 2^112 = 0x7780; f16
// 2^8 = 0x5c00; e5m2 -> f16 needs none.
template <typename T, __nv_fp8_interpretation_t kInterp>
__device__ __forceinline__ void fp8_pairs_rebias(uint32_t& lo, uint32_t& hi) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  constexpr bool kE4M3 = kInterp == __NV_E4M3;
  if constexpr (kBf16) {
    const uint32_t bits = kE4M3 ? 0x7b807b80u : 0x77807780u;
    const __nv_bfloat162 f = *reinterpret_cast<const __nv_bfloat162*>(&bits);
    __nv_bfloat162 x = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&lo), f);
    __nv_bfloat162 y = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&hi), f);
    lo = *reinterpret_cast<const uint32_t*>(&x);
    hi = *reinterpret_cast<const uint32_t*>(&y);
  } else if constexpr (kE4M3) {
    const uint32_t bits = 0x5c005c00u;
    const __half2 f = *reinterpret_cast<const __half2*>(&bits);
    __half2 x = __hmul2(*reinterpret_cast<const __half2*>(&lo), f);
    __half2 y = __hmul2(*reinterpret_cast<const __half2*>(&hi), f);
    lo = *reinterpret_cast<const uint32_t*>(&x);
    hi = *reinterpret_cast<const uint32_t*>(&y);
  }
}

// Mantissa bits of T minus those of the FP8 format: where a code's exponent and mantissa go.
template <typename T, __nv_fp8_interpretation_t kInterp>
inline constexpr int kFp8Shift = (std::is_same_v<T, __nv_bfloat16> ? 7 : 10) -
                                 (kInterp == __NV_E4M3 ? 3 : 2);

// Four FP8 codes (one word, low byte first) -> two packed pairs of T (codes 0, 1 and 2, 3),
// exactly, with integer ops and one 16-bit multiply per pair: the conversion instructions of
// fp8x2_to_pair run at a quarter of the ALU rate, too slow for attention to stream an FP8 KV cache
// at HBM speed. Each code's sign moves to bit 15 and its exponent and mantissa to the top of T's
// (a T value 2^(bias_T - bias_fp8) times too small, subnormals included), and the multiply by that
// power of two restores it (e5m2 -> f16 needs none). NaN codes decode to finite values; the cache
// never holds them (writes saturate).
template <typename T, __nv_fp8_interpretation_t kInterp>
__device__ __forceinline__ void fp8x4_to_pairs_fast(uint32_t four, uint32_t& lo, uint32_t& hi) {
  constexpr int kShift = kFp8Shift<T, kInterp>;
  const uint32_t a = __byte_perm(four, 0, 0x4140);  // [c0, 0, c1, 0]
  const uint32_t b = __byte_perm(four, 0, 0x4342);  // [c2, 0, c3, 0]
  lo = ((a & 0x00800080u) << 8) | ((a & 0x007f007fu) << kShift);
  hi = ((b & 0x00800080u) << 8) | ((b & 0x007f007fu) << kShift);
  fp8_pairs_rebias<T, kInterp>(lo, hi);
}

// Four FP8 codes (one word, low byte first) -> the T pairs (codes 0, 2) and (codes 1, 3), exactly,
// as fp8x4_to_pairs_fast does for neighbours but without its byte permutes: each 16-bit half of
// the word already holds code 1 (3) in its high byte, sign on top, and the word shifted left by 8
// holds codes 0 (2) there; the exponent and mantissa move down into place, the sign stays.
template <typename T, __nv_fp8_interpretation_t kInterp>
__device__ __forceinline__ void fp8x4_to_pairs_02_13(uint32_t four, uint32_t& p02, uint32_t& p13) {
  constexpr int kShift = kFp8Shift<T, kInterp>;
  constexpr uint32_t kMag = (0x7fu << kShift) * 0x10001u;  // exponent and mantissa in each half
  const uint32_t high = four, low = four << 8;             // codes 1, 3 / 0, 2 in the high bytes
  p02 = ((low >> (8 - kShift)) & kMag) | (low & 0x80008000u);
  p13 = ((high >> (8 - kShift)) & kMag) | (high & 0x80008000u);
  fp8_pairs_rebias<T, kInterp>(p02, p13);
}

// Two FP8 codes -> two floats, exactly.
template <__nv_fp8_interpretation_t kInterp>
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t two) {
  return __half22float2(
      __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), kInterp)));
}

// 16 e4m3 codes (one 16-byte load, code i at byte i) -> out[i / 8][i % 8] as floats, exactly.
__device__ __forceinline__ void fp8x16_to_floats(const uint4& v, float (&out)[2][8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float2 f = fp8x2_to_float2<__NV_E4M3>((words[q / 2] >> (16 * (q % 2))) & 0xffffu);
    out[q / 4][2 * (q % 4)] = f.x;
    out[q / 4][2 * (q % 4) + 1] = f.y;
  }
}

// fp8(a), fp8(b) packed low byte first, rounded to nearest even and saturated.
template <__nv_fp8_interpretation_t kInterp>
__device__ __forceinline__ uint16_t float2_to_fp8x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kInterp);
}

}  // namespace pagellm::cuda
