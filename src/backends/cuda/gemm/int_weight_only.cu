// INT4 / INT8 weight-only linear (gemm/int_gemm.h): the packed weight is read once, dequantized in
// registers and multiplied on tensor cores (mma.sync m16n8k16, fp32 accumulation) against up to 16
// activation rows per block; larger m runs the weight once per 16 rows with those blocks next to
// each other in the grid, so that the re-reads come from L2. Past 16 rows (4 bits) or 32 (8 bits)
// int_linear takes the streaming kernel instead (gemm/int_weight_stream.cu), which dequantizes
// each weight once for all rows; this one stays the choice for small m, where its k split over a
// block's warps gives every SM work.
//
// Layout (as gemm/fp8_weight_only_mma.cu): a block owns 16 * kTiles weight rows and splits k over
// its 8 warps in 256-byte chunks of each row; lane (g = lane / 4, t = lane % 4) loads 16 contiguous
// bytes of rows g and g + 8 of each tile per chunk piece: 32 columns at 4 bits, 16 at 8 bits, all
// in one group (group sizes are multiples of 32). The mma's k order only has to agree between A and
// B, so the lane's columns feed its own A slots of consecutive mmas, and B takes the activations at
// the same columns. The integers are recovered exactly:
//   4 bits: a mask puts nibbles i and i + 4 (adjacent columns) into the mantissas of a 16-bit pair
//           of magic numbers (bf16 128 + q, f16 1024 + q), and one subtraction of (magic + z) gives
//           the exact q - z;
//   8 bits: a byte permutation builds f16 pairs 1024 + q, and the subtraction gives q - z exactly
//   in
//           f16 (converted to bf16 for bf16 models, still exact).
// Then either the mma takes q - z and its sums are scaled (LATE, below), or the pairs are scaled
// first, each weight rounded once to the dtype (group sizes too small for one group per mma).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/int_dequant.cuh"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/gemm/mma.cuh"

namespace pagellm::cuda {
namespace {

using namespace intq;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
// Blocks per SM of the one-tile kernels (their register cap): three (80 registers) ran
// Llama-3.1-8B's qkv at m = 1 faster (one wave of its 384 tiles) but every other shape slower on
// an H200.
constexpr int kOneTileBlocksPerSm = 2;

// Group of column `col` without an integer division (a runtime divisor costs ~20 instructions per
// piece): (col + 0.5) / group_size lies at least 0.5 / group_size from an integer, more than fp32's
// error on it while (col / group_size + 1) * group_size < 2^22 (valid() bounds k).
__device__ __forceinline__ int group_of(int col, float inv_group) {
  return int((float(col) + 0.5f) * inv_group);
}

template <typename T, int BITS>
__device__ __forceinline__ RawGroup<T> load_group(const IntLinearParams& p, int row, int group) {
  const int64_t at = int64_t{row} * (p.k / p.group_size) + group;
  return {static_cast<const T*>(p.scale)[at], p.zero ? int{p.zero[at]} : 1 << (BITS - 1)};
}

// The products of one chunk of the lane's rows (dequantized from `wv` with the group constants
// `gr`) with the activations at the same columns, added into c.
template <typename T, int BITS, int TILES, int NT, bool LATE, int PIECES>
__device__ __forceinline__ void multiply_chunk(const IntLinearParams& p, int kb, int chunk,
                                               const uint4 (&wv)[TILES][2][PIECES],
                                               const RawGroup<T> (&gr)[TILES][2][PIECES],
                                               const T* const (&x)[NT], float (&c)[TILES][NT][4]) {
  constexpr int kV = kVals<BITS>;
  const int t = (threadIdx.x & 31) & 3;
#pragma unroll
  for (int u = 0; u < PIECES; ++u) {
    if (chunk + u * 64 >= kb) break;  // warp-uniform
    // A row that ends inside the round (4-bit rows of k % 128 != 0, 8-bit of k % 64 != 0): the
    // lanes past it multiply zero activations (their pieces re-read the row's last one).
    const bool in_row = chunk + u * 64 + t * 16 < kb;
    const int col = (chunk + u * 64 + t * 16) * (8 / BITS);
    uint32_t lo[TILES][kV / 2], hi[TILES][kV / 2];  // rows g and g + 8 of each tile
    float s_lo[TILES], s_hi[TILES];
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile) {
      const GroupConst<T, BITS> gl = group_const<T, BITS>(gr[tile][0][u]);
      const GroupConst<T, BITS> gh = group_const<T, BITS>(gr[tile][1][u]);
      dequant_piece<T, BITS, LATE>(wv[tile][0][u], gl, lo[tile]);
      dequant_piece<T, BITS, LATE>(wv[tile][1][u], gh, hi[tile]);
      s_lo[tile] = gl.scale, s_hi[tile] = gh.scale;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint32_t b[kV / 2];  // activation pairs at the lane's columns
#pragma unroll
      for (int v = 0; v < kV / 8; ++v) {
        const uint4 q =
            in_row ? *reinterpret_cast<const uint4*>(x[nt] + col + 8 * v) : make_uint4(0, 0, 0, 0);
        b[4 * v] = q.x, b[4 * v + 1] = q.y, b[4 * v + 2] = q.z, b[4 * v + 3] = q.w;
      }
#pragma unroll
      for (int tile = 0; tile < TILES; ++tile) {
        // With LATE the mmas alternate between two accumulators (two dependency chains instead
        // of one), except for 8 bits with two activation tiles, which measured slower with them
        // (H200, Llama-3.1-8B shapes: INT4 decode +1-2 %, INT8 batch 1 +2 %, INT8 batch 16 -2 %).
        constexpr bool kTwoChains = BITS == 4 || NT == 1;
        float d[2][4] = {};
#pragma unroll
        for (int j = 0; j < kV / 4; ++j) {
          float(&acc)[4] = LATE ? d[kTwoChains ? j & 1 : 0] : c[tile][nt];
          mma16816<T>(acc, lo[tile][2 * j], hi[tile][2 * j], lo[tile][2 * j + 1],
                      hi[tile][2 * j + 1], b[2 * j], b[2 * j + 1]);
        }
        if constexpr (LATE) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {  // one chain: no add of the unused zero accumulator
            const float sum = kTwoChains ? d[0][e] + d[1][e] : d[0][e];
            c[tile][nt][e] = fmaf(sum, e < 2 ? s_lo[tile] : s_hi[tile], c[tile][nt][e]);
          }
        }
      }
    }
  }
}

