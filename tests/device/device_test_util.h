// Helpers shared by the CUDA kernel test drivers (kernel_tests.cpp, sampler_tests.cpp): CUDA error
// checks, dtype names and sizes, rounding to a kernel dtype, fp32 <-> model-dtype bytes, and the
// error of an output against its reference.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/dtype.h"

// Exits the test driver (status 2) on a CUDA error, naming the call.
#define CK(expr)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__, #expr);                                                         \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

namespace pagellm::cuda::test {

inline const char* dname(DType t) {
  return t == DType::kF32 ? "f32" : t == DType::kF16 ? "f16" : "bf16";
}
inline size_t dsize(DType t) { return t == DType::kF32 ? 4 : 2; }

// v rounded to the dtype (round to nearest even); NaN passes through unchanged.
inline float round_to(DType t, float v) {
  if (v != v) return v;
  if (t == DType::kBF16) return __bfloat162float(__float2bfloat16_rn(v));
  if (t == DType::kF16) return __half2float(__float2half_rn(v));
  return v;
}

// fp32 values as the dtype's bytes, as a kernel reads them.
inline std::vector<uint8_t> encode(DType t, const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * dsize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(&out[i * 4], &v[i], 4);
    } else if (t == DType::kBF16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(v[i]);
      std::memcpy(&out[i * 2], &b, 2);
    } else {
      const __half h = __float2half_rn(v[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

inline std::vector<float> decode(DType t, const std::vector<uint8_t>& raw) {
  std::vector<float> out(raw.size() / dsize(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(&out[i], &raw[i * 4], 4);
    } else if (t == DType::kBF16) {
      __nv_bfloat16 b;
      std::memcpy(&b, &raw[i * 2], 2);
      out[i] = __bfloat162float(b);
    } else {
      __half h;
      std::memcpy(&h, &raw[i * 2], 2);
      out[i] = __half2float(h);
    }
  }
  return out;
}

// How far out is from ref.
struct Err {
  double rel_l2 = 0;   // ‖out − ref‖ / ‖ref‖
  double max_rel = 0;  // max |out − ref| / max |ref|
  bool finite = true;  // every output finite
};

inline Err compare(const std::vector<float>& out, const std::vector<float>& ref) {
  Err e;
  double num = 0, den = 0, max_err = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) {
      e.finite = false;
      continue;
    }
    const double d = double(out[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    max_err = std::max(max_err, std::fabs(d));
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
  }
  e.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  e.max_rel = max_ref > 0 ? max_err / max_ref : max_err;
  return e;
}

}  // namespace pagellm::cuda::test
