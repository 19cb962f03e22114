// The device's dtype conversions (convert_dtype) against common/dtype.h's host conversions, bit
// for bit: every 16-bit pattern, and f32 words at and around the rounding ties.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels.h"
#include "common/dtype.h"
#include "device_test_util.h"

namespace pagellm::cuda::test {
namespace {

uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// The host conversions of common/dtype.h, on raw words (f32 bits, or f16 / bf16 in the low half).
uint32_t host_convert(DType src, DType dst, uint32_t raw) {
  if (src == dst) return raw;
  float f;
  if (src == DType::kF32)
    std::memcpy(&f, &raw, 4);
  else
    f = src == DType::kBF16 ? bf16_to_f32(uint16_t(raw)) : f16_to_f32(uint16_t(raw));
  if (dst == DType::kF32) return f32_bits(f);
  return dst == DType::kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
}

// Source words: all 65536 patterns of a 16-bit type; for f32 every upper half with lower halves at
// and around the bf16 and f16 rounding ties (through all exponents: subnormals, the f16 overflow
// and underflow edges, inf, NaN payloads), plus random bits.
std::vector<uint32_t> convert_inputs(DType src) {
  std::vector<uint32_t> v;
  if (src != DType::kF32) {
    for (uint32_t h = 0; h < 65536; ++h) v.push_back(h);
    return v;
  }
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0u, 0x1u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x3000u, 0x7fffu, 0x8000u,
                        0x8001u, 0xffffu})
      v.push_back(hi << 16 | lo);
  std::mt19937_64 rng(1234);
  for (int i = 0; i < (1 << 20); ++i) v.push_back(uint32_t(rng()));
  return v;
}

void test_convert(DType src, DType dst, const std::string& filter, int& passed, int& failed) {
  const std::string name = std::string("convert ") + dname(src) + " -> " + dname(dst);
  if (!filter.empty() && name.find(filter) == std::string::npos) return;
  const std::vector<uint32_t> in = convert_inputs(src);
  const size_t n = in.size();
  std::vector<uint8_t> raw(n * dsize(src));
  for (size_t i = 0; i < n; ++i) {
    if (src == DType::kF32) {
      std::memcpy(&raw[i * 4], &in[i], 4);
    } else {
      const uint16_t h = uint16_t(in[i]);
      std::memcpy(&raw[i * 2], &h, 2);
    }
  }
  void *d_in = nullptr, *d_out = nullptr;
  CK(cudaMalloc(&d_in, raw.size()));
  CK(cudaMalloc(&d_out, n * dsize(dst)));
  CK(cudaMemcpy(d_in, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemset(d_out, 0xff, n * dsize(dst)));  // poison: NaN in every dtype
  CK(convert_dtype(src, d_in, dst, d_out, int64_t(n), nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<uint8_t> out(n * dsize(dst));
  CK(cudaMemcpy(out.data(), d_out, out.size(), cudaMemcpyDeviceToHost));
  CK(cudaFree(d_in));
  CK(cudaFree(d_out));
  size_t bad = 0, first = 0;
  uint32_t first_got = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t got = 0;
    std::memcpy(&got, &out[i * dsize(dst)], dsize(dst));
    if (got != host_convert(src, dst, in[i]) && bad++ == 0) first = i, first_got = got;
  }
  (bad == 0 ? passed : failed) += 1;
  if (bad == 0)
    std::printf("  ok   %-70s %zu values bit-exact with common/dtype.h\n", name.c_str(), n);
  else
    std::printf("  FAIL %-70s %zu of %zu differ; first: 0x%x -> 0x%x, host 0x%x\n", name.c_str(),
                bad, n, in[first], first_got, host_convert(src, dst, in[first]));
}

}  // namespace

void convert_suite(const std::string& filter, int& passed, int& failed) {
  std::printf("== dtype conversion\n");
  for (DType src : {DType::kF32, DType::kF16, DType::kBF16})
    for (DType dst : {DType::kF32, DType::kF16, DType::kBF16})
      test_convert(src, dst, filter, passed, failed);
}

}  // namespace pagellm::cuda::test
