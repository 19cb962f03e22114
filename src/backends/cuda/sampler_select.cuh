// The GPU sampler's radix selection, included only through sampler.cu: histograms of the keys'
// digits over a row, the bin where a running count or mass reaches a target, ties at a cut resolved
// by id, and the gathering of a row's best ids, sorted, into the candidate arrays.
#pragma once

#include "backends/cuda/sampler_block.cuh"

namespace pagellm::cuda {
namespace {

// ---- radix selection ---------------------------------------------------------------------------

struct Digit {
  int shift, bits;
};
constexpr int kNumDigits = 3;
__device__ __forceinline__ Digit digit(int pass) {  // 12 + 12 + 8 bits, most significant first
  return pass == 0 ? Digit{20, 12} : pass == 1 ? Digit{8, 12} : Digit{0, 8};
}

// Counts (and with_mass, sums w of) the selected ids whose key matches `prefix` on `mask`, by the
// digit at `d`.
__device__ void histogram(Smem& s, const float* x, const float* w, int vocab, const Pred& pred,
                          uint32_t prefix, uint32_t mask, Digit d, bool with_mass) {
  const int nb = 1 << d.bits;
  __syncthreads();  // the previous pass's histogram may still be read
  for (int j = threadIdx.x; j < nb; j += kThreads) {
    s.hist[j] = 0;
    s.mass[j] = 0.0;
  }
  __syncthreads();
  // Whole warps walk the row together (the match below needs every lane of the warp).
  const int lane = threadIdx.x & 31;
  for (int base = int(threadIdx.x) - lane; base < vocab; base += kThreads) {
    const int i = base + lane;
    int bin = -1;
    if (i < vocab) {
      const float xi = x[i];
      const uint32_t key = key_of(xi);
      if (pred(w, i, xi) && (key & mask) == prefix) bin = int((key >> d.shift) & uint32_t(nb - 1));
    }
    if (with_mass) {
      if (bin >= 0) {
        atomicAdd(&s.hist[bin], 1);
        atomicAdd(&s.mass[bin], double(w[i]));
      }
    } else {
      // Peaked rows put most ids into a few bins: one shared atomic per distinct bin per warp.
      const unsigned peers = __match_any_sync(0xffffffffu, bin);
      if (bin >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s.hist[bin], __popc(peers));
    }
  }
  __syncthreads();
}

// The first nonempty bin (in key order) whose inclusive running value reaches `target`, or the last
// nonempty bin when rounding leaves the target unreached; `before` = the running value before it.
template <typename V>
__device__ int find_bin(Smem& s, const V* val, int nb, V target, V& before) {
  const int per = (nb + kThreads - 1) / kThreads;
  const int lo = min(nb, int(threadIdx.x) * per), hi = min(nb, lo + per);
  V local = 0;
  for (int j = lo; j < hi; ++j) local += val[j];
  if (threadIdx.x == 0) {
    s.sel = INT_MAX;
    s.last = -1;
  }
  __syncthreads();
  V excl, total;
  scan(s, local, excl, total);
  V run = excl;
  for (int j = lo; j < hi; ++j) {
    const V after = run + val[j];
    if (s.hist[j] > 0) {
      atomicMax(&s.last, j);
      if (after >= target) {
        atomicMin(&s.sel, j);
        break;
      }
    }
    run = after;
  }
  __syncthreads();
  int bin = s.sel != INT_MAX ? s.sel : max(s.last, 0);
  if (bin >= lo && bin < hi) {
    run = excl;
    for (int j = lo; j < bin; ++j) run += val[j];
    if constexpr (std::is_same_v<V, double>)
      s.dval = run;
    else if constexpr (std::is_same_v<V, int>)
      s.ival = run;
    else
      s.uval = run;
  }
  __syncthreads();
  if constexpr (std::is_same_v<V, double>)
    before = s.dval;
  else if constexpr (std::is_same_v<V, int>)
    before = s.ival;
  else
    before = s.uval;
  __syncthreads();
  return bin;
}

// The need-th (1-based) lowest id among the `num_ties` selected ids with key `key`. The first or
// last of them (the common case: a unique value at the cut) takes one pass with an atomic; other
// ranks an ordered block scan.
__device__ int nth_tie(Smem& s, const float* x, const float* w, int vocab, const Pred& pred,
                       uint32_t key, int need, int num_ties) {
  if (need == 1 || need == num_ties) {
    const bool first = need == 1;
    if (threadIdx.x == 0) s.found = first ? INT_MAX : -1;
    __syncthreads();
    int mine = first ? INT_MAX : -1;
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float xi = x[i];
      if (pred(w, i, xi) && key_of(xi) == key) {
        mine = i;
        if (first) break;
      }
    }
    if (first && mine != INT_MAX) atomicMin(&s.found, mine);
    if (!first && mine >= 0) atomicMax(&s.found, mine);
    __syncthreads();
    const int id = s.found;
    __syncthreads();
    return id < 0 || id == INT_MAX ? 0 : id;
  }
  if (threadIdx.x == 0) s.found = -1;
  for (int base = 0; base < vocab; base += kThreads) {
    const int i = base + int(threadIdx.x);
    int f = 0;
    if (i < vocab) {
      const float xi = x[i];
      f = pred(w, i, xi) && key_of(xi) == key;
    }
    int pos, total;
    __syncthreads();
    scan(s, f, pos, total);
    if (f && pos == need - 1) s.found = i;
    if (need <= total) break;
    need -= total;
  }
  __syncthreads();
  const int id = s.found;
  __syncthreads();
  return id < 0 ? 0 : id;
}

// Calls f(i, x[i]) for this thread's ids i = threadIdx.x, threadIdx.x + kThreads, ... in order,
// issuing kAhead loads before using any: at batch 1 a pass over the row is one block's.
template <typename F>
__device__ __forceinline__ void for_each_own_value(const float* x, int vocab, const F& f) {
  constexpr int kAhead = 8;
  for (int base = threadIdx.x; base < vocab; base += kThreads * kAhead) {
    float xs[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
      xs[u] = base + u * kThreads < vocab ? x[base + u * kThreads] : 0.0f;
#pragma unroll
    for (int u = 0; u < kAhead; ++u)
      if (base + u * kThreads < vocab) f(base + u * kThreads, xs[u]);
  }
}

// Gathers the ids i for which keep(i, x[i], wi) holds (setting their weight wi) and sorts the
// first kSortMax of them best first into sort_*; returns how many held (sorted: at most kSortMax).
template <typename Keep>
__device__ int gather_sorted_by(Smem& s, const float* x, int vocab, const Keep& keep) {
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  for_each_own_value(x, vocab, [&](int i, float xi) {
    float wi = 0.0f;
    if (!keep(i, xi, wi)) return;
    const int slot = atomicAdd(&s.count, 1);
    if (slot < kSortMax) {
      s.c.cand_x[slot] = xi;
      s.c.cand_id[slot] = i;
      s.c.cand_w[slot] = wi;
    }
  });
  __syncthreads();
  const int count = s.count;
  const int n = min(count, kSortMax);
  for (int e = threadIdx.x; e < n; e += kThreads) {
    const float xe = s.c.cand_x[e];
    const int ie = s.c.cand_id[e];
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += better(s.c.cand_x[j], s.c.cand_id[j], xe, ie);
    s.c.sort_x[rank] = xe;
    s.c.sort_id[rank] = ie;
    s.c.sort_w[rank] = s.c.cand_w[e];
  }
  __syncthreads();
  return count;
}

// Gathers the selected ids within `bound` (at most kSortMax) and sorts them best first into
// sort_*; returns how many.
__device__ int gather_sorted(Smem& s, const float* x, const float* w, int vocab, const Pred& pred,
                             const Cut& bound) {
  const int count = gather_sorted_by(s, x, vocab, [&](int i, float xi, float& wi) {
    if (!pred(w, i, xi) || !within(bound, xi, i)) return false;
    wi = pred.kind == 0 ? 0.0f : w[i];
    return true;
  });
  return min(count, kSortMax);
}

// Every key whose top digit is at most `bin`, as a cut on x (x >= its least value; keys past
// -inf's are NaN patterns, never keys of a row value).
__device__ __forceinline__ Cut top_digit_bound(int bin) {
  const uint64_t last = ((uint64_t(bin) + 1) << digit(0).shift) - 1;
  return Cut{true, value_of(uint32_t(min(last, uint64_t(key_of(-INFINITY))))), INT_MAX};
}

// The k-th best selected id (1 <= k <= number selected) as a cut. When the ids up to the first
// digit's bin are few (the usual case for small k), they are gathered and sorted instead of
// running the remaining passes; *sorted then says that sort_* holds them best first (>= k ids).
__device__ Cut select_kth(Smem& s, const float* x, const float* w, int vocab, const Pred& pred,
                          int k, bool* sorted) {
  *sorted = false;
  uint32_t prefix = 0, mask = 0;
  int need = k, num_ties = 0;
  for (int pass = 0; pass < kNumDigits; ++pass) {
    const Digit d = digit(pass);
    histogram(s, x, w, vocab, pred, prefix, mask, d, false);
    int before = 0;
    const int bin = find_bin(s, s.hist, 1 << d.bits, need, before);
    num_ties = s.hist[bin];  // the last pass's bin: every selected id with exactly this key
    if (pass == 0 && before + num_ties <= kSortMax) {
      gather_sorted(s, x, w, vocab, pred, top_digit_bound(bin));
      *sorted = true;
      return Cut{true, s.c.sort_x[k - 1], s.c.sort_id[k - 1]};
    }
    need -= before;
    prefix |= uint32_t(bin) << d.shift;
    mask |= uint32_t((1 << d.bits) - 1) << d.shift;
  }
  const int id = nth_tie(s, x, w, vocab, pred, prefix, need, num_ties);
  return Cut{true, x[id], id};
}

// The key at which the running mass (best first) of the selected ids reaches `target`; `before`:
// the mass of the selected ids with smaller keys (histogram order).
__device__ uint32_t select_mass(Smem& s, const float* x, const float* w, int vocab,
                                const Pred& pred, double target, double& before) {
  uint32_t prefix = 0, mask = 0;
  before = 0.0;
  for (int pass = 0; pass < kNumDigits; ++pass) {
    const Digit d = digit(pass);
    histogram(s, x, w, vocab, pred, prefix, mask, d, true);
    double b = 0.0;
    const int bin = find_bin(s, s.mass, 1 << d.bits, target, b);
    target -= b;
    before += b;
    prefix |= uint32_t(bin) << d.shift;
    mask |= uint32_t((1 << d.bits) - 1) << d.shift;
  }
  return prefix;
}

__device__ int count_within(Smem& s, const float* x, const float* w, int vocab, const Pred& pred,
                            const Cut& bound) {
  int c = 0;
#pragma unroll 4
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float xi = x[i];
    c += pred(w, i, xi) && within(bound, xi, i);
  }
  return block_sum(c, s);
}

}  // namespace
}  // namespace pagellm::cuda
