// FP8 weight-only linear on tensor cores for m up to 16 (and, in slices of 16, any m): the
// CUDA-core kernel (fp8_weight_only.cu) spends m FMAs per weight, so from m ~ 4 it is bound by
// arithmetic rather than by reading the weight; here each weight is converted once (e4m3 -> f16,
// -> bf16 for bf16 models; both exact) and multiplied by mma.sync m16n8k16 against 8 or 16
// activation rows, fp32 accumulation. Activations stay unquantized, as on the CUDA-core path.
//
// Layout: a block owns 32 weight rows (two m16 tiles) and splits k over its 8 warps in 256-byte
// chunks; lane (g = lane / 4, t = lane % 4) loads 16 contiguous bytes of rows g, g + 8, g + 16,
// g + 24 per chunk piece (the 4 lanes of a group cover 64 contiguous bytes of a row). The mma's k
// order only has to agree between A and B, so the 16 bytes a lane holds feed its own A slots of
// four consecutive mmas, and B takes the activations at the same 16 columns (two 16-byte loads).
// The warps' accumulators are summed through shared memory at the end.
#include <cuda_fp8.h>

#include <type_traits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"
#include "backends/cuda/gemm/fp8_internal.h"
#include "backends/cuda/gemm/mma.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTiles = 2;                 // m16 weight tiles per block: 32 rows
constexpr int kPieces = 4;                // 16-byte pieces per row per lane per chunk
constexpr int kChunk = kPieces * 4 * 16;  // bytes of k per warp per iteration (256)

// grid: (ceil(n / 32), ceil(m / (8 * NT))); NT n8 tiles of activation rows (m <= 8 or <= 16).
template <typename T, int NT>
__global__ void __launch_bounds__(kThreads)
    fp8_mma_kernel(const __grid_constant__ Fp8LinearParams p) {
  __shared__ float partial[kWarps][kTiles][NT][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * (16 * kTiles);
  const int m0 = blockIdx.y * (8 * NT);
  const uint8_t* w[kTiles][2];  // rows row0 + 16 * tile + g (+ 8)
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      w[tile][h] = static_cast<const uint8_t*>(p.wq) +
                   int64_t{min(row0 + 16 * tile + 8 * h + g, p.n - 1)} * p.k;
  const T* x[NT];  // activation row m0 + 8 * nt + g (rows past m re-read row m - 1, discarded)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    x[nt] = static_cast<const T*>(p.x) + int64_t{min(m0 + 8 * nt + g, p.m - 1)} * p.k;
  float c[kTiles][NT][4] = {};

  // All weight pieces of a chunk in flight first; pieces past k read as zero weights.
  uint4 a[kTiles][2][kPieces];
  auto load_weights = [&](int chunk) {
#pragma unroll
    for (int u = 0; u < kPieces; ++u) {
      const int off = chunk + u * 64 + t * 16;
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          a[tile][h][u] = off < p.k ? __ldcs(reinterpret_cast<const uint4*>(w[tile][h] + off))
                                    : make_uint4(0, 0, 0, 0);
    }
  };
  // The weights do not depend on the kernel before: the first chunk is loaded before waiting for
  // it (common.cuh: programmatic dependent launch).
  const int first_chunk = warp * kChunk;
  if (first_chunk < p.k) load_weights(first_chunk);
  pdl_wait();
  for (int chunk = first_chunk; chunk < p.k; chunk += kWarps * kChunk) {
    if (chunk != first_chunk) load_weights(chunk);
    // The last weight round is in flight: the next kernel may start its own stream (late_trigger).
    if (chunk + kWarps * kChunk >= p.k) pdl_launch_dependents();
#pragma unroll
    for (int u = 0; u < kPieces; ++u) {
      if (chunk + u * 64 >= p.k) break;  // warp-uniform: no lane has a piece left
      const int off = chunk + u * 64 + t * 16;
      uint32_t b[NT][8];  // activation pairs at the lane's 16 columns (zero past k)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
        if (off < p.k) {
          lo = *reinterpret_cast<const uint4*>(x[nt] + off);
          hi = *reinterpret_cast<const uint4*>(x[nt] + off + 8);
        }
        b[nt][0] = lo.x, b[nt][1] = lo.y, b[nt][2] = lo.z, b[nt][3] = lo.w;
        b[nt][4] = hi.x, b[nt][5] = hi.y, b[nt][6] = hi.z, b[nt][7] = hi.w;
      }
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        uint32_t lo_rows[8], hi_rows[8];  // rows g and g + 8 of the tile
        fp8x16_to_pairs<T>(a[tile][0][u], lo_rows);
        fp8x16_to_pairs<T>(a[tile][1][u], hi_rows);
        // mma j takes the lane's columns 4j .. 4j + 3: A slots (g, 2t..2t+1) = pair 2j of row g,
        // (g + 8, 2t..) = pair 2j of row g + 8, then the +8 columns = pairs 2j + 1; B alike.
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mma16816<T>(c[tile][nt], lo_rows[2 * j], hi_rows[2 * j], lo_rows[2 * j + 1],
                        hi_rows[2 * j + 1], b[nt][2 * j], b[nt][2 * j + 1]);
      }
    }
  }

#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][tile][nt][e][lane] = c[tile][nt][e];
  __syncthreads();
  // The first kTiles * NT warps each sum one (tile, nt) over the k-slices of all warps.
  if (warp >= kTiles * NT) return;
  const int tile = warp / NT, nt = warp % NT;
  float sum[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    sum[e] = 0.f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum[e] += partial[wi][tile][nt][e][lane];
  }
  // Accumulator e sits at row g (+ 8 for e >= 2), activation column 2t (+ 1 for odd e).
  T* y = static_cast<T*>(p.y);
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int row = row0 + 16 * tile + g + (e >= 2 ? 8 : 0);
    const int mi = m0 + 8 * nt + 2 * t + (e & 1);
    if (row >= p.n || mi >= p.m) continue;
    float out = sum[e] * p.w_scale[row];
    if (bias) out += to_float(bias[row]);
    y[int64_t{mi} * p.n + row] = from_float<T>(out);
  }
}

template <typename T, int NT>
cudaError_t launch(const Fp8LinearParams& p, cudaStream_t stream) {
  const dim3 grid((p.n + 16 * kTiles - 1) / (16 * kTiles), (p.m + 8 * NT - 1) / (8 * NT));
  return launch_kernel(fp8_mma_kernel<T, NT>, grid, kThreads, 0, stream, p);
}

}  // namespace

cudaError_t fp8_weight_only_mma(const Fp8LinearParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.n <= 0 || p.k <= 0 || p.k % 16 != 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (!p.x || !p.wq || !p.w_scale || !p.y || !aligned16(p.x) || !aligned16(p.wq))
    return cudaErrorInvalidValue;
  if (p.dtype == DType::kF32 || p.w_block != 0) return cudaErrorNotSupported;
  const bool one_tile = p.m <= 8;
  if (p.dtype == DType::kBF16)
    return one_tile ? launch<__nv_bfloat16, 1>(p, stream) : launch<__nv_bfloat16, 2>(p, stream);
  return one_tile ? launch<__half, 1>(p, stream) : launch<__half, 2>(p, stream);
}

}  // namespace pagellm::cuda
