// Dynamic FP8 (e4m3) activation quantization on the device: the arithmetic of
// quantize_fp8_per_token (gemm/fp8_gemm.h), shared by that kernel and by the kernel that writes an
// activation and quantizes it on the way out (RMSNorm: kernels.h Fp8Out), so that the fused and the
// separate paths give the same bytes and scales.
#pragma once

#include <cuda_fp8.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/fp8_gemm.h"

namespace pagellm::cuda {

// The scale of a row (or 128-column group) whose largest magnitude is amax. An IEEE division (not
// a reciprocal), so that the host reference (common/fp8.h) reproduces it.
__device__ __forceinline__ float fp8_act_scale(float amax) {
  return fmaxf(amax, kFp8MinAmax) / kFp8Max;
}

// Largest magnitude of n values. fmaxf drops NaN, as std::fmax does in the host reference: a NaN
// element becomes a NaN code without poisoning its row's scale.
template <int N>
__device__ __forceinline__ float abs_max(const float (&f)[N], float amax = 0.f) {
#pragma unroll
  for (int e = 0; e < N; ++e) amax = fmaxf(amax, fabsf(f[e]));
  return amax;
}

// A row's (or group's) scale with its IEEE reciprocal, for coding many values as x / s.
struct Fp8Divisor {
  float s, inv;
};
__device__ __forceinline__ Fp8Divisor fp8_divisor(float s) { return {s, 1.f / s}; }

// x / d.s exactly as the IEEE division rounds it, in three operations instead of the division's
// routine (which set the time of the kernels that quantize as they write: docs/PERF.md).
// Markstein's correction: q = x * inv is within an ulp of x / s when inv is 1 / s correctly
// rounded, the residual x - s * q is exact in one FMA, and q + residual * inv rounds to the correct
// quotient (the last steps of CUDA's own division). It holds while x / s stays in fp32's normal
// range, which a quantizer's values keep (|x| <= amax = 448 s, with s >= 1e-12 / 448; a quotient
// too small for that codes as zero either way). The sign is x's (s > 0): the correction turns
// -0 into +0 (-0 + +0), and e4m3 keeps the sign of zero. An infinite scale (a row holding ±inf)
// has inv == 0 and takes the division.
__device__ __forceinline__ float fp8_quotient(float x, Fp8Divisor d) {
  if (d.inv == 0.f) return x / d.s;
  const float q = x * d.inv;
  return copysignf(fmaf(fmaf(-q, d.s, x), d.inv, q), x);
}

// f[e] / s as e4m3 codes, four per word, low byte first (round to nearest even, ±448 on overflow,
// NaN kept), stored at dst (N / 4 words, aligned to N bytes). Bit-exact with common/fp8.h's
// f32_to_fp8(f / s) on the host.
template <int N>
__device__ __forceinline__ void store_e4m3(uint8_t* dst, const float (&f)[N], Fp8Divisor d) {
  static_assert(N == 4 || N == 8, "one or two words");
  uint32_t w[N / 4];
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(fp8_quotient(f[4 * i], d), fp8_quotient(f[4 * i + 1], d)), __NV_SATFINITE,
        __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(fp8_quotient(f[4 * i + 2], d), fp8_quotient(f[4 * i + 3], d)), __NV_SATFINITE,
        __NV_E4M3);
    w[i] = lo | hi << 16;
  }
  if constexpr (N == 4) {
    *reinterpret_cast<uint32_t*>(dst) = w[0];
  } else {
    *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  }
}

// Where a row-writing kernel puts the quantized copy of its N values at column `col` of row `row`:
// with 128-column groups, each group's lanes (128 / N of them, aligned in the warp, all calling)
// agree on the group's amax by shuffles and the group's first lane writes the scale
// ([cols / 128, rows], group-major); per row, `row_scale` is the row's scale (block_max first).
template <int N>
__device__ __forceinline__ void quantize_to_fp8_out(const Fp8Out& q, int64_t row, int64_t rows,
                                                    int64_t cols, int64_t col, const float (&f)[N],
                                                    float row_scale, bool valid) {
  float s = row_scale;
  if (q.group == kFp8Block) {
    float amax = valid ? abs_max(f) : 0.f;
#pragma unroll
    for (int o = kFp8Block / N / 2; o > 0; o >>= 1)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    s = fp8_act_scale(amax);
    if (valid && col % kFp8Block == 0) q.scale[(col / kFp8Block) * rows + row] = s;
  }
  if (valid) store_e4m3(static_cast<uint8_t*>(q.q) + row * cols + col, f, fp8_divisor(s));
}

}  // namespace pagellm::cuda
