// Helpers of the kernel test drivers that check against kernel_reference.cpp (kernel_tests.cpp,
// elementwise_tests.cpp): the shared seed, filter and counts, device buffers, random inputs
// rounded to the kernel's dtype, and the tolerance check that counts passes and failures.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "device_test_util.h"
#include "kernel_reference.h"

namespace pagellm::cuda::test {

// The tests' fixed-seed generator, --filter, the pass / fail counts and the device's SM count.
inline std::mt19937_64 g_rng(1234);
inline std::string g_filter;
inline int g_failed = 0, g_passed = 0;
inline int g_num_sms = 132;

inline RoundFn rounder(DType t) {
  return [t](float v) { return round_to(t, v); };
}

// Device buffer of n elements of dtype, with host float mirror helpers.
struct DevBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t b) : bytes(b) { CK(cudaMalloc(&ptr, std::max<size_t>(b, 16))); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (ptr) cudaFree(ptr);
  }
  void poison() { CK(cudaMemset(ptr, 0xff, bytes)); }  // all-ones bits: NaN in f32, f16 and bf16
};

// Random values in [-scale, scale] rounded to dtype (so host and device hold the same numbers).
inline std::vector<float> random_vec(DType t, size_t n, float scale = 1.f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to(t, dist(g_rng));
  return v;
}

inline void upload(DevBuf& buf, DType t, const std::vector<float>& v) {
  auto raw = encode(t, v);
  CK(cudaMemcpy(buf.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}
template <typename I>
inline void upload_raw(DevBuf& buf, const std::vector<I>& v) {
  CK(cudaMemcpy(buf.ptr, v.data(), v.size() * sizeof(I), cudaMemcpyHostToDevice));
}
inline std::vector<float> download(const DevBuf& buf, DType t, size_t n) {
  std::vector<uint8_t> raw(n * dsize(t));
  CK(cudaMemcpy(raw.data(), buf.ptr, raw.size(), cudaMemcpyDeviceToHost));
  return decode(t, raw);
}

struct Tol {
  double rel_l2, max_rel;  // ‖out−ref‖/‖ref‖ and max|out−ref| / max|ref|
};
inline Tol tol_for(DType t, bool attention) {
  if (t == DType::kF32) return {2e-6, 2e-5};
  if (t == DType::kF16) return {attention ? 2e-3 : 1e-3, attention ? 8e-3 : 4e-3};
  return {attention ? 1.2e-2 : 8e-3, attention ? 4e-2 : 2e-2};
}

inline bool check(const std::string& name, const std::vector<float>& out,
                  const std::vector<float>& ref, Tol tol) {
  const Err e = compare(out, ref);
  const bool ok = e.finite && e.rel_l2 <= tol.rel_l2 && e.max_rel <= tol.max_rel;
  if (ok) {
    ++g_passed;
    std::printf("  ok   %-70s rel_l2=%.2e max_rel=%.2e\n", name.c_str(), e.rel_l2, e.max_rel);
  } else {
    ++g_failed;
    const size_t nan_at = size_t(std::find_if(out.begin(), out.begin() + ptrdiff_t(ref.size()),
                                              [](float v) { return !std::isfinite(v); }) -
                                 out.begin());
    if (!e.finite)
      std::printf("  FAIL %-70s non-finite output at %zu (ref %g)\n", name.c_str(), nan_at,
                  ref[nan_at]);
    else
      std::printf("  FAIL %-70s rel_l2=%.2e (tol %.1e) max_rel=%.2e (tol %.1e)\n", name.c_str(),
                  e.rel_l2, tol.rel_l2, e.max_rel, tol.max_rel);
  }
  return ok;
}

inline bool selected(const std::string& name) {
  return g_filter.empty() || name.find(g_filter) != std::string::npos;
}

}  // namespace pagellm::cuda::test
