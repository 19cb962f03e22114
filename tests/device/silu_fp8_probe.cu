// A standalone probe for SiLU-and-mul writing the down projection's FP8 input with one scale per
// row (kernels.h SiluAndMulParams::fp8; docs/PERF.md, "SiLU-and-mul into the down projection's
// FP8 input"), not part of the build. On Llama-3.1-8B's MLP rows (inner 14,336) at m = 2,048 and
// 8,192 it times, against the copy rate measured in the same process:
//   - the library's two kernels (silu_and_mul, then quantize_fp8_per_token) and its fused kernel;
//   - variants of the fused kernel: threads per block, blocks per SM the registers are fitted to,
//     and the codes as the IEEE x / s, as x * (1 / s) (not bit-exact: the probe counts the codes
//     that differ from the library's two kernels) or as fp8_quotient (fp8_act_quant.cuh: x / s
//     in three operations, the library's);
//   - fp8_quotient against the IEEE division on 2^30 random pairs (x, s) with |x| <= 448 s over
//     scales from 2^-60 to 2^40, plus x = ±448 s: every quotient's bits must agree.
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Isrc \
//     -o silu_fp8_probe tests/device/silu_fp8_probe.cu build-cuda/libpagellm_cuda_kernels.a \
//     -lcublasLt -lcublas && ./silu_fp8_probe
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_act_quant.cuh"
#include "backends/cuda/gemm/fp8_gemm.h"
#include "device_test_util.h"  // CK

using namespace pagellm;
using namespace pagellm::cuda;

using T = __nv_bfloat16;

// One block of kThreads per row; the row's products staged in shared memory as bf16.
enum class Coding { kDivide, kReciprocal, kQuotient };

template <int kThreads, int kMinBlocks, Coding kCoding>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    fused_rows(const T* __restrict__ x, uint8_t* __restrict__ q, float* __restrict__ scale,
               int inner) {
  extern __shared__ uint4 staged_words[];
  __shared__ float scratch[32];
  T* staged = reinterpret_cast<T*>(staged_words);
  const int64_t t = blockIdx.x;
  const T* gate = x + t * 2 * inner;
  const T* up = gate + inner;
  float amax = 0.f;
#pragma unroll 1
  for (int i = threadIdx.x * 8; i < inner; i += kThreads * 8) {
    float g[8], u[8], o[8];
    load16(gate + i, g);
    load16(up + i, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = round_to<T>(silu_mul<T>(g[e], u[e]));
    amax = abs_max(o, amax);
    store16(staged + i, o);
  }
  const float s = fp8_act_scale(block_max(amax, scratch));
  if (threadIdx.x == 0) scale[t] = s;
  const float inv = 1.f / s;
  uint8_t* qr = q + t * inner;
  for (int i = threadIdx.x * 8; i < inner; i += kThreads * 8) {
    float o[8];
    load16(staged + i, o);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      o[e] = kCoding == Coding::kDivide       ? o[e] / s
             : kCoding == Coding::kReciprocal ? o[e] * inv
                                              : fp8_quotient(o[e], {s, inv});
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      w[h] =
          __nv_cvt_float2_to_fp8x2(make_float2(o[4 * h], o[4 * h + 1]), __NV_SATFINITE, __NV_E4M3) |
          __nv_cvt_float2_to_fp8x2(make_float2(o[4 * h + 2], o[4 * h + 3]), __NV_SATFINITE,
                                   __NV_E4M3)
              << 16;
    *reinterpret_cast<uint2*>(qr + i) = make_uint2(w[0], w[1]);
  }
}

// 2^30 pairs: thread i draws 8 (x, s) from a hash of i; mismatches counted in *bad, the first
// kept in first[0..1].
__device__ uint32_t hash32(uint32_t x) {
  x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
  return x;
}

__global__ void check_quotients(unsigned long long* bad, float* first) {
  const uint32_t id = blockIdx.x * blockDim.x + threadIdx.x;
  for (int j = 0; j < 8; ++j) {
    const uint32_t h1 = hash32(id * 8 + j), h2 = hash32(h1 ^ 0x9e3779b9u);
    // s = 2^e * (1 + m), e in [-60, 40]; x = ±448 s * u, u in [0, 1] with a full mantissa.
    const float s = ldexpf(1.f + (h1 & 0x7fffff) / 8388608.f, int(h1 >> 25) % 101 - 60);
    float u = (h2 & 0xffffff) / 16777215.f;
    if ((h2 >> 24) == 0) u = 1.f;  // the row's amax itself
    const float x = ((h2 >> 31) ? -448.f : 448.f) * s * u;
    const float want = __fdiv_rn(x, s), got = fp8_quotient(x, fp8_divisor(s));
    if (__float_as_uint(want) != __float_as_uint(got) && atomicAdd(bad, 1ull) == 0)
      first[0] = x, first[1] = s;
  }
}

float time_ms(cudaStream_t st, int reps, const auto& launch) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  launch(st);
  CK(cudaEventRecord(a, st));
  for (int r = 0; r < reps; ++r) launch(st);
  CK(cudaEventRecord(b, st));
  CK(cudaEventSynchronize(b));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGetLastError());
  return ms / reps;
}

