// The GPU sampler's draw and its fast path for sampled rows, included only by sampler.cu.
//
// The fast path keeps no [vocab] weight array. One pass over the penalized row (scan_row) counts
// what the truncations need: the keys' top digit per bin, the positive weights and those >= min_p,
// and, where the draw or top-p needs them, the block masses in the CPU's order and a fixed-point
// mass histogram of the top digit. The kept set is then a prefix of the (x desc, id asc) order
// whose bound is one histogram bin: its ids (at most kSortMax of them) are gathered with their
// exact weights and sorted, top-k / top-p / min-p cut that list exactly as the CPU does, and the
// draw sums the kept weights per 1024-id block in the CPU's lane order (a zero weight adds nothing
// to a double sum, so the dropped ids need not be visited). Rows without truncation or min-p draw
// from the block masses and recompute the chosen block's weights. A row whose kept set has no
// such bound (near-flat rows: more than kSortMax ids up to the bin) takes the full path in
// sampler.cu, which computes the same function.
#pragma once

#include "backends/cuda/sampler_select.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kNeedFullPath = -2;           // sample_row_fast: the row takes sample_row
constexpr double kFixedScale = 0x1.0p40;    // fixed-point masses: w <= 1, vocab <= 2^22
// Smaller weights stay out of the fixed-point histogram: leaving mass out only moves the top-p
// bound later (safe), by at most vocab * 2^-32 <= 2^-10 of a total >= 1, and most of a row's ids
// then cost no 64-bit atomic.
constexpr float kMinFixedWeight = 0x1.0p-32f;

__device__ __forceinline__ float scaled_logit(float x, float max_x, float temperature) {
  return __fdiv_rn(__fsub_rn(x, max_x), temperature);
}

// The CPU's weight of a logit: (float)exp((double)((x - max) / T)).
__device__ __forceinline__ float weight_of(float x, float max_x, float temperature) {
  return float(exp(double(scaled_logit(x, max_x, temperature))));
}

// weight > 0, from z = scaled_logit alone away from float's underflow (exp(z) rounds to 0 below
// about -103.97).
__device__ __forceinline__ bool weight_positive(float z) {
  if (z > -103.0f) return true;
  if (z < -105.0f) return false;
  return float(exp(double(z))) > 0.0f;
}

// weight >= min_w, with lz = logf(min_w): a margin of 1e-4 relative in the weight is far above
// logf's and the rounding's error, and only z inside it computes the weight.
__device__ __forceinline__ bool weight_at_least(float z, float min_w, float lz) {
  const float margin = 1e-4f * fmaxf(1.0f, fabsf(lz));
  if (z > lz + margin) return true;
  if (z < lz - margin) return false;
  return float(exp(double(z))) >= min_w;
}

// The CPU's two-level inverse-CDF draw over the kept weights: s.mass holds the block masses in
// the CPU's order, weight(i) gives id i's kept weight (0 when dropped).
template <typename Weight>
__device__ int draw(Smem& s, int vocab, double total, double u, const Weight& weight) {
  const int num_blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
  if (threadIdx.x == 0) {
    const double target = u * total;
    double cum = 0.0;
    int block = num_blocks;
    bool reached = false;
    for (int b = 0; b < num_blocks && !reached; ++b) {
      if (s.mass[b] > 0.0) block = b;
      reached = cum + s.mass[b] > target;
      if (!reached) cum += s.mass[b];
    }
    s.ival = block == num_blocks ? -1 : block;
    s.dval = reached ? target - cum : INFINITY;
  }
  __syncthreads();
  const int block = s.ival;
  const double rest = s.dval;
  __syncthreads();
  if (block < 0) return -1;
  const int begin = block * kDrawBlock, end = min(vocab, begin + kDrawBlock);
  for (int i = begin + int(threadIdx.x); i < end; i += kThreads) s.c.cand_w[i - begin] = weight(i);
  __syncthreads();
  if (threadIdx.x == 0) {
    double run = 0.0;
    int last = -1;
    for (int i = begin; i < end; ++i) {
      const float wi = s.c.cand_w[i - begin];
      if (!(wi > 0.0f)) continue;
      run += wi;
      last = i;
      if (run > rest) break;
    }
    s.ival = last;
  }
  __syncthreads();
  const int token = s.ival;
  __syncthreads();
  return token;
}

struct RowScan {
  int num_positive = 0;  // weights > 0
  int num_min = 0;       // weights >= min_w (min_w > 0)
  double total = 0.0;    // with masses: the block masses summed in block order
};

// One id into the top digit's bin (-1: none). A plain shared atomic per id: __match_any_sync
// aggregation made the fast path's counting pass ~1.5x slower (top-k 50 at batch 256: 386 against
// 260 us per step on an H100), realistic rows spreading a warp's ids over many bins.
__device__ __forceinline__ void count_bin(Smem& s, int bin) {
  if (bin >= 0) atomicAdd(&s.hist[bin], 1);
}

