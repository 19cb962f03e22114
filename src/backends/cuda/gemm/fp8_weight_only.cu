// FP8 weight-only linear for decode-sized m: y[m, n] = x[m, k] · (wq[n, k] * w_scale[n])ᵀ (+ bias)
// with 16-bit activations used as they are. A decode step is bound by reading the weights once;
// e4m3 halves those bytes against bf16, so this kernel must stream them at HBM speed: each warp
// owns R weight rows, every lane keeps R x U 16-byte loads in flight (evict-first: the weights are
// read once), converts e4m3 -> f16x2 (one instruction per pair on sm_89+) -> fp32 and accumulates
// in fp32 against M activation rows that stay in L1 (block-scaled weights: each 16-byte vector's
// partial sum is scaled by its 128x128 block's scale). Larger m runs as ceil(m / 8) slices of the
// same kernel (grid.y), which re-read the weights per slice: the large-m fallback of block-scaled
// weights on sm_80 or where cuBLASLt rejects the shape.
#include <cuda_fp8.h>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/fp8_internal.h"
#include "backends/cuda/gemm/fp8_weight_only.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kThreads = 128;  // small blocks: n / (4 warps * R) blocks fill every SM at once
constexpr int kWarps = kThreads / 32;

// 16 e4m3 bytes -> 16 floats (exact: every e4m3 value is an f16 value).
__device__ __forceinline__ void e4m3x16_to_float(const uint4& v, float (&f)[16]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 lo(__nv_cvt_fp8x2_to_halfraw2(
        static_cast<__nv_fp8x2_storage_t>(words[i] & 0xffffu), __NV_E4M3));
    const __half2 hi(
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[i] >> 16), __NV_E4M3));
    const float2 a = __half22float2(lo), b = __half22float2(hi);
    f[4 * i] = a.x;
    f[4 * i + 1] = a.y;
    f[4 * i + 2] = b.x;
    f[4 * i + 3] = b.y;
  }
}

// 16 activations (two 16-byte loads; x is small and stays in L1) -> 16 floats.
template <typename T>
__device__ __forceinline__ void load_x16(const T* src, float (&f)[16]) {
  float a[8], b[8];
  load16(src, a);
  load16(src + 8, b);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    f[e] = a[e];
    f[e + 8] = b[e];
  }
}

// grid: (ceil(n / (kWarps / S * R)), ceil(m / M)) (kGated: n / 2 outputs, R / 2 per warp). M
// activation rows per block (rows past p.m re-read row p.m - 1 and are discarded); R weight rows
// per warp; U 16-byte vectors per row in flight; S warps share each warp's rows, each streaming
// one S-th of k, their sums added through shared memory. kGated: y [m, n / 2] = silu(gate) * up
// with silu_and_mul's roundings (each projection stored in T first), the same bits as the two
// kernels.
template <typename T, int M, int R, int U, bool kGated, int S>
__global__ void __launch_bounds__(kThreads)
    fp8_weight_only_kernel(const __grid_constant__ Fp8LinearParams p) {
  static_assert(kWarps % S == 0, "whole row groups per block");
  constexpr int kOut = kGated ? R / 2 : R;  // outputs per warp
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % S;
  const int row0 = (blockIdx.x * (kWarps / S) + warp / S) * kOut;
  const int num_out = kGated ? p.n / 2 : p.n;
  // A whole warp past the outputs leaves (no barrier below); split over k, its rows are clamped
  // to the last one and its stores skipped instead (the block meets at a barrier).
  if (S == 1 && row0 >= num_out) {
    pdl_wait();
    return;
  }
  const int m0 = blockIdx.y * M;
  const int num_vec = p.k / 16;                // 16-byte weight vectors per row
  const int per_part = (num_vec + S - 1) / S;  // this warp's vectors: [v_begin, v_end)
  const int v_begin = part * per_part, v_end = min(num_vec, v_begin + per_part);
  const uint4* w[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    w[r] = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.wq) +
                                          int64_t{weight_row<R, kGated>(p.n, row0, r)} * p.k);
  // Block-scaled weights: the scale row of each weight row's 128-row block; a 16-byte vector v
  // lies in column block v / 8. Per-channel weights scale the finished sums instead.
  const float* block_scale[R];
  const int scale_stride = fp8_block_scale_stride(p.k);
#pragma unroll
  for (int r = 0; r < R; ++r)
    block_scale[r] = p.w_scale + (weight_row<R, kGated>(p.n, row0, r) / kFp8Block) * scale_stride;
  const bool blocked = p.w_block != 0;
  const T* x[M];
