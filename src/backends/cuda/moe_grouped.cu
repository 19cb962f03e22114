// The experts' projections grouped by expert on the device (moe.h: moe_sort, moe_grouped_linear):
// every expert a step uses has its weights read once for all the rows routed to it, with no host
// round trip, so decode batches and captured graphs get what the host-sorted prefill pass gets.
//
// moe_grouped_linear's block: 16 output rows of one expert (gated: 16 gate and the 16 matching up
// rows) for all of that expert's rows, 8 rows to an MMA column block. Its 4 warps split k. The
// weights are the MMAs' A operand and stream straight from global memory into registers, one step
// ahead; the activation rows are B. Each quad of lanes reads 64 contiguous elements of a weight
// row (16 to a lane, two 16-byte loads) and the same 64 of an activation row: a dot product does
// not care which k pairs with which, so lane t's 16 elements serve as the k columns {2t, 2t + 1,
// 2t + 8, 2t + 9} of four m16n8k16 MMAs, in A and B alike, and no shared memory or ldmatrix is
// needed on the way in. Partial sums meet in shared memory at the end.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"
#include "backends/cuda/gemm/mma.cuh"
#include "backends/cuda/moe.h"

namespace pagellm::cuda {
namespace {

constexpr int kSortThreads = 1024;  // >= kMoeMaxExperts: one expert per thread in the scan
static_assert(kSortThreads >= kMoeMaxExperts);

constexpr int kWarps = 4;      // split k
constexpr int kTileRows = 16;  // output rows of a block (per half when gated)
constexpr int kStep = 64;      // k elements of a quad-row per step: 16 per lane
constexpr int kCols = 8;       // rows (tokens) per MMA column block

// Exclusive prefix sum of v over the block (blockDim.x = kSortThreads); *total gets the sum.
__device__ int block_exclusive_scan(int v, int* scratch, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kSortThreads / 32 ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    scratch[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  const int before = (warp > 0 ? scratch[warp - 1] : 0) + x - v;
  *total = scratch[kSortThreads / 32 - 1];
  __syncthreads();  // scratch is reused by the next scan
  return before;
}

// One block: counts per expert, their prefix sums (each expert's first row) and the list of the
// experts in use, then every slot placed at its expert's cursor.
__global__ void __launch_bounds__(kSortThreads)
    moe_sort_kernel(const __grid_constant__ MoeSortParams p) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ int count[kMoeMaxExperts];
  __shared__ int scratch[32];
  const int E = p.num_experts, tid = threadIdx.x;
  auto expert_of = [&](int s) { return min(max(p.ids[s], 0), E - 1); };  // the router's ids are
  for (int e = tid; e < E; e += kSortThreads) count[e] = 0;              // in range: memory safety
  __syncthreads();
  for (int s = tid; s < p.num_slots; s += kSortThreads) atomicAdd(&count[expert_of(s)], 1);
  __syncthreads();
  const int c = tid < E ? count[tid] : 0;
  int rows = 0, used = 0;
  const int begin = block_exclusive_scan(c, scratch, &rows);
  const int rank = block_exclusive_scan(c > 0 ? 1 : 0, scratch, &used);
  if (c > 0) {
    p.groups[1 + rank] = tid;
    p.groups[1 + E + rank] = begin;
  }
  if (tid == 0) {
    p.groups[0] = used;
    p.groups[1 + E + used] = p.num_slots;
  }
  if (tid < E) count[tid] = begin;  // now each expert's cursor
  __syncthreads();
  for (int s = tid; s < p.num_slots; s += kSortThreads) {
    const int row = atomicAdd(&count[expert_of(s)], 1);
    p.slot_of_row[row] = s;
    p.row_of_slot[s] = row;
  }
}

// 16 bytes at p, or zeros when !ok: weights streamed (evict first), activations cached.
__device__ __forceinline__ uint4 stream_or_zero(const void* p, bool ok) {
  return ok ? __ldcs(static_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}
__device__ __forceinline__ uint4 load_or_zero(const void* p, bool ok) {
  return ok ? __ldg(static_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

// A lane's weights of one step: [half][row g, row g + 8][16 elements: two 16-byte loads of
// 16-bit weights (elements 0-7, 8-15), one of FP8 codes].
template <typename W, int HALVES>
struct StepWeights {
  static constexpr int kLoads = sizeof(W) == 1 ? 1 : 2;
  uint4 v[HALVES][2][kLoads];
};

// A lane's 16 weights of one row as 8 packed pairs of T (pair q = elements 2q, 2q + 1): 16-bit
// weights as loaded, FP8 codes converted exactly (e4m3 values are all bf16 / f16 values).
template <typename T, typename W>
__device__ __forceinline__ void weight_pairs(const uint4* v, uint32_t (&pairs)[8]) {
  if constexpr (sizeof(W) == 1) {
    fp8x16_to_pairs<T>(v[0], pairs);
  } else {
    const uint32_t words[8] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y, v[1].z, v[1].w};
#pragma unroll
    for (int i = 0; i < 8; ++i) pairs[i] = words[i];
  }
}

// grid (ceil(out / 16), max_groups), kWarps warps. W: the weights' element, T or uint8_t (FP8
// e4m3 codes, their per-row scales applied to the sums). HALVES = 2: gated (gate and up). CB:
// column blocks per pass over the weights (up to 8 * CB rows of the expert share one read of them).
template <typename T, typename W, int HALVES, int CB>
__global__ void __launch_bounds__(kWarps * 32)
    moe_grouped_linear_kernel(const __grid_constant__ MoeGroupedLinearParams p) {
  pdl_wait();  // the groups come from moe_sort
  const int E = p.num_experts, group = blockIdx.y;
  if (group >= p.groups[0]) {  // the whole block
    pdl_launch_dependents();
    return;
  }
  const int expert = p.groups[1 + group];
  const int row_end = p.groups[2 + E + group];
  const int K = p.in_features, N = p.out_features;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * kTileRows;
  // This lane's weight rows n0 + g and n0 + g + 8 of each half (rows past N re-read row N - 1;
  // their sums are never stored).
  const W* w = static_cast<const W*>(p.w) + size_t(expert) * HALVES * N * size_t(K);
  const W* wrow[HALVES][2];
#pragma unroll
  for (int h = 0; h < HALVES; ++h)
#pragma unroll
    for (int r = 0; r < 2; ++r)
      wrow[h][r] = w + (size_t(h) * N + size_t(min(n0 + g + 8 * r, N - 1))) * K + t * 16;
  const int steps = (K + kStep - 1) / kStep;
  auto load_step = [&](StepWeights<W, HALVES>& a, int step) {
    const int k = step * kStep + t * 16;
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        a.v[h][r][0] = stream_or_zero(wrow[h][r] + step * kStep, k < K);  // FP8: k + 16 <= K
        if constexpr (StepWeights<W, HALVES>::kLoads == 2)
          a.v[h][r][1] = stream_or_zero(wrow[h][r] + step * kStep + 8, k + 8 < K);
      }
  };
  __shared__ float partial[kWarps][CB][HALVES][4][32];
  const T* x = static_cast<const T*>(p.x);
  T* y = static_cast<T*>(p.y);
  for (int r0 = p.groups[1 + E + group]; r0 < row_end; r0 += kCols * CB) {
    // This lane's activation row in each column block: row r0 + c * 8 + g of the sorted rows.
    const T* xrow[CB];
    bool has_row[CB];  // rows past the group's read nothing and multiply zeros
#pragma unroll
    for (int c = 0; c < CB; ++c) {
      const int r = r0 + c * kCols + g;
      has_row[c] = r < row_end;
      const int xr = !has_row[c] ? 0 : p.slot_of_row ? p.slot_of_row[r] / p.x_row_div : r;
      xrow[c] = x + size_t(xr) * K + t * 16;
    }
    const int blocks = min(CB, (row_end - r0 + kCols - 1) / kCols);  // column blocks with rows
    float acc[CB][HALVES][4] = {};
    StepWeights<W, HALVES> cur, next;
    if (warp < steps) load_step(cur, warp);
    for (int step = warp; step < steps; step += kWarps) {
      if (step + kWarps < steps) load_step(next, step + kWarps);
      const int k = step * kStep + t * 16;
      // The step's weights as MMA A fragments, converted once for every column block (FP8).
      uint32_t a0[HALVES][8], a1[HALVES][8];
#pragma unroll
      for (int h = 0; h < HALVES; ++h) {
        weight_pairs<T, W>(cur.v[h][0], a0[h]);
        weight_pairs<T, W>(cur.v[h][1], a1[h]);
      }
      if constexpr (CB == 1) {
#pragma unroll
        for (int c = 0; c < CB; ++c) {
          if (c >= blocks) break;
          const uint4 b0 = load_or_zero(xrow[c] + step * kStep, has_row[c] && k < K);
          const uint4 b1 = load_or_zero(xrow[c] + step * kStep + 8, has_row[c] && k + 8 < K);
          const uint32_t bw[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
          for (int h = 0; h < HALVES; ++h) {
            // MMA i takes this lane's elements 4i .. 4i + 3 as its k columns {2t, 2t+1, 2t+8,
            // 2t+9}.
#pragma unroll
            for (int i = 0; i < 4; ++i)
              mma16816<T>(acc[c][h], a0[h][2 * i], a1[h][2 * i], a0[h][2 * i + 1], a1[h][2 * i + 1],
                          bw[2 * i], bw[2 * i + 1]);
          }
        }
      } else {
        // From two column blocks, up to 4 blocks' activations loaded before their MMAs, so the
        // loads overlap (+3-25 % at 2+ blocks); at one block the plain order, which measured 5 %
        // faster there. Both spelled out: as lambdas the compiler scheduled them worse.
        constexpr int kGroup = CB < 4 ? CB : 4;
#pragma unroll
        for (int c0 = 0; c0 < CB; c0 += kGroup) {
          if (c0 >= blocks) break;
          uint4 xv[kGroup][2];
#pragma unroll
          for (int i = 0; i < kGroup; ++i) {
            const bool ok = c0 + i < blocks && has_row[c0 + i];
            xv[i][0] = load_or_zero(xrow[c0 + i] + step * kStep, ok && k < K);
            xv[i][1] = load_or_zero(xrow[c0 + i] + step * kStep + 8, ok && k + 8 < K);
          }
#pragma unroll
          for (int i = 0; i < kGroup; ++i) {
            if (c0 + i >= blocks) break;
            const uint32_t bw[8] = {xv[i][0].x, xv[i][0].y, xv[i][0].z, xv[i][0].w,
                                    xv[i][1].x, xv[i][1].y, xv[i][1].z, xv[i][1].w};
#pragma unroll
            for (int h = 0; h < HALVES; ++h) {
              // MMA j takes this lane's elements 4j .. 4j + 3 as its k columns {2t, 2t+1, 2t+8,
              // 2t+9}.
#pragma unroll
              for (int j = 0; j < 4; ++j)
                mma16816<T>(acc[c0 + i][h], a0[h][2 * j], a1[h][2 * j], a0[h][2 * j + 1],
                            a1[h][2 * j + 1], bw[2 * j], bw[2 * j + 1]);
            }
          }
        }
      }
      cur = next;
    }
#pragma unroll
    for (int c = 0; c < CB; ++c)
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) partial[warp][c][h][j][lane] = acc[c][h][j];
    __syncthreads();
    for (int c = warp; c < blocks; c += kWarps) {
      float sum[HALVES][4];
#pragma unroll
      for (int h = 0; h < HALVES; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float s = 0.f;
#pragma unroll
          for (int v = 0; v < kWarps; ++v) s += partial[v][c][h][j][lane];
          sum[h][j] = s;
        }
        // Accumulator j of the MMA: output row n0 + g (+ 8 for j >= 2), sorted row 2t + (j & 1).
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int n = n0 + g + (j >= 2 ? 8 : 0), r = r0 + c * kCols + 2 * t + (j & 1);
        if (n >= N || r >= row_end) continue;
        if constexpr (sizeof(W) == 1) {  // FP8: each weight row's scale
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            sum[h][j] *= p.w_scale[(size_t(expert) * HALVES + h) * N + n];
        }
        const float out = HALVES == 2
                              ? silu_mul<T>(round_to<T>(sum[0][j]), round_to<T>(sum[HALVES - 1][j]))
                              : sum[0][j];
        y[size_t(r) * N + n] = from_float<T>(out);
      }
    }
    __syncthreads();  // partial is reused by the next pass
  }
  pdl_launch_dependents();
}

template <typename T, int CB>
cudaError_t launch_grouped_linear(const MoeGroupedLinearParams& p, cudaStream_t stream) {
  const dim3 grid((p.out_features + kTileRows - 1) / kTileRows, p.max_groups);
  auto kernel = p.w_scale ? (p.gated ? moe_grouped_linear_kernel<T, uint8_t, 2, CB>
                                     : moe_grouped_linear_kernel<T, uint8_t, 1, CB>)
                          : (p.gated ? moe_grouped_linear_kernel<T, T, 2, CB>
                                     : moe_grouped_linear_kernel<T, T, 1, CB>);
  return launch_kernel(kernel, grid, kWarps * 32, 0, stream, p);
}

// Column blocks per pass for the rows an expert in use gets on average, with room for 1.5 times
// that: one pass over the weights for most experts, and accumulators for no more.
template <typename T>
cudaError_t launch_grouped_linear(const MoeGroupedLinearParams& p, cudaStream_t stream) {
  const int mean_rows = (p.num_rows + p.max_groups - 1) / p.max_groups;
  const int rows = mean_rows + mean_rows / 2;
  return rows <= kCols       ? launch_grouped_linear<T, 1>(p, stream)
         : rows <= 2 * kCols ? launch_grouped_linear<T, 2>(p, stream)
         : rows <= 4 * kCols ? launch_grouped_linear<T, 4>(p, stream)
                             : launch_grouped_linear<T, 8>(p, stream);
}

}  // namespace

cudaError_t moe_sort(const MoeSortParams& p, cudaStream_t stream) {
  if (p.num_slots < 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts)
    return cudaErrorInvalidValue;
  if (!p.ids || !p.slot_of_row || !p.row_of_slot || !p.groups) return cudaErrorInvalidValue;
  return launch_kernel(moe_sort_kernel, 1, kSortThreads, 0, stream, p);
}

bool moe_grouped_linear_supported(DType dtype, int out_features, int in_features, bool fp8) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && out_features >= 1 && in_features >= 8 &&
         in_features % (fp8 ? 16 : 8) == 0;
}

cudaError_t moe_grouped_linear(const MoeGroupedLinearParams& p, cudaStream_t stream) {
  if (!moe_grouped_linear_supported(p.dtype, p.out_features, p.in_features, p.w_scale != nullptr) ||
      p.x_row_div < 1 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.num_rows < 0 ||
      p.max_groups != std::min(p.num_experts, p.num_rows) || p.max_groups > 65535)
    return cudaErrorInvalidValue;
  if (p.max_groups == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.groups || !p.y || !aligned16(p.x) || !aligned16(p.w))
    return cudaErrorInvalidValue;
  return p.dtype == DType::kBF16 ? launch_grouped_linear<__nv_bfloat16>(p, stream)
                                 : launch_grouped_linear<__half>(p, stream);
}

}  // namespace pagellm::cuda