// Sums the warps' partial products of the weight tile at row0 and stores them (+ bias).
template <typename T, int TILES, int NT>
__device__ __forceinline__ void reduce_and_store(const IntLinearParams& p, int row0, int m0,
                                                 const float (&c)[TILES][NT][4],
                                                 float (&partial)[kWarps][TILES][NT][4][32]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  __syncthreads();  // the previous tile's partial sums are read
#pragma unroll
  for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp][tile][nt][e][lane] = c[tile][nt][e];
  __syncthreads();
  if (warp >= TILES * NT) return;
  const int tile = warp / NT, nt = warp % NT;
  T* y = static_cast<T*>(p.y);
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float sum = 0.f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][tile][nt][e][lane];
    // Accumulator e sits at row g (+ 8 for e >= 2), activation column 2t (+ 1 for odd e).
    const int row = row0 + 16 * tile + g + (e >= 2 ? 8 : 0);
    const int mi = m0 + 8 * nt + 2 * t + (e & 1);
    if (row >= p.n || mi >= p.m) continue;
    if (bias) sum += to_float(bias[row]);
    y[int64_t{mi} * p.n + row] = from_float<T>(sum);
  }
}

// grid: (ceil(m / (8 * NT)), up to ceil(n / (16 * TILES))): the m-slices of one weight tile are
// neighbours, so a weight read for the first slice is in L2 for the others.
// LATE: every mma's 16 k-slots lie in one group (the lanes of a piece round cover 128 columns at
// 4 bits, 64 at 8: group sizes that are multiples of those), so the mma multiplies the exact
// integers q - z and each round's sums are scaled once, in fp32, instead of every weight.
// PREFETCH: the next chunk's weights and group constants are loaded before the current one is
// multiplied (one-tile blocks, whose registers allow the second buffer).
template <typename T, int BITS, int TILES, int NT, bool LATE>
__global__ void __launch_bounds__(kThreads, TILES == 1 ? kOneTileBlocksPerSm : 1)
    int_mma_kernel(const __grid_constant__ IntLinearParams p) {
  constexpr bool kPrefetch = TILES == 1;
  // 16-byte pieces per row per lane per chunk: 2 where the next chunk is prefetched (so that a
  // 4096-column row gives each warp two chunks to overlap), else 4.
  constexpr int kPieces = kPrefetch ? 2 : 4;
  constexpr int kChunk = kPieces * 4 * 16;  // bytes of a row per warp per iteration
  __shared__ float partial[kWarps][TILES][NT][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int m0 = blockIdx.x * (8 * NT);
  const int kb = p.k * BITS / 8;  // bytes of a packed row
  const float inv_group = 1.f / float(p.group_size);
  const T* x[NT];  // activation row m0 + 8 * nt + g (rows past m re-read row m - 1, discarded)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    x[nt] = static_cast<const T*>(p.x) + int64_t{min(m0 + 8 * nt + g, p.m - 1)} * p.k;

  struct Chunk {
    uint4 w[TILES][2][kPieces];
    RawGroup<T> g[TILES][2][kPieces];
  };
  // The chunk at byte `chunk` of the rows of the weight tile starting at row0.
  auto load_weights = [&](int row0, int chunk, Chunk& buf) {
#pragma unroll
    for (int tile = 0; tile < TILES; ++tile)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = min(row0 + 16 * tile + 8 * h + g, p.n - 1);
        const uint8_t* w = static_cast<const uint8_t*>(p.wq) + int64_t{row} * kb;
#pragma unroll
        for (int u = 0; u < kPieces; ++u) {
          // A piece past the row's end re-reads its last one: multiply_chunk gives those lanes
          // zero activations (and skips rounds wholly past it), so no branch around the load.
          const int off = min(chunk + u * 64 + t * 16, kb - 16);
          buf.w[tile][h][u] = __ldcs(reinterpret_cast<const uint4*>(w + off));
          buf.g[tile][h][u] = load_group<T, BITS>(p, row, group_of(off * (8 / BITS), inv_group));
        }
      }
  };
  // The block walks weight tiles blockIdx.y, + gridDim.y, ...: where the grid is smaller than the
  // tile count, each warp's prefetch runs on from one tile's last chunk to the next tile's first,
  // so that no block waits on a cold start after the first.
  constexpr int kStride = kWarps * kChunk;
  const int tile_stride = gridDim.y * (16 * TILES);
  const int first_row0 = blockIdx.y * (16 * TILES);
  const int first_chunk = warp * kChunk;
  Chunk a, next;
  if (first_chunk < kb) load_weights(first_row0, first_chunk, a);
  pdl_wait();
  pdl_launch_dependents();
  for (int row0 = first_row0; row0 < p.n; row0 += tile_stride) {
    float c[TILES][NT][4] = {};
    for (int chunk = first_chunk; chunk < kb; chunk += kStride) {
      if constexpr (kPrefetch) {
        const bool last = chunk + kStride >= kb;
        if (!last)
          load_weights(row0, chunk + kStride, next);
        else if (row0 + tile_stride < p.n)
          load_weights(row0 + tile_stride, first_chunk, next);
      } else if (chunk != first_chunk || row0 != first_row0) {
        load_weights(row0, chunk, a);
      }
      multiply_chunk<T, BITS, TILES, NT, LATE, kPieces>(p, kb, chunk, a.w, a.g, x, c);
      if constexpr (kPrefetch) a = next;
    }
    reduce_and_store<T, TILES, NT>(p, row0, m0, c, partial);
  }
}