__device__ __forceinline__ int top_bin(float x) { return int(key_of(x) >> 20); }  // digit(0)

// One pass over the row. hist: the top digit's counts into s.hist; masses: every 1024-id block's
// mass in the CPU's order (8 lanes, lane j summing ids j, j + 8, ... in order, combined as a tree)
// into s.mass, and with fixed_hist the top digit's masses (the weights >= kMinFixedWeight, each
// floored to a multiple of 2^-40) into s.fixed_mass. Without masses no weight is computed except
// near the thresholds. Loads are issued kAhead at a time: at batch 1 the pass is one block.
__device__ RowScan scan_row(Smem& s, const float* x, int vocab, float max_x, float temperature,
                            float min_w, bool hist, bool masses, bool fixed_hist) {
  constexpr int kAhead = 8;
  if (hist)
    for (int j = threadIdx.x; j < kBins; j += kThreads) {
      s.hist[j] = 0;
      if (fixed_hist) s.fixed_mass[j] = 0;
    }
  __syncthreads();
  const float lz = min_w > 0.0f ? logf(min_w) : 0.0f;
  const int num_blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
  int positive = 0, at_least = 0;
  if (!masses) {
    for_each_own_value(x, vocab, [&](int, float xi) {
      const float z = scaled_logit(xi, max_x, temperature);
      positive += weight_positive(z);
      at_least += min_w > 0.0f && weight_at_least(z, min_w, lz);
      if (hist) count_bin(s, top_bin(xi));
    });
  } else {
    const int lane = threadIdx.x & 31, group = lane >> 3, j = lane & 7;
    for (int b0 = int(threadIdx.x >> 5) * 4; b0 < num_blocks; b0 += kWarps * 4) {  // warp-uniform
      const int b = b0 + group;
      const int begin = b * kDrawBlock;
      const int end = b < num_blocks ? min(vocab, begin + kDrawBlock) : begin;
      double acc = 0.0;
      for (int i0 = begin + j; i0 < end; i0 += 8 * kAhead) {
        float xs[kAhead];
#pragma unroll
        for (int u = 0; u < kAhead; ++u) xs[u] = i0 + 8 * u < end ? x[i0 + 8 * u] : 0.0f;
#pragma unroll
        for (int u = 0; u < kAhead; ++u) {  // in id order: the lane's sum is sequential
          const bool in_row = i0 + 8 * u < end;
          const float wi = in_row ? weight_of(xs[u], max_x, temperature) : 0.0f;
          acc += wi;
          positive += wi > 0.0f;
          at_least += min_w > 0.0f && wi >= min_w;
          if (hist) {
            const int bin = in_row ? top_bin(xs[u]) : -1;
            count_bin(s, bin);
            if (fixed_hist && wi >= kMinFixedWeight)
              atomicAdd(&s.fixed_mass[bin], static_cast<unsigned long long>(double(wi) * kFixedScale));
          }
        }
      }
      acc += __shfl_xor_sync(0xffffffffu, acc, 1);
      acc += __shfl_xor_sync(0xffffffffu, acc, 2);
      acc += __shfl_xor_sync(0xffffffffu, acc, 4);
      if (j == 0 && b < num_blocks) s.mass[b] = acc;
    }
  }
  RowScan out;
  out.num_positive = block_sum(positive, s);
  out.num_min = block_sum(at_least, s);
  if (masses) {
    if (threadIdx.x == 0) {
      double total = 0.0;
      for (int b = 0; b < num_blocks; ++b) total += s.mass[b];
      s.dval = total;
    }
    __syncthreads();
    out.total = s.dval;
    __syncthreads();
  }
  return out;
}

// The kept prefix of the n sorted candidates (thread 0's answer for every thread): top-k, then
// top-p over the top-k set (its mass summed in order) or, without top-k, against the block total.
// kNeedFullPath when the cut lies past the candidates.
__device__ int kept_length(Smem& s, const SampleRow& r, int n, bool k_cut, bool all_positive,
                           double block_total) {
  if (threadIdx.x == 0) {
    int len = k_cut ? r.top_k : n;
    if (r.top_p < 1.0f) {
      double total = block_total;
      if (r.top_k > 0) {
        total = 0.0;
        for (int j = 0; j < len; ++j) total += s.c.sort_w[j];
      }
      const double target = double(r.top_p) * total;
      double cum = 0.0;
      int j = 0;
      for (; j < len; ++j) {
        cum += s.c.sort_w[j];
        if (cum >= target) break;
      }
      // Unreached (rounding): the CPU keeps its whole candidate list, which is this one only
      // when it holds the top-k set or every positive weight.
      len = j < len ? j + 1 : r.top_k > 0 || all_positive ? len : kNeedFullPath;
    }
    s.ival = len;
  }
  __syncthreads();
  const int len = s.ival;
  __syncthreads();
  return len;
}

