// The pipeline shared by the INT weight-only kernels for decode batches (gemm/int_gemm.h): the
// mma.sync streaming kernel (int_weight_stream.cu) and the wgmma one (int_weight_wgmma.cu). A block
// owns 128 weight rows (16 per warp of 8) and one slice of k (the grid's y splits k where n alone
// gives too few blocks; the fp32 partial sums then go to the scratch and a second kernel adds
// them); a pipeline step is one 64-byte piece of every row (128 columns at 4 bits, 64 at 8); the
// rows' scales and zero points over the block's slice are staged once. Here: the launch geometry
// (the k split and the pipeline depth), the group constants' staging, the outputs' store and the
// sum of the slices.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/int_gemm.h"

namespace pagellm::cuda::intstream {

using attention::cp_async16;
using attention::cp_async_commit;
using attention::cp_async_wait;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16 * kWarps;  // weight rows per block
constexpr int kStepBytes = 64;      // packed bytes of a row per pipeline step: one piece
constexpr int kMaxSmem = 220 * 1024;

template <int BITS>
constexpr int kStepCols = kStepBytes * 8 / BITS;

// Host-chosen geometry of one launch.
struct StreamGeometry {
  int steps = 0;             // pipeline steps per k slice
  int splits = 1;            // k slices (grid.y)
  int stages = 2;            // pipeline depth
  int sc_row = 0;            // shared bytes per row for its scales over a slice (multiple of 16)
  int zr_row = 0;            // the same for zero points (0: symmetric)
  int smem = 0;              // dynamic shared memory bytes
  float* partial = nullptr;  // [splits, m, n] fp32 when splits > 1
};

// Issues the cp.async of `elem`-byte group constants (scales or zeros) of the block's rows for
// groups [ga, gb]: per row, the 16-byte aligned span holding them, at row * row_bytes.
__device__ __forceinline__ void load_group_span(const void* base, int64_t total_bytes, int elem,
                                                const IntLinearParams& p, int row0, int ga, int gb,
                                                int row_bytes, unsigned char* dst) {
  const int groups = p.k / p.group_size;
  const int chunks = row_bytes / 16;
  for (int c = threadIdx.x; c < kRows * chunks; c += kThreads) {
    const int r = c / chunks, ch = c % chunks;
    const int64_t row = min(row0 + r, p.n - 1);
    const int64_t begin = ((row * groups + ga) * elem) & ~int64_t{15};
    const int64_t end = (row * groups + gb + 1) * elem;
    const int64_t at = begin + 16 * ch;
    if (at >= end) continue;
    const int bytes = static_cast<int>(std::min<int64_t>(16, total_bytes - at));
    cp_async16(dst + r * row_bytes + 16 * ch, static_cast<const unsigned char*>(base) + at, bytes);
  }
}

// Offset of group `group` of weight row `row` (block row r) in a span loaded by load_group_span.
__device__ __forceinline__ int group_offset(const IntLinearParams& p, int r, int row, int ga,
                                            int group, int elem, int row_bytes) {
  const int64_t first = (int64_t{row} * (p.k / p.group_size) + ga) * elem;
  return r * row_bytes + int((first & 15) + int64_t{group - ga} * elem);
}

// Waits for the oldest step in flight (stages - 1 were committed ahead of it).
__device__ __forceinline__ void wait_for_step(int stages) {
  if (stages >= 4)
    cp_async_wait<2>();
  else if (stages == 3)
    cp_async_wait<1>();
  else
    cp_async_wait<0>();
}

// The block's sums to y (+ bias), or to its k slice's partial sums. Accumulator e of tile nt sits
// at weight row g (+ 8 for e >= 2) of the warp's 16, activation row 8 nt + 2t (+ 1 for odd e).
template <typename T, int NT>
__device__ __forceinline__ void store_stream_outputs(const IntLinearParams& p,
                                                     const StreamGeometry& geo, int row0,
                                                     const float (&c)[NT][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + warp * 16 + g + (e >= 2 ? 8 : 0);
      const int mi = 8 * nt + 2 * t + (e & 1);
      if (row >= p.n || mi >= p.m) continue;
      if (geo.splits > 1) {
        geo.partial[(int64_t{blockIdx.y} * p.m + mi) * p.n + row] = c[nt][e];
      } else {
        const float b = bias ? to_float(bias[row]) : 0.f;
        static_cast<T*>(p.y)[int64_t{mi} * p.n + row] = from_float<T>(c[nt][e] + b);
      }
    }
}

// y = the sum of the k slices' partial sums (+ bias).
template <typename T>
__global__ void sum_splits_kernel(const __grid_constant__ IntLinearParams p, const float* partial,
                                  int splits) {
  pdl_wait();
  const int64_t total = int64_t{p.m} * p.n;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= total) return;
  float sum = p.bias ? to_float(static_cast<const T*>(p.bias)[i % p.n]) : 0.f;
  for (int s = 0; s < splits; ++s) sum += partial[s * total + i];
  static_cast<T*>(p.y)[i] = from_float<T>(sum);
}