// The one-tile kernels (whose prefetch runs across tiles) take a persistent grid of
// kOneTileBlocksPerSm blocks per SM (their occupancy) over all activation slices, each block
// walking several weight tiles; the two-tile kernel one block per tile.
template <typename T, int BITS, int TILES, int NT>
cudaError_t launch_mma(const IntLinearParams& p, cudaStream_t stream) {
  const int tiles = (p.n + 16 * TILES - 1) / (16 * TILES);
  const int slices = (p.m + 8 * NT - 1) / (8 * NT);
  const int blocks =
      TILES == 1 ? std::min(tiles, std::max(1, kOneTileBlocksPerSm * sm_count() / slices)) : tiles;
  const dim3 grid(slices, blocks);
  if (p.group_size % (BITS == 4 ? 128 : 64) == 0)
    return launch_kernel(int_mma_kernel<T, BITS, TILES, NT, true>, grid, kThreads, 0, stream, p);
  return launch_kernel(int_mma_kernel<T, BITS, TILES, NT, false>, grid, kThreads, 0, stream, p);
}

// One activation tile (8 rows) per block up to m = 8, two beyond, in slices of 16 rows (whose
// blocks are neighbours: the weight comes from L2 for all but the first). Rows per block, measured
// on H100 over Llama-3.1-8B's shapes (docs/PERF.md, "INT4 / INT8 kernels"): 16 with the prefetch
// for 8-bit weights and for 4-bit up to m = 8, 32 for 4-bit beyond (its dequantization per byte is
// twice the 8-bit one, and two tiles share each activation load). Four and eight activation tiles
// per block measured slower at m = 32 and 64.
template <typename T, int BITS>
cudaError_t launch_for_shape(const IntLinearParams& p, int tiles, cudaStream_t stream) {
  const bool one_tile = tiles == 0 ? BITS == 8 || p.m <= 8 : tiles == 1;
  if (p.m <= 8)
    return one_tile ? launch_mma<T, BITS, 1, 1>(p, stream) : launch_mma<T, BITS, 2, 1>(p, stream);
  return one_tile ? launch_mma<T, BITS, 1, 2>(p, stream) : launch_mma<T, BITS, 2, 2>(p, stream);
}