// The draw over the first len sorted candidates with weight >= min_w: they are ordered by id into
// cand_*, their block masses formed in the CPU's lane order, then the CPU's two-level draw.
__device__ int draw_kept(Smem& s, int len, float min_w, double u) {
  for (int e = threadIdx.x; e < len; e += kThreads) {
    const float we = s.c.sort_w[e];
    if (!(we >= min_w)) continue;
    const int ie = s.c.sort_id[e];
    int rank = 0;
    for (int j = 0; j < len; ++j) rank += s.c.sort_w[j] >= min_w && s.c.sort_id[j] < ie;
    s.c.cand_id[rank] = ie;
    s.c.cand_w[rank] = we;
  }
  int kept = 0;
  for (int e = threadIdx.x; e < len; e += kThreads) kept += s.c.sort_w[e] >= min_w;
  kept = block_sum(kept, s);  // its barrier orders the writes above before thread 0's reads
  if (threadIdx.x == 0) {
    // s.mass[k], s.hist[k]: the k-th nonempty block's mass and its first kept entry.
    int num = 0;
    double total = 0.0;
    for (int e = 0; e < kept;) {
      const int block = s.c.cand_id[e] / kDrawBlock;
      double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      s.hist[num] = e;
      for (; e < kept && s.c.cand_id[e] / kDrawBlock == block; ++e)
        acc[s.c.cand_id[e] & 7] += s.c.cand_w[e];
      s.mass[num] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      total += s.mass[num++];
    }
    s.hist[num] = kept;
    int token = -1;
    if (num > 0) {
      const double target = u * total;
      double cum = 0.0;
      int k = 0;
      bool reached = false;
      for (; k < num; ++k) {
        reached = cum + s.mass[k] > target;
        if (reached) break;
        cum += s.mass[k];
      }
      if (!reached) k = num - 1;
      const double rest = reached ? target - cum : INFINITY;
      double run = 0.0;
      for (int e = s.hist[k]; e < s.hist[k + 1]; ++e) {
        run += s.c.cand_w[e];
        token = s.c.cand_id[e];
        if (run > rest) break;
      }
    }
    s.ival = token;
  }
  __syncthreads();
  const int token = s.ival;
  __syncthreads();
  return token;
}

// Steps 5 and 6 of a row whose penalized max `max_x` is finite, without the weight array: the
// token, -1 when no weight is kept, or kNeedFullPath.
__device__ int sample_row_fast(Smem& s, const SampleRow& r, const float* x, int vocab,
                               float max_x) {
  const float t = r.temperature;
  const bool truncate = (r.top_k > 0 && r.top_k < vocab) || r.top_p < 1.0f;
  const bool dense = !truncate && !(r.min_p > 0.0f);
  const bool mass_bound = truncate && r.top_p < 1.0f && r.top_k <= 0;
  const RowScan scan =
      scan_row(s, x, vocab, max_x, t, r.min_p, !dense, dense || mass_bound, mass_bound);
  if (dense)
    return draw(s, vocab, scan.total, r.u, [&](int i) { return weight_of(x[i], max_x, t); });
  const bool k_cut = truncate && r.top_k > 0 && r.top_k <= scan.num_positive;
  // The bound: the first top-digit bin whose running count reaches the candidates needed, or
  // (top-p alone) whose running fixed-point mass reaches the top-p target with a margin (floored
  // weights only make the bound later).
  int bin, count;
  if (mass_bound) {
    const double target = double(r.top_p) * scan.total * (1.0 + 1e-9) * kFixedScale;
    unsigned long long before = 0;
    bin = find_bin<unsigned long long>(s, s.fixed_mass, kBins,
                                       static_cast<unsigned long long>(ceil(target)), before);
    int c = 0;
    for (int j = threadIdx.x; j <= bin; j += kThreads) c += s.hist[j];
    count = block_sum(c, s);
  } else {
    const int need = k_cut ? r.top_k : truncate ? scan.num_positive : scan.num_min;
    if (need <= 0) return kNeedFullPath;
    int before = 0;
    bin = find_bin<int>(s, s.hist, kBins, need, before);
    count = before + s.hist[bin];
  }
  if (count > kSortMax) return kNeedFullPath;
  const Cut bound = top_digit_bound(bin);
  const int n = gather_sorted_by(s, x, vocab, [&](int i, float xi, float& wi) {
    if (!within(bound, xi, i)) return false;
    wi = weight_of(xi, max_x, t);
    return wi > 0.0f;
  });
  if (n > kSortMax) return kNeedFullPath;
  const int len = kept_length(s, r, n, k_cut, n == scan.num_positive, scan.total);
  if (len == kNeedFullPath) return kNeedFullPath;
  return draw_kept(s, len, r.min_p, r.u);
}

}  // namespace
}  // namespace pagellm::cuda