int main() {
  const int inner = 14336, max_m = 8192, reps = 20;
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  const size_t copy_bytes = size_t(2) << 30;
  void *ca, *cb;
  CK(cudaMalloc(&ca, copy_bytes));
  CK(cudaMalloc(&cb, copy_bytes));
  const double copy_gbs = 2.0 * copy_bytes / 1e6 / time_ms(st, 10, [&](cudaStream_t s) {
                            CK(cudaMemcpyAsync(cb, ca, copy_bytes, cudaMemcpyDeviceToDevice, s));
                          });
  std::printf("copy %.0f GB/s (read + write)\n", copy_gbs);
  std::vector<T> host(size_t(max_m) * 2 * inner);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-6.f, 6.f);
  for (auto& v : host) v = __float2bfloat16_rn(dist(rng));
  T *x, *act;
  uint8_t *q, *q_ref;
  float *sc, *sc_ref;
  CK(cudaMalloc(&x, host.size() * 2));
  CK(cudaMalloc(&act, size_t(max_m) * inner * 2));
  CK(cudaMalloc(&q, size_t(max_m) * inner));
  CK(cudaMalloc(&q_ref, size_t(max_m) * inner));
  CK(cudaMalloc(&sc, max_m * 4));
  CK(cudaMalloc(&sc_ref, max_m * 4));
  CK(cudaMemcpy(x, host.data(), host.size() * 2, cudaMemcpyHostToDevice));
  unsigned long long* bad;
  float* first;
  CK(cudaMalloc(&bad, 8));
  CK(cudaMalloc(&first, 8));
  CK(cudaMemset(bad, 0, 8));
  check_quotients<<<(1 << 27) / 256, 256>>>(bad, first);
  unsigned long long num_bad = 0;
  float where[2] = {};
  CK(cudaMemcpy(&num_bad, bad, 8, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(where, first, 8, cudaMemcpyDeviceToHost));
  std::printf("fp8_quotient vs IEEE division, 2^30 pairs: %llu differ%s\n", num_bad,
              num_bad ? "" : " (all bit-exact)");
  if (num_bad) std::printf("  first: x=%a s=%a\n", where[0], where[1]);
  std::vector<uint8_t> a(size_t(max_m) * inner), b(a.size());
  for (int m : {2048, 8192}) {
    const double fused_bytes = double(m) * inner * 5, split_bytes = double(m) * inner * 9;
    auto line = [&](const char* what, double ms, double bytes, size_t bad) {
      std::printf("m=%5d %-40s %8.1f us  %5.1f%% of copy  %zu codes differ\n", m, what, ms * 1e3,
                  100.0 * bytes / (ms * 1e6) / copy_gbs, bad);
    };
    auto differ = [&] {
      CK(cudaMemcpy(a.data(), q, size_t(m) * inner, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), q_ref, size_t(m) * inner, cudaMemcpyDeviceToHost));
      size_t n = 0;
      for (size_t i = 0; i < size_t(m) * inner; ++i) n += a[i] != b[i];
      return n;
    };
    SiluAndMulParams plain{DType::kBF16, x, act, m, inner, false};
    const float split = time_ms(st, reps, [&](cudaStream_t s) {
      CK(silu_and_mul(plain, s));
      CK(quantize_fp8_per_token({DType::kBF16, act, q_ref, sc_ref, m, inner, 0}, s));
    });
    line("silu_and_mul + quantize (library)", split, split_bytes, 0);
    SiluAndMulParams fused = plain;
    fused.out = nullptr, fused.fp8 = {q, sc, 0};
    const float lib = time_ms(st, reps, [&](cudaStream_t s) { CK(silu_and_mul(fused, s)); });
    line("fused (library)", lib, fused_bytes, differ());
    const size_t smem = size_t(inner) * 2;
    auto variant = [&](const char* what, auto kernel, int threads) {
      CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      const float ms = time_ms(
          st, reps, [&](cudaStream_t s) { kernel<<<m, threads, smem, s>>>(x, q, sc, inner); });
      line(what, ms, fused_bytes, differ());
    };
    variant("256 threads, 6 blocks, x / s", fused_rows<256, 6, Coding::kDivide>, 256);
    variant("256 threads, 5 blocks, x / s", fused_rows<256, 5, Coding::kDivide>, 256);
    variant("512 threads, 3 blocks, x / s", fused_rows<512, 3, Coding::kDivide>, 512);
    variant("256 threads, 6 blocks, x * (1 / s)", fused_rows<256, 6, Coding::kReciprocal>, 256);
    variant("256 threads, 6 blocks, fp8_quotient", fused_rows<256, 6, Coding::kQuotient>, 256);
    variant("256 threads, 8 blocks, fp8_quotient", fused_rows<256, 8, Coding::kQuotient>, 256);
    variant("512 threads, 3 blocks, fp8_quotient", fused_rows<512, 3, Coding::kQuotient>, 512);
  }
  return 0;
}
