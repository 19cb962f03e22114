// FP8 weight-only linear for one activation row (batch-1 decode) on tensor cores, the weights
// streamed through shared memory: y[n] = x[k] · (wq[n, k] * w_scale)ᵀ (+ bias), optionally with
// the gated MLP's activation in the epilogue.
//
// Why not the CUDA-core kernel (fp8_weight_only.cu): there each weight costs a conversion to f16,
// one to fp32 and an FMA, ~45 instructions per 16 bytes, which holds it below the copy rate
// (docs/PERF.md, "the FP8 GEMV's ceiling"); and weights loaded straight into MMA fragments read
// 64 bytes of eight rows per instruction, which HBM serves no faster. Here the copies fill whole
// 128-byte lines (cp.async into a swizzled shared tile), ldmatrix hands each lane its fragment
// bytes, one cvt per pair makes them f16, and mma.sync m16n8k16 multiplies them against x: ~15
// instructions per 16 bytes, the products exact and summed in fp32 as before.
//
// Layout: a block owns 16 weight rows (one m16 tile; gated: 8 gate rows and their 8 up rows) and
// its 4 warps split k in 128-byte chunks (warp w takes chunks w, w + 4, ...), each warp with
// kStages chunks of its own in flight, so no barrier sits in the loop. x is staged once per block
// in shared memory as f16 (exact for bf16 values in f16's normal range; a block whose largest |x|
// leaves [2^-6, 2^15] rescales x by a power of two, undone on the sums). Every B column holds x,
// so column 0 of the accumulator is the product. The warps' sums meet in shared memory.
#include <cuda_fp8.h>

#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"
#include "backends/cuda/gemm/fp8_internal.h"
#include "backends/cuda/gemm/fp8_weight_only.cuh"
#include "backends/cuda/gemm/gemv_line_stream.cuh"
#include "backends/cuda/gemm/gemv_stage_x.cuh"
#include "backends/cuda/gemm/mma.cuh"

namespace pagellm::cuda {
namespace {

using attention::ldmatrix_x4;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = kLineRows;    // weight rows per block: one m16 tile
constexpr int kChunk = kLineChunk;  // bytes of k per warp per stage: a line of each row
constexpr int kStages = 4;          // a warp's chunks in flight or being read
constexpr int kMaxK = 32768;        // x staged as f16: at most 64 KB
constexpr int kTileBytes = WarpLineStream<kStages, kWarps>::kTileBytes;
constexpr int kMaxSmem = kTileBytes + kMaxK * 2;

// Two e4m3 codes -> a packed f16 pair (one cvt on sm_89+).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two) {
  return fp8x2_to_pair<__half>(two & 0xffffu);
}

// grid: ceil(outputs / outputs per block); 16 (gated: 8) outputs a block. Dynamic shared memory:
// kTileBytes of weight stages, then x as f16 (k rounded up to a chunk).
template <typename T, bool kGated, bool kBlocked>
__global__ void __launch_bounds__(kThreads)
    fp8_stream_kernel(const __grid_constant__ Fp8LinearParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float partial[kWarps][kRows];
  __shared__ float scratch[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int out0 = blockIdx.x * (kGated ? kRows / 2 : kRows);
  const int num_chunks = (p.k + kChunk - 1) / kChunk;
  __half* xs = reinterpret_cast<__half*>(smem + kTileBytes);
  // Piece q of row r sits at q ^ (r % 8), so that ldmatrix's eight rows at one piece hit
  // different banks.
  const WarpLineStream<kStages, kWarps> lines(
      smem, p.k,
      [&](int r) {
        return static_cast<const uint8_t*>(p.wq) +
               int64_t{weight_row<kRows, kGated>(p.n, out0, r)} * p.k;
      },
      [](int r, int q) { return q ^ (r & 7); });
  // The weights do not depend on the kernel before: the first chunks are in flight before
  // waiting for it (common.cuh: programmatic dependent launch).
  lines.start();
  pdl_wait();
  if (lines.all_started()) pdl_launch_dependents();
  const float x_unscale =
      stage_x_f16<kThreads>(static_cast<const T*>(p.x), p.k, num_chunks * kChunk, xs, scratch);

  // ldmatrix.x4: lane supplies row (lane / 8 % 2) * 8 + lane % 8 of matrix lane / 8, at piece
  // 2 kk (matrices 0, 1: rows 0-7, 8-15) or 2 kk + 1 (matrices 2, 3). Lane (g, t) receives bytes
  // 4t .. 4t + 3 of row g (r[0], r[2]) and row g + 8 (r[1], r[3]) of both pieces.
  const int lrow = ((lane >> 3) & 1) * 8 + (lane & 7);
  int ld_off[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    ld_off[kk] = lrow * kChunk + (((2 * kk + (lane >> 4)) ^ (lrow & 7)) * 16);
  // Block-scaled weights: a chunk is one 128-column scale block; rows g and g + 8 of the tile.
  const int scale_stride = fp8_block_scale_stride(p.k);
  const float* scale_g =
      p.w_scale + (weight_row<kRows, kGated>(p.n, out0, g) / kFp8Block) * scale_stride;
  const float* scale_g8 =
      p.w_scale + (weight_row<kRows, kGated>(p.n, out0, g + 8) / kFp8Block) * scale_stride;

  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < lines.chunks(); ++i) {
    const uint8_t* stage = lines.next(i);
    const int c = warp + kWarps * i;
    const __half* xc = xs + lines.offset(i) + 4 * t;
    // Per-channel weights sum into acc; block-scaled ones into part, scaled per chunk.
    float part[4] = {0.f, 0.f, 0.f, 0.f};
    auto multiply_chunk = [&](float(&sum)[4]) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t r[4];
        ldmatrix_x4(r, stage + ld_off[kk]);
        // The mma's k order only has to agree between A and B: its columns (2t, 2t + 1) and (2t
        // + 8, 2t + 9) take bytes 4t, 4t + 1 and 4t + 2, 4t + 3 of the piece, and B the same x.
        const uint2 b0 = *reinterpret_cast<const uint2*>(xc + 32 * kk);
        const uint2 b1 = *reinterpret_cast<const uint2*>(xc + 32 * kk + 16);
        mma16816<__half>(sum, e4m3x2_to_f16x2(r[0]), e4m3x2_to_f16x2(r[1]),
                         e4m3x2_to_f16x2(r[0] >> 16), e4m3x2_to_f16x2(r[1] >> 16), b0.x, b0.y);
        mma16816<__half>(sum, e4m3x2_to_f16x2(r[2]), e4m3x2_to_f16x2(r[3]),
                         e4m3x2_to_f16x2(r[2] >> 16), e4m3x2_to_f16x2(r[3] >> 16), b1.x, b1.y);
      }
    };
    if constexpr (kBlocked) {
      multiply_chunk(part);
      acc[0] = fmaf(part[0], scale_g[c], acc[0]);
      acc[2] = fmaf(part[2], scale_g8[c], acc[2]);
    } else {
      multiply_chunk(acc);
    }
  }
  lines.drain();