// One thread per 16-byte piece: out[r, cols of the piece] = dequantized weights.
template <typename T, int BITS>
__global__ void dequant_kernel(const __grid_constant__ IntLinearParams p, T* out) {
  const int64_t kb = int64_t{p.k} * BITS / 8;
  const int64_t pieces_per_row = kb / 16;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{p.n} * pieces_per_row) return;
  const int row = int(i / pieces_per_row);
  const int piece = int(i % pieces_per_row);
  const int col = piece * kVals<BITS>;
  const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(p.wq) +
                                                  int64_t{row} * kb + piece * 16);
  uint32_t pairs[kVals<BITS> / 2];
  dequant_piece<T, BITS, false>(
      v, group_const<T, BITS>(load_group<T, BITS>(p, row, col / p.group_size)), pairs);
  uint4* dst = reinterpret_cast<uint4*>(out + int64_t{row} * p.k + col);
#pragma unroll
  for (int q = 0; q < kVals<BITS> / 8; ++q)
    dst[q] = make_uint4(pairs[4 * q], pairs[4 * q + 1], pairs[4 * q + 2], pairs[4 * q + 3]);
}

template <typename T>
__global__ void gather_kernel(const T* x, const int32_t* perm, T* out, int m, int k) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{m} * k) return;
  const int64_t r = i / k;
  out[i] = x[r * k + perm[i % k]];
}

// The rows int_linear gives the wgmma kernel: 17-64, and 9-16 for weights of 2^25+ elements. Below
// 9 rows, and for smaller weights up to 16, the register kernel's one or two 16-row tiles are as
// fast or faster. H200, Llama-3.1-8B's projections at m = 16 (one LOP3 per nibble pair, docs/
// PERF.md): gate_up (117M) 32.8 µs on wgmma against 39.6, down (59M) 18.6 against 19.2, qkv (25M)
// 12.4 against 12.3, o (17M) 9.1 against 7.2; at m = 8 gate_up ties (29.3 / 29.4) and down loses
// (16.8 / 16.1). At m = 32 the wgmma kernel takes the four in 78 µs against the streaming
// kernel's 128, at m = 64 in 107 against 184.
constexpr int kWgmmaMinRows = 17;
constexpr int kWgmmaMinRowsLarge = 9;
constexpr int64_t kWgmmaLargeWeights = int64_t{1} << 25;

bool wgmma_rows(const IntLinearParams& p) {
  const bool large = int64_t{p.n} * p.k >= kWgmmaLargeWeights;
  return p.m >= (large ? kWgmmaMinRowsLarge : kWgmmaMinRows) && p.m <= kIntWeightOnlyMaxRows;
}

// Whether int_linear takes the wgmma kernel where it applies: yes, unless PAGELLM_INT_WGMMA=0 at
// start (the streaming and register kernels then, as before it; for A/B runs).
bool wgmma_chosen() {
  static const bool on = [] {
    const char* env = std::getenv("PAGELLM_INT_WGMMA");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}

// Where the streaming kernel goes first: past 16 rows at 4 bits, 32 at 8 (measured on H100 over
// Llama-3.1-8B's projections, docs/PERF.md "INT4 / INT8 kernels").
bool stream_kernel_first(const IntLinearParams& p) { return p.m > (p.bits == 4 ? 16 : 32); }

// Where the one-row GEMV goes first at m = 1: at 8 bits always; at 4 bits, where its 16-row blocks
// number more than two per SM. With fewer (4 warps each), its 4-bit dequantization is short of
// warps to hide behind, and the register kernel is faster (H200, Llama-3.1-8B's o and down, 256
// blocks on 132 SMs: 6.1 and 14.3 µs against the GEMV's 6.7 and 16.9; qkv, 384 blocks: 9.4
// against 8.5; docs/PERF.md).
bool gemv_first(const IntLinearParams& p) {
  return p.bits == 8 || (p.n + 15) / 16 > 2 * sm_count();
}

bool valid(const IntLinearParams& p) {
  if (p.m < 0 || p.n <= 0 || p.k <= 0 || p.k % 32 != 0 || p.k >= kIntMaxK) return false;
  if (p.group_size <= 0 || p.group_size % 32 != 0 || p.k % p.group_size != 0) return false;
  if (p.bits != 4 && p.bits != 8) return false;
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF16) return false;
  return p.x && p.wq && p.scale && p.y && aligned16(p.x) && aligned16(p.wq);
}

}  // namespace