// The geometry of `want` k slices (fewer where the steps do not divide).
inline StreamGeometry slice_geometry(const IntLinearParams& p, int bits, int stage,
                                     int blocks_per_sm, int want, int slack) {
  StreamGeometry geo;
  const int total_steps = (p.k * bits / 8 + kStepBytes - 1) / kStepBytes;
  geo.steps = (total_steps + want - 1) / want;
  geo.splits = (total_steps + geo.steps - 1) / geo.steps;
  // Groups a slice can touch: its columns' span, plus one where a group straddles its start.
  const int span = (geo.steps * kStepBytes * 8 / bits + p.group_size - 1) / p.group_size + 1;
  geo.sc_row = (span * 2 + 15 + 15) / 16 * 16;
  geo.zr_row = p.zero ? (span + 15 + 15) / 16 * 16 : 0;
  const int fixed = kRows * (geo.sc_row + geo.zr_row) + slack;
  const int budget = blocks_per_sm == 2 ? kMaxSmem / 2 : kMaxSmem;
  geo.stages = std::max(0, std::min(4, (budget - fixed) / stage));
  geo.smem = geo.stages * stage + fixed;
  geo.partial = geo.splits > 1 ? static_cast<float*>(p.w_work) : nullptr;
  return geo;
}

// A kernel's constraints on its geometry: the fewest pipeline steps a k slice may have, and shared
// bytes reserved besides the stages and group constants (to align the stages).
struct PipelineShape {
  int min_steps = 4, slack = 0;
};

// The k split with the least modelled traffic: the weight bytes over the fraction of the GPU's
// block slots the grid keeps busy, plus the partial sums written and read back (8 bytes per
// output and slice, counted at a quarter: they stay in L2), among splits whose slices' group
// constants leave room for two pipeline stages; at most 16 slices of >= shape.min_steps steps,
// their partial sums within the scratch (p.w_work holds n * k 16-bit values), none without it.
inline StreamGeometry choose_geometry(const IntLinearParams& p, int bits, int stage,
                                      int blocks_per_sm, const PipelineShape& shape = {}) {
  const int total_steps = (p.k * bits / 8 + kStepBytes - 1) / kStepBytes;
  const int blocks_n = (p.n + kRows - 1) / kRows;
  const int slots = sm_count() * blocks_per_sm;
  const double weight_bytes = double(p.n) * p.k * bits / 8;
  auto allowed = [&](int splits) {
    return splits == 1 || (p.w_work && splits <= 16 && total_steps / splits >= shape.min_steps &&
                           int64_t{splits} * p.m * 2 <= p.k);
  };
  StreamGeometry best = slice_geometry(p, bits, stage, blocks_per_sm, 1, shape.slack);
  double best_cost = std::numeric_limits<double>::infinity();
  for (int want = 1; allowed(want); ++want) {
    const StreamGeometry geo = slice_geometry(p, bits, stage, blocks_per_sm, want, shape.slack);
    if (geo.stages < 2) continue;
    const int blocks = blocks_n * geo.splits;
    const double busy = double(blocks) / (double((blocks + slots - 1) / slots) * slots);
    const double partial_bytes = geo.splits > 1 ? 2.0 * geo.splits * p.m * p.n : 0.0;
    const double cost = weight_bytes / busy + partial_bytes;
    if (cost < best_cost) best = geo, best_cost = cost;
  }
  return best;
}

// The kernel over grid (ceil(n / 128), splits), then the sum of the splits' partial sums.
template <typename T>
inline cudaError_t launch_with_splits(void (*kernel)(IntLinearParams, StreamGeometry),
                                      const IntLinearParams& p, const StreamGeometry& geo,
                                      cudaStream_t stream) {
  const dim3 grid((p.n + kRows - 1) / kRows, geo.splits);
  const cudaError_t err = launch_kernel(kernel, grid, kThreads, size_t(geo.smem), stream, p, geo);
  if (err != cudaSuccess || geo.splits == 1) return err;
  const int64_t total = int64_t{p.m} * p.n;
  const dim3 sum_grid(unsigned((total + 255) / 256));
  return launch_kernel(sum_splits_kernel<T>, sum_grid, 256, 0, stream, p,
                       static_cast<const float*>(geo.partial), geo.splits);
}

}  // namespace pagellm::cuda::intstream
