// Skinny GEMM (decode: m <= 8 tokens) y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias, + y). Decode steps are
// bound by reading the weights once, and cuBLASLt's m = 1 kernels reach only ~55-80% of the HBM
// bandwidth (measured, H100), so small m takes this path: each warp streams two weight rows with
// 16-byte loads, several in flight per lane, against all m activation rows (which stay in L1/L2).
#include "backends/cuda/common.cuh"
#include "backends/cuda/gemv.h"

namespace pagellm::cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kRowsPerWarp = 2;
constexpr int kUnroll = 4;

// Lane 0's epilogue of a gated warp (kGated below): the warp's two rows are gate row j and up row
// inner + j, and y[m, j] = silu(gate) * up with silu_and_mul's roundings (each projection stored in
// T, then silu(gate) rounded to T, then the product): the same bits as the two kernels.
template <typename T, int M>
__device__ __forceinline__ void store_silu_and_mul(const GemmParams& p, int j,
                                                   const float (&acc)[kRowsPerWarp][M]) {
  const int inner = p.n / 2;
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    if (m >= p.m) continue;
    float g = acc[0][m], u = acc[1][m];
    if (bias) g += to_float(bias[j]), u += to_float(bias[inner + j]);
    g = round_to<T>(g);
    u = round_to<T>(u);
    static_cast<T*>(p.y)[static_cast<int64_t>(m) * inner + j] = from_float<T>(silu_mul<T>(g, u));
  }
}

// Lane 0's epilogue of a plain warp: its rows row0 and row0 + 1 of y (+ bias, + y).
template <typename T, int M>
__device__ __forceinline__ void store_rows(const GemmParams& p, int row0,
                                           const float (&acc)[kRowsPerWarp][M]) {
  T* y = static_cast<T*>(p.y);
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = row0 + r;
    if (row >= p.n) continue;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      if (m >= p.m) continue;
      float v = acc[r][m];
      if (bias) v += to_float(bias[row]);
      T* dst = y + static_cast<int64_t>(m) * p.n + row;
      if (p.accumulate) v += to_float(*dst);
      *dst = from_float<T>(v);
    }
  }
}

// One 16-byte vector of each of the warp's rows at column k0 against the M activation rows.
template <typename T, int M>
__device__ __forceinline__ void multiply_vector(const GemmParams& p, const T* x,
                                                const T* const (&wr)[kRowsPerWarp], int k0,
                                                float (&acc)[kRowsPerWarp][M]) {
  constexpr int kVec = 16 / sizeof(T);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float xv[kVec];
    load16(x + static_cast<int64_t>(min(m, p.m - 1)) * p.k + k0, xv);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float wf[kVec];
      load16(wr[r] + k0, wf);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[r][m] += wf[e] * xv[e];
    }
  }
}

// grid: ceil(n / (8 warps * kRowsPerWarp)) (kGated: ceil(n / 2 / 8)); M: the number of activation
// rows (compile time). kGated: w is [gate; up] (n = 2 x inner rows) and y [m, inner] gets
// silu(gate) * up; each warp streams gate row j and up row inner + j.
template <typename T, int M, bool kGated>
__global__ void __launch_bounds__(kGemvThreads) gemv_kernel(const __grid_constant__ GemmParams p) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int unit = blockIdx.x * (kGemvThreads / 32) + warp;  // kGated: the output column j
  const int row0 = kGated ? unit : unit * kRowsPerWarp;
  if (row0 >= (kGated ? p.n / 2 : p.n)) {  // whole warp: no barrier below
    pdl_wait();
    return;
  }
  const T* w = static_cast<const T*>(p.w);  // rows of M beyond p.m re-read row p.m - 1 (discarded)
  const T* x = static_cast<const T*>(p.x);
  float acc[kRowsPerWarp][M];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = 0.f;
  const T* wr[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int row = kGated ? row0 + r * (p.n / 2) : min(row0 + r, p.n - 1);
    wr[r] = w + static_cast<int64_t>(row) * p.k;
  }

  constexpr int kStep = 32 * kVec;
  const int first_k = lane * kVec;
  int k0 = first_k;
  // kUnroll vectors per row in flight before any arithmetic.
  Vec16<T> wv[kRowsPerWarp][kUnroll];
  auto load_weights = [&](int k) {
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        *reinterpret_cast<int4*>(&wv[r][u]) =
            __ldcs(reinterpret_cast<const int4*>(wr[r] + k + u * kStep));
  };
  // The weights do not depend on the kernel before: the first round is loaded before waiting
  // for it (common.cuh: programmatic dependent launch), so the weight stream starts early.
  if (first_k + (kUnroll - 1) * kStep < p.k) load_weights(first_k);
  pdl_wait();
  // Main loop.
  for (; k0 + (kUnroll - 1) * kStep < p.k; k0 += kUnroll * kStep) {
    if (k0 != first_k) load_weights(k0);
    // This lane's last full round is in flight: the next kernel may start its own weight stream
    // (common.cuh: launch the dependents late).
    if (k0 + (2 * kUnroll - 1) * kStep >= p.k) pdl_launch_dependents();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float xv[kVec];
        load16(x + static_cast<int64_t>(min(m, p.m - 1)) * p.k + k0 + u * kStep, xv);
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[r][m] += to_float(wv[r][u].v[e]) * xv[e];
      }
    }
  }
  // The rest of k, one vector per lane at a time.
  for (; k0 < p.k; k0 += kStep) multiply_vector<T, M>(p, x, wr, k0, acc);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
    for (int m = 0; m < M; ++m) acc[r][m] = warp_sum(acc[r][m]);
  if (lane != 0) return;
  if (kGated) {
    store_silu_and_mul<T, M>(p, row0, acc);
  } else {
    store_rows<T, M>(p, row0, acc);
  }
}

template <typename T, bool kGated>
cudaError_t launch_gemv(const GemmParams& p, cudaStream_t stream) {
  const int rows_per_block = (kGemvThreads / 32) * kRowsPerWarp;
  const dim3 grid((p.n + rows_per_block - 1) / rows_per_block);  // kGated: n / 2 outputs, 1 a warp
  auto* kernel = p.m <= 1   ? gemv_kernel<T, 1, kGated>
                 : p.m <= 2 ? gemv_kernel<T, 2, kGated>
                 : p.m <= 4 ? gemv_kernel<T, 4, kGated>
                            : gemv_kernel<T, 8, kGated>;
  return launch_kernel(kernel, grid, kGemvThreads, 0, stream, p);
}

}  // namespace

bool gemv_applies(const GemmParams& p) {
  const int vec = 16 / static_cast<int>(dtype_size(p.dtype));
  return p.m >= 1 && p.m <= kGemvMaxRows && p.k % vec == 0 && aligned16(p.x) && aligned16(p.w);
}

cudaError_t gemv(const GemmParams& p, cudaStream_t stream) {
  if (!gemv_applies(p) || !p.y || p.n <= 0) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_gemv<scalar_t, false>(p, stream); });
}

cudaError_t gemv_silu_and_mul(const GemmParams& p, cudaStream_t stream) {
  if (!gemv_applies(p) || !p.y || p.n <= 0 || p.n % 2 != 0 || p.accumulate)
    return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_gemv<scalar_t, true>(p, stream); });
}

}  // namespace pagellm::cuda