#pragma unroll
  for (int i = 0; i < M; ++i)
    x[i] = static_cast<const T*>(p.x) + int64_t{min(m0 + i, p.m - 1)} * p.k;
  float acc[R][M];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = 0.f;

  // All R x U loads of a round are issued before the first conversion; vectors past the part's
  // end are predicated off (k = 14336 leaves a partial last round).
  uint4 wv[R][U];
  auto load_weights = [&](int v0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
        wv[r][u] = v0 + u * 32 < v_end ? __ldcs(w[r] + v0 + u * 32) : make_uint4(0, 0, 0, 0);
  };
  // The weights do not depend on the kernel before: the first round is loaded before waiting for
  // it (common.cuh: programmatic dependent launch), so the weight stream starts early.
  const int v_first = v_begin + lane;
  load_weights(v_first);
  pdl_wait();
  for (int v0 = v_first; v0 < v_end; v0 += 32 * U) {
    if (v0 != v_first) load_weights(v0);
    // The warp's last weight round is in flight (v0 - lane is warp-uniform): the next kernel may
    // start its own stream (common.cuh: launch the dependents late).
    if (v0 - lane + 32 * U >= v_end) pdl_launch_dependents();
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = v0 + u * 32;
      if (v >= v_end) break;
      float wf[R][16], sb[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        e4m3x16_to_float(wv[r][u], wf[r]);
        sb[r] = blocked ? block_scale[r][v / 8] : 1.f;
      }
#pragma unroll
      for (int i = 0; i < M; ++i) {
        float xv[16];
        load_x16(x[i] + v * 16, xv);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          // Two chains per vector halve the dependent-FMA latency.
          float s0 = 0.f, s1 = 0.f;
#pragma unroll
          for (int e = 0; e < 16; e += 2) {
            s0 = fmaf(wf[r][e], xv[e], s0);
            s1 = fmaf(wf[r][e + 1], xv[e + 1], s1);
          }
          acc[r][i] = fmaf(s0 + s1, sb[r], acc[r][i]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int i = 0; i < M; ++i) acc[r][i] = warp_sum(acc[r][i]);
  if constexpr (S > 1) {  // parts 1 .. S - 1 hand their sums to part 0 of their row group
    __shared__ float partial[kWarps][R * M];
    if (part != 0 && lane < R * M) partial[warp][lane] = acc[lane / M][lane % M];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int q = 1; q < S; ++q)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < M; ++i) acc[r][i] += partial[warp + q][r * M + i];
  }
  // Every lane holds every sum; lane r * M + i stores output (r, i), so kOut * M <= 32 stores go
  // out at once.
  T* y = static_cast<T*>(p.y);
#pragma unroll
  for (int r = 0; r < kOut; ++r) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const int out_row = row0 + r, mi = m0 + i;
      if (lane != r * M + i || out_row >= num_out || mi >= p.m) continue;
      if (kGated) {
        y[int64_t{mi} * num_out + out_row] =
            from_float<T>(gated_output<T>(p, acc[r][i], acc[r + R / 2][i], out_row));
      } else {
        y[int64_t{mi} * p.n + out_row] = from_float<T>(finish_sum<T>(p, acc[r][i], out_row));
      }
    }
  }
}

template <typename T, int M, int R, int U, bool kGated = false, int S = 1>
cudaError_t launch(const Fp8LinearParams& p, cudaStream_t stream) {
  static_assert(R * M <= 32, "one lane stores each (row, activation) sum");
  static_assert(!kGated || R % 2 == 0, "gated warps stream gate and up rows in pairs");
  const int outs_per_block = kWarps / S * (kGated ? R / 2 : R), outs = kGated ? p.n / 2 : p.n;
  const dim3 grid((outs + outs_per_block - 1) / outs_per_block, (p.m + M - 1) / M);
  return launch_kernel(fp8_weight_only_kernel<T, M, R, U, kGated, S>, grid, kThreads, 0, stream, p);
}

// R rows a warp, 4 loads a row in flight, k split over S warps, for p.m activation rows (M of 1,
// 2, 4 or 8 a block).
template <typename T, int R, int S>
cudaError_t launch_rows(const Fp8LinearParams& p, cudaStream_t stream) {
  if (p.m <= 1) return launch<T, 1, R, 4, false, S>(p, stream);
  if (p.m <= 2) return launch<T, 2, R, 4, false, S>(p, stream);
  if (p.m <= 4) return launch<T, 4, R, 4, false, S>(p, stream);
  return launch<T, 8, R, 4, false, S>(p, stream);
}

