// FP8 numbers on the host: OCP float8 e4m3fn (4 exponent bits, bias 7, no infinities, max 448;
// the format of FP8 checkpoints and of the default FP8 KV cache) and e5m2 (5 exponent bits, bias
// 15, IEEE-like, max 57344). Encoding rounds to nearest even and saturates finite values to the
// largest finite number (as vLLM clamps before it casts); NaN stays NaN. Decoding is exact.
// Matches the CUDA __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...) conversions bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace pagellm {

enum class Fp8Format { kE4M3, kE5M2 };

constexpr float kFp8E4M3Max = 448.0f;
constexpr float kFp8E5M2Max = 57344.0f;

inline float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? kFp8E4M3Max : kFp8E5M2Max; }

inline float fp8_to_f32(uint8_t v, Fp8Format f) {
  const int man_bits = f == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Format::kE4M3 ? 7 : 15;
  const int exp_mask = f == Fp8Format::kE4M3 ? 0xf : 0x1f;
  const bool neg = (v & 0x80) != 0;
  const int e = (v >> man_bits) & exp_mask;
  const int m = v & ((1 << man_bits) - 1);
  float out;
  if (f == Fp8Format::kE4M3 && e == 0xf && m == 0x7) {
    out = NAN;
  } else if (f == Fp8Format::kE5M2 && e == 0x1f) {
    out = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    out = std::ldexp(float(m), 1 - bias - man_bits);  // subnormal
  } else {
    out = std::ldexp(float((1 << man_bits) | m), e - bias - man_bits);
  }
  return neg ? -out : out;
}

// Round to nearest even, saturating to ±max; NaN -> NaN (0x7f / 0x7e | sign).
inline uint8_t f32_to_fp8(float x, Fp8Format f) {
  const int man_bits = f == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = f == Fp8Format::kE4M3 ? 7 : 15;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return uint8_t(sign | (f == Fp8Format::kE4M3 ? 0x7f : 0x7e));
  const float a = std::fabs(x);
  const uint8_t max_code = f == Fp8Format::kE4M3 ? 0x7e : 0x7b;
  if (a >= fp8_max(f)) return uint8_t(sign | max_code);
  // Quantum of a's binade (subnormal quantum below the smallest normal).
  int exp = 0;
  std::frexp(a, &exp);  // a = frac * 2^exp, frac in [0.5, 1)
  const int min_exp = 1 - bias;  // exponent of the smallest normal, as 2^min_exp
  const int e = std::max(exp - 1, min_exp);
  const float quantum = std::ldexp(1.0f, e - man_bits);
  float q = std::nearbyint(a / quantum);  // default rounding mode: to nearest even
  // q in [0, 2^(man_bits+1)]; a carry into the next binade is handled by re-encoding.
  float r = q * quantum;
  if (r >= fp8_max(f)) return uint8_t(sign | max_code);
  if (r == 0) return sign;
  int rexp = 0;
  std::frexp(r, &rexp);
  const int re = rexp - 1;
  if (re < min_exp) return uint8_t(sign | int(r / std::ldexp(1.0f, min_exp - man_bits)));
  const int man = int(r / std::ldexp(1.0f, re - man_bits)) - (1 << man_bits);
  return uint8_t(sign | ((re + bias) << man_bits) | man);
}

}  // namespace pagellm