cudaError_t int_weight_only(const IntLinearParams& p, cudaStream_t stream, int tiles) {
  if (!valid(p) || tiles < 0 || tiles > 5) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (tiles == 3) return int_weight_stream(p, stream);
  if (tiles == 4) return int_weight_gemv(p, false, stream);
  if (tiles == 5) return int_weight_wgmma(p, stream);
  if (tiles == 0 && p.m == 1 && gemv_first(p)) {
    const cudaError_t err = int_weight_gemv(p, false, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (tiles == 0 && wgmma_rows(p) && wgmma_chosen()) {
    const cudaError_t err = int_weight_wgmma(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (tiles == 0 && p.m <= kIntWeightOnlyMaxRows && stream_kernel_first(p)) {
    const cudaError_t err = int_weight_stream(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (p.dtype == DType::kBF16)
    return p.bits == 4 ? launch_for_shape<__nv_bfloat16, 4>(p, tiles, stream)
                       : launch_for_shape<__nv_bfloat16, 8>(p, tiles, stream);
  return p.bits == 4 ? launch_for_shape<__half, 4>(p, tiles, stream)
                     : launch_for_shape<__half, 8>(p, tiles, stream);
}

cudaError_t int_linear_silu_and_mul(GemmContext* ctx, const IntLinearParams& p,
                                    cudaStream_t stream) {
  if (!ctx || !valid(p) || p.n % 2 != 0) return cudaErrorInvalidValue;
  return int_weight_gemv(p, true, stream);
}

cudaError_t int_dequantize_weight(const IntLinearParams& p, void* out, cudaStream_t stream) {
  IntLinearParams q = p;  // x and y are not read
  q.m = 0, q.x = out, q.y = out;
  if (!valid(q)) return cudaErrorInvalidValue;
  const int64_t pieces = int64_t{p.n} * (int64_t{p.k} * p.bits / 8 / 16);
  const int threads = 256;
  const dim3 grid(unsigned((pieces + threads - 1) / threads));
  if (p.dtype == DType::kBF16) {
    auto* o = static_cast<__nv_bfloat16*>(out);
    if (p.bits == 4)
      dequant_kernel<__nv_bfloat16, 4><<<grid, threads, 0, stream>>>(p, o);
    else
      dequant_kernel<__nv_bfloat16, 8><<<grid, threads, 0, stream>>>(p, o);
  } else if (p.dtype == DType::kF16) {
    auto* o = static_cast<__half*>(out);
    if (p.bits == 4)
      dequant_kernel<__half, 4><<<grid, threads, 0, stream>>>(p, o);
    else
      dequant_kernel<__half, 8><<<grid, threads, 0, stream>>>(p, o);
  } else {
    return cudaErrorInvalidValue;
  }
  return launch_status();
}

cudaError_t int_gather_columns(DType dtype, const void* x, const int32_t* perm, void* out, int m,
                               int k, cudaStream_t stream) {
  if (m < 0 || k <= 0 || !x || !perm || !out) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  const int64_t total = int64_t{m} * k;
  const int threads = 256;
  const dim3 grid(unsigned((total + threads - 1) / threads));
  if (dtype == DType::kBF16)
    gather_kernel<<<grid, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), perm,
                                                static_cast<__nv_bfloat16*>(out), m, k);
  else if (dtype == DType::kF16)
    gather_kernel<<<grid, threads, 0, stream>>>(static_cast<const __half*>(x), perm,
                                                static_cast<__half*>(out), m, k);
  else
    return cudaErrorInvalidValue;
  return launch_status();
}

cudaError_t int_linear(GemmContext* ctx, const IntLinearParams& p, cudaStream_t stream) {
  if (!ctx || !valid(p)) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (p.m <= kIntWeightOnlyMaxRows || !p.w_work) return int_weight_only(p, stream, 0);
  cudaError_t err = int_dequantize_weight(p, p.w_work, stream);
  if (err != cudaSuccess) return err;
  const GemmParams g{p.dtype, p.x, p.w_work, p.y, p.m, p.n, p.k, false, p.bias};
  return gemm(ctx, g, stream);
}

}  // namespace pagellm::cuda
