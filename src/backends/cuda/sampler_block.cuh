// The GPU sampler's block-level pieces, included only by sampler.cu: the block shape, the shared
// memory layout, the value order (order-preserving keys, cuts, selection predicates) and the
// block-wide reductions and scans that every step of sampler.cu's kernel is built from.
#pragma once

#include <cfloat>
#include <climits>
#include <type_traits>

#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

// 512 threads per row. The same code with 1024 threads (64 registers per thread) returned wrong
// block reductions on an H100 (all -inf rows reduced to finite maxima, argmax losing the maximum)
// while the 512-thread build, the ptxas -O0 build and a host emulation of the kernel were exact on
// the same inputs; the cause was not pinned down, so do not raise this without rerunning
// tests/device (cuda_kernel_tests --filter sampler).
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kDrawBlock = 1024;               // engine/sampler.cpp's kDrawBlock
constexpr int kBins = 4096;                    // the widest radix digit (12 bits)
constexpr int kMaxVocab = kBins * kDrawBlock;  // block masses reuse the mass histogram
constexpr int kSortMax = kSampleSortMax;

// Per-(row, id) flags of the penalty step, kept in the row's weight scratch before the weights.
constexpr uint32_t kBanned = 1u << 31, kRepeated = 1u << 30, kClaimed = 1u << 29;
constexpr uint32_t kCountMask = kClaimed - 1;  // occurrences in the output

struct Candidates {
  float cand_x[kSortMax], cand_w[kSortMax];  // gathered candidates, any order
  int cand_id[kSortMax];
  float sort_x[kSortMax], sort_w[kSortMax];  // the same, best first
  int sort_id[kSortMax];
};

struct Smem {
  int hist[kBins];     // radix histogram: counts
  double mass[kBins];  // radix mass, or per-block draw masses
  union {
    Candidates c;
    // The fast path's mass histogram of the top digit in fixed point (sampler_fast.cuh), dead
    // before the candidates are gathered.
    unsigned long long fixed_mass[kBins];
  };
  // Everything here is plain data with one layout in host and device compilation (sizeof(Smem) is
  // taken on the host for the launch).
  double scan_d[kWarps];
  int scan_i[kWarps];
  unsigned long long scan_u[kWarps];
  double red_d[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  int sel, last, count, found, ival;
  double dval;
  unsigned long long uval;
};

// The kept set of a truncation: a prefix of the (x desc, id asc) order ending at (x, id).
struct Cut {
  bool active = false;
  float x = 0.0f;
  int id = 0;
};

__device__ __forceinline__ bool within(const Cut& c, float x, int i) {
  return !c.active || x > c.x || (x == c.x && i <= c.id);
}

__device__ __forceinline__ bool better(float xa, int a, float xb, int b) {
  return xa > xb || (xa == xb && a < b);
}

__device__ __forceinline__ float clean(float x) {
  if (x != x) return -INFINITY;
  return x > FLT_MAX ? FLT_MAX : x;
}

// Order-preserving key, ascending as x descends; -0 and +0 share a key (they compare equal).
__device__ __forceinline__ uint32_t key_of(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t b = __float_as_uint(x);
  return ~((b & 0x80000000u) ? ~b : (b | 0x80000000u));
}

__device__ __forceinline__ float value_of(uint32_t key) {
  const uint32_t u = ~key;
  return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}

// Which ids a selection runs over.
struct Pred {
  int kind = 0;  // 0: every id; 1: w > 0; 2: w > 0 and within `cut`
  Cut cut;
  __device__ bool operator()(const float* w, int i, float xi) const {
    if (kind == 0) return true;
    if (!(w[i] > 0.0f)) return false;
    return kind == 1 || within(cut, xi, i);
  }
};

// Row r's structured-output mask in the batch's id lists (null: unconstrained).
__device__ __forceinline__ const uint32_t* row_mask(const SampleParams& p, const SampleRow& r) {
  return p.ids && r.num_mask_words > 0 ? reinterpret_cast<const uint32_t*>(p.ids + r.mask_begin)
                                       : nullptr;
}

// Whether the structured-output mask (num_words words; null: no mask) allows token id t.
__device__ __forceinline__ bool mask_allows(const uint32_t* mask, int num_words, int t) {
  return !mask || ((t >> 5) < num_words && ((mask[t >> 5] >> (t & 31)) & 1u));
}

// 16-byte vectors per thread and iteration where the row allows them (the first two passes read
// the whole row; one block per row keeps only a few loads in flight per thread otherwise).
__device__ __forceinline__ bool vector_row(const void* a, const void* b, int vocab) {
  return vocab % 8 == 0 &&
         ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & 15) == 0;
}

// ---- block-wide reductions (every thread gets the result) --------------------------------------

// S: Smem, or any shared struct with its red_d / red_f / red_i arrays (sampler_greedy.cuh).

// V: double (the masses, in s.red_d) or int (counts, in s.red_i); warps summed in order.
template <typename V, typename S>
__device__ V block_sum(V v, S& s) {
  static_assert(std::is_same_v<V, double> || std::is_same_v<V, int>, "double or int sums");
  V* red;
  if constexpr (std::is_same_v<V, double>) {
    red = s.red_d;
  } else {
    red = s.red_i;
  }
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  V t = 0;
  for (int w = 0; w < kWarps; ++w) t += red[w];
  return t;
}

__device__ int block_min(int v, Smem& s) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.red_i[threadIdx.x >> 5] = v;
  __syncthreads();
  int t = INT_MAX;
  for (int w = 0; w < kWarps; ++w) t = min(t, s.red_i[w]);
  return t;
}

// (max value, lowest id among the maxima).
template <typename S>
__device__ void block_argmax(float& v, int& id, S& s) {
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int id2 = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(v2, id2, v, id)) v = v2, id = id2;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    s.red_f[threadIdx.x >> 5] = v;
    s.red_i[threadIdx.x >> 5] = id;
  }
  __syncthreads();
  v = s.red_f[0];
  id = s.red_i[0];
  for (int w = 1; w < kWarps; ++w)
    if (better(s.red_f[w], s.red_i[w], v, id)) v = s.red_f[w], id = s.red_i[w];
}

// Block-wide exclusive prefix sum in thread order, and the total (every thread gets it).
template <typename V>
__device__ void block_scan(V v, V& excl, V& total, V* warp_totals) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  V inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const V n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  const V up = __shfl_up_sync(0xffffffffu, inc, 1);
  __syncthreads();  // warp_totals may still be read by a previous call
  if (lane == 31) warp_totals[warp] = inc;
  __syncthreads();
  V before = 0, sum = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += warp_totals[w];
    sum += warp_totals[w];
  }
  excl = before + (lane > 0 ? up : V(0));
  total = sum;
}
__device__ __forceinline__ void scan(Smem& s, int v, int& excl, int& total) {
  block_scan(v, excl, total, s.scan_i);
}
__device__ __forceinline__ void scan(Smem& s, double v, double& excl, double& total) {
  block_scan(v, excl, total, s.scan_d);
}
__device__ __forceinline__ void scan(Smem& s, unsigned long long v, unsigned long long& excl,
                                     unsigned long long& total) {
  block_scan(v, excl, total, s.scan_u);
}

}  // namespace
}  // namespace pagellm::cuda