// Default configuration. One activation row runs on tensor cores with the weights streamed
// through shared memory (fp8_weight_only_stream.cu: +12 % at FP8 batch 1 against the CUDA-core
// kernel), where its shape allows. Otherwise, on CUDA cores: four rows per warp, four 16-byte
// loads per row in flight (R x U = 16 per lane), the fastest alone at m = 1 to 8 on Llama-3.1-8B's
// shapes (docs/PERF.md); long rows at m = 1 (down: k = 14336), where a warp's four rows are four
// streams 14 KB apart (their loads alone reach ~72 % of the copy rate,
// tests/device/fp8_gemv_probe.cu), two rows a warp with k split over two warps.
template <typename T>
cudaError_t launch_default(const Fp8LinearParams& p, cudaStream_t stream) {
  if (p.m == 1)
    if (const cudaError_t e = fp8_weight_only_stream(p, false, stream); e != cudaErrorNotSupported)
      return e;
  if (p.m <= 1 && p.k >= 8192) return launch_rows<T, 2, 2>(p, stream);
  return launch_rows<T, 4, 1>(p, stream);
}

// The alternatives the benchmark keeps measuring (bf16, m = 1 .. 8): four rows a warp (variant
// 3, the default but at m = 1 on long rows), two rows with k split over two warps (4), four rows
// with k split over two warps (5).
cudaError_t launch_variant(int variant, const Fp8LinearParams& p, cudaStream_t stream) {
  using T = __nv_bfloat16;
  if (variant == 3) return launch_rows<T, 4, 1>(p, stream);
  if (variant == 4) return launch_rows<T, 2, 2>(p, stream);
  return launch_rows<T, 4, 2>(p, stream);
}

// The weight-only entry points' argument checks: a bad shape, block size or (with rows to
// compute) a missing or misaligned operand.
bool bad_args(const Fp8LinearParams& p) {
  if (p.m < 0 || p.n <= 0 || p.k <= 0 || p.k % 16 != 0) return true;
  if (p.w_block != 0 && (p.w_block != kFp8Block || p.k % kFp8Block != 0)) return true;
  return p.m > 0 && (!p.x || !p.wq || !p.w_scale || !p.y || !aligned16(p.x) || !aligned16(p.wq));
}

}  // namespace

const char* fp8_weight_only_variant_name(int variant) {
  switch (variant) {
    case 0:
      return "auto";
    case 1:
      return "default";
    case 2:
      return "tensor mma.sync";
    case 3:
      return "cores R4xU4";
    case 4:
      return "cores R2xU4 k/2";
    default:
      return "cores R4xU4 k/2";
  }
}

cudaError_t fp8_weight_only_silu_and_mul(const Fp8LinearParams& p, cudaStream_t stream) {
  if (bad_args(p) || p.n % 2 != 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (p.dtype == DType::kF32) return cudaErrorNotSupported;
  // The default configuration's kernels (launch_default), for m <= 2.
  if (p.m > 2) return cudaErrorNotSupported;
  if (p.m == 1)
    if (const cudaError_t e = fp8_weight_only_stream(p, true, stream); e != cudaErrorNotSupported)
      return e;
  if (p.dtype == DType::kBF16)
    return p.m == 1 ? launch<__nv_bfloat16, 1, 4, 4, true>(p, stream)
                    : launch<__nv_bfloat16, 2, 4, 4, true>(p, stream);
  return p.m == 1 ? launch<__half, 1, 4, 4, true>(p, stream)
                  : launch<__half, 2, 4, 4, true>(p, stream);
}

cudaError_t fp8_weight_only(const Fp8LinearParams& p, int variant, cudaStream_t stream) {
  if (bad_args(p)) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (p.dtype == DType::kF32 || variant < 0 || variant >= kFp8WeightOnlyNumVariants)
    return cudaErrorNotSupported;
  if (variant == 0) variant = fp8_weight_only_takes_default(p) ? 1 : 2;
  if (variant == 2) return fp8_weight_only_mma(p, stream);
  if (variant == 1)
    return p.dtype == DType::kBF16 ? launch_default<__nv_bfloat16>(p, stream)
                                   : launch_default<__half>(p, stream);
  if (p.dtype != DType::kBF16) return cudaErrorNotSupported;
  return launch_variant(variant, p, stream);
}

}  // namespace pagellm::cuda
