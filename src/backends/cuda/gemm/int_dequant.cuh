// Dequantization of packed INT4 / INT8 weights in registers (the layout of gemm/int_gemm.h),
// shared by the weight-only kernels (gemm/int_weight_only.cu: k split over a block's warps;
// gemm/int_weight_stream.cu: weights and activations staged through a cp.async pipeline;
// gemm/int_weight_gemv.cu: one activation row, whole weight lines through shared memory).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/common.cuh"

namespace pagellm::cuda::intq {

template <typename T>
using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;

template <typename T>
__device__ __forceinline__ uint32_t as_u32(Pair<T> v) {
  return *reinterpret_cast<uint32_t*>(&v);
}
template <typename T>
__device__ __forceinline__ Pair<T> as_pair(uint32_t v) {
  return *reinterpret_cast<Pair<T>*>(&v);
}

// Columns per 16-byte piece.
template <int BITS>
constexpr int kVals = 128 / BITS;

// Where the kernels that stage activations in shared memory put an activation row's 16-byte unit u:
// at 4 bits lane t of a piece round reads units 4t .. 4t + 3, and unit u ^ 2 * (bit 3 of u) puts
// the four t's of a quarter-warp in distinct banks (8 bits: units 2t, 2t + 1, already distinct).
template <int BITS>
__device__ __forceinline__ int act_unit(int u) {
  if constexpr (BITS == 4) return u ^ (((u >> 3) & 1) << 1);
  return u;
}

// The group constants of one weight row for one piece: scale pair, and for 4 bits (magic + z) in
// T, for 8 bits 1024 + z in f16.
template <typename T, int BITS>
struct GroupConst {
  uint32_t scale2;
  uint32_t zero2;
  uint32_t neg_zero16;  // f16, 4 bits: -(64 + z) pair, for nibbles read at bit 4 (q_minus_z_f16)
  float scale;
};

// A row's scale and zero point for one group, as stored (loaded together with the weights, so that
// they are not a second memory round trip after them).
template <typename T>
struct RawGroup {
  T scale;
  int zero;
};

// The 16-bit pattern of magic + z, exact (the magic's unit in the last place is 1): bf16 128 is
// 0x4300 and f16 1024 is 0x6400, so magic + z is the pattern plus z for z < 128 (bf16) or 1024
// (f16) — every 4-bit zero, and every 8-bit one in f16.
template <typename T, int BITS>
constexpr uint32_t kZeroMagic = (BITS == 8 || std::is_same_v<T, __half>) ? 0x6400u : 0x4300u;

template <typename T, int BITS>
__device__ __forceinline__ GroupConst<T, BITS> group_const(const RawGroup<T>& r) {
  const T s = r.scale;
  GroupConst<T, BITS> gc;
  gc.scale = to_float(s);
  if constexpr (std::is_same_v<T, __half>)
    gc.scale2 = as_u32<T>(__half2(s, s));
  else
    gc.scale2 = as_u32<T>(__nv_bfloat162(s, s));
  gc.zero2 = (kZeroMagic<T, BITS> + uint32_t(r.zero)) * 0x00010001u;
  gc.neg_zero16 = (0xd400u + 16u * uint32_t(r.zero)) * 0x00010001u;  // f16 -(64 + z), exact
  return gc;
}

// (x & mask) | bits as one LOP3. Written in C++, ptxas emits two: both constants stay immediates
// and a LOP3 takes only one. As asm operands the constants are registers, set once outside the
// loops (Nsight Compute counted 69 LOP3 per warp and step in the wgmma kernel at m = 1, 128 of its
// 258 instructions dequantizing: docs/PERF.md).
__device__ __forceinline__ uint32_t mask_or(uint32_t x, uint32_t mask, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(x), "r"(mask), "r"(bits));  // (a & b) | c
  return r;
}

// 4 bits: 16 packed bytes -> the piece's 16 pairs (magic + q) of T (pair q = columns 2q, 2q + 1),
// exact: one mask puts nibbles j and j + 4 of a word (adjacent columns) into the mantissas of the
// magic pair.
template <typename T>
__device__ __forceinline__ void magic_pairs(const uint4& v, uint32_t (&pairs)[16]) {
  constexpr uint32_t kMagic = kZeroMagic<T, 4> * 0x00010001u;
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      pairs[4 * i + j] = mask_or(words[i] >> (4 * j), 0x000f000fu, kMagic);
}

// f16, 4 bits: 16 packed bytes -> the piece's 16 pairs q - z (pair q = columns 2q, 2q + 1), with
// one shift per word instead of three: nibbles j and j + 4 at bit 0 become 1024 + q (less 1024 +
// z), and at bit 4 1024 + 16 q (times 1/16, less 64 + z, in one fma), all exact.
__device__ __forceinline__ void q_minus_z_f16(const uint4& v, const GroupConst<__half, 4>& gc,
                                              uint32_t (&pairs)[16]) {
  constexpr uint32_t kMagic = 0x64006400u;
  const __half2 sixteenth = __float2half2_rn(1.f / 16);
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t w = h == 0 ? words[i] : words[i] >> 8;
      const uint32_t lo = mask_or(w, 0x000f000fu, kMagic), hi = mask_or(w, 0x00f000f0u, kMagic);
      pairs[4 * i + 2 * h] =
          as_u32<__half>(__hsub2(as_pair<__half>(lo), as_pair<__half>(gc.zero2)));
      pairs[4 * i + 2 * h + 1] =
          as_u32<__half>(__hfma2(as_pair<__half>(hi), sixteenth, as_pair<__half>(gc.neg_zero16)));
    }
}

// 16 packed bytes -> kVals / 2 pairs of T (pair q = the piece's columns 2q, 2q + 1): the weights,
// or with LATE the exact integers q - z (the scale is then applied to the mma's sums).
template <typename T, int BITS, bool LATE>
__device__ __forceinline__ void dequant_piece(const uint4& v, const GroupConst<T, BITS>& gc,
                                              uint32_t (&pairs)[kVals<BITS> / 2]) {
  if constexpr (BITS == 4 && std::is_same_v<T, __half>) {
    q_minus_z_f16(v, gc, pairs);
    if constexpr (!LATE)
#pragma unroll
      for (int q = 0; q < 16; ++q)
        pairs[q] = as_u32<T>(__hmul2(as_pair<T>(pairs[q]), as_pair<T>(gc.scale2)));
  } else if constexpr (BITS == 4) {
    magic_pairs<T>(v, pairs);
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const Pair<T> d = __hsub2(as_pair<T>(pairs[q]), as_pair<T>(gc.zero2));
      pairs[q] = LATE ? as_u32<T>(d) : as_u32<T>(__hmul2(d, as_pair<T>(gc.scale2)));
    }
  } else {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint32_t raw = __byte_perm(words[i], 0x64646464u, j == 0 ? 0x4140u : 0x4342u);
        const __half2 d = __hsub2(as_pair<__half>(raw), as_pair<__half>(gc.zero2));
        if constexpr (std::is_same_v<T, __half>) {
          pairs[2 * i + j] = LATE ? as_u32<T>(d) : as_u32<T>(__hmul2(d, as_pair<T>(gc.scale2)));
        } else {
          const float2 f = __half22float2(d);  // |q - z| <= 255: exact in bf16
          pairs[2 * i + j] = LATE
                                 ? as_u32<T>(__floats2bfloat162_rn(f.x, f.y))
                                 : as_u32<T>(__floats2bfloat162_rn(f.x * gc.scale, f.y * gc.scale));
        }
      }
  }
}

}  // namespace pagellm::cuda::intq
