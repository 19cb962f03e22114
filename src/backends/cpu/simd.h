// Internal helpers of the CPU kernels: the AVX2+FMA dispatch flag and a vectorised expf.
//
// Batch invariance with vector code: every element goes through the same lane-wise sequence of
// IEEE operations (explicit fused multiply-adds included) whatever lane, tile or thread it lands
// in, and a process uses one path (AVX2 or portable) for everything. So results never depend on
// how many tokens share a call.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PAGELLM_CPU_X86 1
#define PAGELLM_AVX2 [[gnu::target("avx2,fma")]]
#else
#define PAGELLM_CPU_X86 0
#endif

namespace pagellm::cpu::simd {

// True when the CPU has AVX2 and FMA (checked once).
bool has_avx2_fma();

#if PAGELLM_CPU_X86
// expf on 8 lanes: Cody-Waite range reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial, and
// 2^n from the exponent bits. Within ~2 ulp of expf over [-87.3, 88]; 0 below, +inf above.
PAGELLM_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.0f);
  const __m256 lo = _mm256_set1_ps(-87.3365478515625f);
  const __m256 too_big = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  const __m256 too_small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n in [-126, 127] after the clamp, so the biased exponent stays normal.
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), too_big);
  return _mm256_blendv_ps(y, _mm256_setzero_ps(), too_small);
}

// Mask of the first `count` (0..8) lanes, for masked loads and stores of row tails.
PAGELLM_AVX2 inline __m256i tail_mask(int count) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), idx);
}

// Sum of the 8 lanes in one fixed tree order.
PAGELLM_AVX2 inline float hsum8(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#endif

}  // namespace pagellm::cpu::simd