  // Column 0 of the accumulator: c[0] is row g, c[2] row g + 8 (lanes t == 0).
  if (t == 0) {
    partial[warp][g] = acc[0];
    partial[warp][g + 8] = acc[2];
  }
  __syncthreads();
  if (warp != 0 || lane >= (kGated ? kRows / 2 : kRows)) return;
  auto row_sum = [&](int r) {
    float s = partial[0][r];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += partial[w][r];
    return s;
  };
  T* y = static_cast<T*>(p.y);
  const int out = out0 + lane;
  if constexpr (kGated) {
    if (out >= p.n / 2) return;
    y[out] = from_float<T>(
        gated_output<T>(p, row_sum(lane) * x_unscale, row_sum(lane + 8) * x_unscale, out));
  } else {
    if (out >= p.n) return;
    y[out] = from_float<T>(finish_sum<T>(p, row_sum(lane) * x_unscale, out));
  }
}

template <typename T, bool kGated, bool kBlocked>
cudaError_t launch(const Fp8LinearParams& p, cudaStream_t stream) {
  constexpr auto kernel = fp8_stream_kernel<T, kGated, kBlocked>;
  if (const cudaError_t e = allow_dynamic_smem<kernel>(kMaxSmem); e != cudaSuccess) return e;
  const int outs_per_block = kGated ? kRows / 2 : kRows, outs = kGated ? p.n / 2 : p.n;
  const int k_pad = (p.k + kChunk - 1) / kChunk * kChunk;
  const dim3 grid((outs + outs_per_block - 1) / outs_per_block);
  return launch_kernel(kernel, grid, kThreads, size_t{kTileBytes} + size_t(k_pad) * 2, stream, p);
}

template <typename T>
cudaError_t launch_dtype(const Fp8LinearParams& p, bool gated, cudaStream_t stream) {
  if (p.w_block != 0)
    return gated ? launch<T, true, true>(p, stream) : launch<T, false, true>(p, stream);
  return gated ? launch<T, true, false>(p, stream) : launch<T, false, false>(p, stream);
}

}  // namespace

cudaError_t fp8_weight_only_stream(const Fp8LinearParams& p, bool gated, cudaStream_t stream) {
  if (p.m != 1 || p.k > kMaxK || p.dtype == DType::kF32) return cudaErrorNotSupported;
  if (gated && p.n % 2 != 0) return cudaErrorInvalidValue;
  if (p.dtype == DType::kBF16) return launch_dtype<__nv_bfloat16>(p, gated, stream);
  return launch_dtype<__half>(p, gated, stream);
}

}  // namespace pagellm::cuda
