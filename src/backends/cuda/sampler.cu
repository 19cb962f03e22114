// The CPU sampler's pipeline (engine/sampler.cpp) on the GPU: one CTA of 512 threads per row
// (plain greedy rows of large vocabularies are first reduced in chunks: sampler_greedy.cuh).
//
// Exactness: the penalized row uses the CPU's float operations per element (no FMA contraction:
// explicit _rn intrinsics), weights are (float)exp((double)((x - max) / T)) on both sides, and the
// final block masses, their total and the draw are summed in exactly the CPU's order (8 interleaved
// lanes per 1024-id block combined as a tree, blocks in order, the chosen block token by token).
// Truncation cuts are found without sorting the row: radix selection over order-preserving keys of
// x (digits of 12, 12 and 8 bits, histograms in shared memory; top-p histograms also carry the
// mass in double), then ties at the cut value resolved by id with an ordered block scan. Top-p's
// prefix is then gathered and summed in the CPU's (x desc, id asc) order whenever it has at most
// kSampleSortMax tokens, so the cut is the CPU's; only larger prefixes (near-flat rows) use the
// histogram sums, whose rounding can move the cut where the target is within ~1e-15 relative of a
// prefix sum.
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/common.cuh"
#include "backends/cuda/sampler_fast.cuh"
#include "backends/cuda/sampler_greedy.cuh"

namespace pagellm::cuda {
namespace {

// Top-p over the n sorted candidates as the CPU computes it: the first prefix whose running sum
// (in order, double) reaches `target`; with target < 0, target = top_p * (their sum in order).
__device__ Cut prefix_cut(Smem& s, int n, double target, float top_p) {
  if (threadIdx.x == 0) {
    if (target < 0.0) {
      double total = 0.0;
      for (int j = 0; j < n; ++j) total += s.c.sort_w[j];
      target = double(top_p) * total;
    }
    double cum = 0.0;
    int j = 0;
    for (; j < n; ++j) {
      cum += s.c.sort_w[j];
      if (cum >= target) break;
    }
    s.ival = min(j, n - 1);
  }
  __syncthreads();
  const int j = s.ival;
  const Cut c{true, s.c.sort_x[j], s.c.sort_id[j]};
  __syncthreads();
  return c;
}

// Per 1024-id block: the mass of the kept weights in sum_lanes order (8 interleaved partial sums,
// combined as a tree), into s.mass; returns their total summed block by block. With `apply`, the
// weights outside `cut` or below `min_w` are zeroed first (the CPU's apply_cut).
__device__ double block_masses(Smem& s, const float* x, float* w, int vocab, const Cut& cut,
                               float min_w, bool apply) {
  const int num_blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
  const int lane = threadIdx.x & 31, group = lane >> 3, j = lane & 7;
  for (int b0 = int(threadIdx.x >> 5) * 4; b0 < num_blocks; b0 += kWarps * 4) {
    const int b = b0 + group;
    double acc = 0.0;
    if (b < num_blocks) {
      const int end = min(vocab, (b + 1) * kDrawBlock);
      for (int i = b * kDrawBlock + j; i < end; i += 8) {
        float wi = w[i];
        if (apply && (!within(cut, x[i], i) || wi < min_w)) {
          wi = 0.0f;
          w[i] = 0.0f;
        }
        acc += wi;
      }
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (j == 0 && b < num_blocks) s.mass[b] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int b = 0; b < num_blocks; ++b) total += s.mass[b];
    s.dval = total;
  }
  __syncthreads();
  const double total = s.dval;
  __syncthreads();
  return total;
}

// Top-p over the top-k set (or every id with w > 0): the CPU's cut whenever the prefix to sum has
// at most kSortMax ids.
__device__ Cut top_p_cut(Smem& s, const SampleRow& r, const float* x, float* w, int vocab,
                         const Cut& cut_k, int num_positive, bool top_k_sorted) {
  const Pred set{cut_k.active ? 2 : 1, cut_k};
  const Cut none{};
  double total;
  if (r.top_k > 0) {  // the CPU sums the top-k set's mass in order
    if (cut_k.active && top_k_sorted) return prefix_cut(s, r.top_k, -1.0, r.top_p);
    const int num_set = cut_k.active ? r.top_k : num_positive;
    if (num_set <= kSortMax)
      return prefix_cut(s, gather_sorted(s, x, w, vocab, set, none), -1.0, r.top_p);
    double part = 0.0;
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (set(w, i, x[i])) part += w[i];
    total = block_sum(part, s);
  } else {
    total = block_masses(s, x, w, vocab, none, 0.0f, false);
  }
  const double target = double(r.top_p) * total;
  double before = 0.0;
  // A slightly larger target bounds the prefix safely despite the histograms' summation order.
  // Usually the ids up to the first digit's bin that reaches it are few enough to sort.
  {
    histogram(s, x, w, vocab, set, 0, 0, digit(0), true);
    const int bin = find_bin(s, s.mass, 1 << digit(0).bits, target * (1.0 + 1e-9), before);
    int count = 0;
    for (int j = threadIdx.x; j < bin; j += kThreads) count += s.hist[j];
    count = block_sum(count, s) + s.hist[bin];
    if (count <= kSortMax)
      return prefix_cut(s, gather_sorted(s, x, w, vocab, set, top_digit_bound(bin)), target,
                        r.top_p);
  }
  const uint32_t bound_key = select_mass(s, x, w, vocab, set, target * (1.0 + 1e-9), before);
  const Cut bound{true, value_of(bound_key), INT_MAX};
  if (count_within(s, x, w, vocab, set, bound) <= kSortMax)
    return prefix_cut(s, gather_sorted(s, x, w, vocab, set, bound), target, r.top_p);
  // Too long a prefix to sort (a near-flat row): the cut from the histogram sums.
  const uint32_t key = select_mass(s, x, w, vocab, set, target, before);
  int ties = 0;
#pragma unroll 4
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    ties += set(w, i, x[i]) && key_of(x[i]) == key;
  ties = block_sum(ties, s);
  const int first = nth_tie(s, x, w, vocab, set, key, 1, ties);
  const double need = ceil((target - before) / double(w[first]));
  const int nth = int(fmin(fmax(need, 1.0), double(ties)));
  const int id = nth_tie(s, x, w, vocab, set, key, nth, ties);
  return Cut{true, x[id], id};
}

// Steps 5 and 6 for a row whose penalized max `max_x` is finite.
__device__ int sample_row(Smem& s, const SampleRow& r, const float* x, float* w, int vocab,
                          float max_x) {
  int num_positive = 0;
#pragma unroll 4
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float z = __fdiv_rn(__fsub_rn(x[i], max_x), r.temperature);
    const float wi = float(exp(double(z)));
    w[i] = wi;
    num_positive += wi > 0.0f;
  }
  num_positive = block_sum(num_positive, s);
  Cut cut;
  if ((r.top_k > 0 && r.top_k < vocab) || r.top_p < 1.0f) {
    bool sorted = false;  // sort_* starts with the top-k set
    if (r.top_k > 0 && r.top_k <= num_positive)
      cut = select_kth(s, x, w, vocab, Pred{1, {}}, r.top_k, &sorted);
    if (r.top_p < 1.0f) cut = top_p_cut(s, r, x, w, vocab, cut, num_positive, sorted);
  }
  const double total = block_masses(s, x, w, vocab, cut, r.min_p, true);
  return draw(s, vocab, total, r.u, [&](int i) { return w[i]; });
}

// Step 3's logit_bias, before the penalties. The CPU bans first, but a banned id is -inf either
// way; the ids are distinct (SamplingParams::validate), so each thread owns its entries.
__device__ void apply_bias(const SampleRow& r, const int32_t* ids, float* x, int vocab) {
  if (r.num_bias == 0) return;
  const int32_t* pairs = ids + r.bias_begin;  // [num_bias, 2] (id, bias bits)
  for (int e = threadIdx.x; e < r.num_bias; e += kThreads) {
    const int id = pairs[2 * e];
    if (id < 0 || id >= vocab) continue;
    const float v = __fadd_rn(x[id], __int_as_float(pairs[2 * e + 1]));
    x[id] = v > FLT_MAX ? FLT_MAX : v;
  }
  __syncthreads();
}

// Step 3: bans, repetition, frequency and presence penalties on the listed ids. Flags and counts
// live in the row's weight scratch (`flags`), zeroed at the listed ids first; the first thread to
// claim an id applies all of its penalties in the CPU's order.
__device__ void apply_penalties(const SampleRow& r, const int32_t* list, float* x, uint32_t* flags,
                                int vocab) {
  const int nb = r.num_banned, np = r.num_prompt, n = r.num_banned + r.num_prompt + r.num_output;
  if (n == 0) return;
  const bool rep = r.repetition_penalty != 1.0f;
  const bool freq = r.frequency_penalty != 0.0f || r.presence_penalty != 0.0f;
  for (int e = threadIdx.x; e < n; e += kThreads)
    if (list[e] >= 0 && list[e] < vocab) flags[list[e]] = 0;
  __syncthreads();
  for (int e = threadIdx.x; e < n; e += kThreads) {
    const int id = list[e];
    if (id < 0 || id >= vocab) continue;
    if (e < nb) {
      atomicOr(&flags[id], kBanned);
      continue;
    }
    if (rep) atomicOr(&flags[id], kRepeated);
    if (freq && e >= nb + np) atomicAdd(&flags[id], 1u);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n; e += kThreads) {
    const int id = list[e];
    if (id < 0 || id >= vocab) continue;
    const uint32_t f = atomicOr(&flags[id], kClaimed);
    if (f & kClaimed) continue;
    float v = x[id];
    if (f & kBanned) v = -INFINITY;
    if (f & kRepeated)
      v = v > 0.0f ? __fdiv_rn(v, r.repetition_penalty) : __fmul_rn(v, r.repetition_penalty);
    if (const uint32_t count = f & kCountMask) {
      v = __fsub_rn(v, __fmul_rn(r.frequency_penalty, float(count)));
      v = __fsub_rn(v, r.presence_penalty);
    }
    x[id] = v > FLT_MAX ? FLT_MAX : v;  // a penalty may overflow: +inf would poison the weights
  }
  __syncthreads();
}

// Every logit is -inf: as the CPU sampler, the lowest id the mask allows and nothing bans, else the
// lowest id the mask allows, else 0. Without a mask the answer lies among the first num_banned + 1
// ids, so only those are marked in `marks` (the row's flag scratch, free again once every logit is
// -inf); with one, the whole vocabulary.
__device__ int fallback_token(Smem& s, const int32_t* banned, int num_banned, const uint32_t* mask,
                              int num_mask_words, int vocab, uint32_t* marks) {
  const int limit = mask ? vocab - 1 : min(num_banned, vocab - 1);
  for (int t = threadIdx.x; t <= limit; t += kThreads) marks[t] = 0;
  __syncthreads();
  for (int e = threadIdx.x; e < num_banned; e += kThreads)
    if (banned[e] >= 0 && banned[e] <= limit) marks[banned[e]] = 1;
  __syncthreads();
  int best = INT_MAX, allowed = INT_MAX;
  for (int t = threadIdx.x; t <= limit; t += kThreads)
    if (mask_allows(mask, num_mask_words, t)) {
      allowed = min(allowed, t);
      if (marks[t] == 0) best = min(best, t);
    }
  best = block_min(best, s);
  allowed = block_min(allowed, s);
  return best != INT_MAX ? best : allowed != INT_MAX ? allowed : 0;
}

// x[i] = the clean logit i, or -inf where the mask disallows it; (m, m_id) the thread's best.
template <typename T>
__device__ __forceinline__ void load_clean_row(const T* logits, float* x, int vocab,
                                               const uint32_t* mask, int num_mask_words, float& m,
                                               int& m_id) {
  auto take = [&](float raw, int i, bool allowed) {
    float v = clean(raw);
    if (!allowed) v = -INFINITY;
    if (better(v, i, m, m_id)) m = v, m_id = i;
    return v;
  };
  if (vector_row(logits, x, vocab)) {
    constexpr int kVec = 16 / sizeof(T);  // 4 or 8 ids: always inside one mask word
#pragma unroll 4
    for (int c = threadIdx.x; c < vocab / kVec; c += kThreads) {
      float f[kVec];
      load16(logits + c * kVec, f);
      const int t0 = c * kVec;
      const uint32_t allowed = !mask                        ? ~0u
                               : (t0 >> 5) < num_mask_words ? mask[t0 >> 5] >> (t0 & 31)
                                                            : 0u;
#pragma unroll
      for (int e = 0; e < kVec; ++e) f[e] = take(f[e], t0 + e, (allowed >> e) & 1u);
#pragma unroll
      for (int q = 0; q < kVec / 4; ++q)
        reinterpret_cast<float4*>(x + c * kVec)[q] =
            make_float4(f[4 * q], f[4 * q + 1], f[4 * q + 2], f[4 * q + 3]);
    }
    return;
  }
#pragma unroll 4
  for (int i = threadIdx.x; i < vocab; i += kThreads)
    x[i] = take(to_float(logits[i]), i, mask_allows(mask, num_mask_words, i));
}

// The thread's share of sum(exp(x[i] - m)) in double.
__device__ __forceinline__ double exp_sum(const float* x, int vocab, float m) {
  double sum = 0.0;
  if (vector_row(x, x, vocab)) {
#pragma unroll 4
    for (int c = threadIdx.x; c < vocab / 4; c += kThreads) {
      const float4 v = reinterpret_cast<const float4*>(x)[c];
      sum += double(expf(v.x - m)) + double(expf(v.y - m)) + double(expf(v.z - m)) +
             double(expf(v.w - m));
    }
    return sum;
  }
#pragma unroll 4
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += double(expf(x[i] - m));
  return sum;
}

// A plain greedy row whose chunks greedy_chunk_kernel reduced: the merge, the token (or the
// fallback of a row with every logit -inf) and its logprob.
template <typename T>
__device__ void greedy_from_chunks(Smem& s, const SampleParams& p, const SampleRow& r,
                                   const T* logits, float* w, SampleOutput& out) {
  float m;
  int m_id;
  double lse;
  greedy_merge_chunks(s, w, p.vocab, m, m_id, lse);
  const uint32_t* mask = row_mask(p, r);
  const int token = m > -INFINITY ? m_id
                                  : fallback_token(s, nullptr, 0, mask, r.num_mask_words, p.vocab,
                                                   reinterpret_cast<uint32_t*>(w));
  if (threadIdx.x == 0) {
    out.token = token;
    out.logprob = m > -INFINITY ? float(double(clean(to_float(logits[token]))) - lse) : -INFINITY;
    out.num_top = 0;
  }
}

// greedy_chunked: greedy_chunk_kernel ran first (plain greedy rows merge its chunks).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const __grid_constant__ SampleParams p, bool full_path, bool greedy_chunked) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int vocab = p.vocab;
  const SampleRow r = p.rows[blockIdx.x];
  const T* logits = static_cast<const T*>(p.logits) + int64_t(blockIdx.x) * vocab;  // [vocab]
  float* x = p.work + int64_t(blockIdx.x) * vocab;                                  // [vocab]
  float* w = p.weights + int64_t(blockIdx.x) * vocab;                               // [vocab]
  SampleOutput& out = p.out[blockIdx.x];
  if (greedy_chunked && plain_greedy(r)) return greedy_from_chunks(s, p, r, logits, w, out);

  // Step 0: the structured-output mask (as the CPU sampler: disallowed ids are -inf from the
  // start).
  const uint32_t* mask = row_mask(p, r);
  // Steps 1-2: the clean raw row, its log-sum-exp and the raw top-N.
  float m = -INFINITY;
  int m_id = INT_MAX;
  load_clean_row(logits, x, vocab, mask, r.num_mask_words, m, m_id);
  block_argmax(m, m_id, s);
  double sum = m > -INFINITY ? exp_sum(x, vocab, m) : 0.0;
  sum = block_sum(sum, s);
  const double lse = m > -INFINITY ? double(m) + log(sum) : -INFINITY;
  auto logprob = [&](float raw) { return m > -INFINITY ? float(double(raw) - lse) : -INFINITY; };
  const int num_top = min(max(r.num_top, 0), min(vocab, kMaxTopLogprobs));
  if (num_top > 0) {
    const Pred all{};
    bool sorted = false;
    const Cut cut = select_kth(s, x, w, vocab, all, num_top, &sorted);
    if (!sorted) gather_sorted(s, x, w, vocab, all, cut);  // else sort_* already starts with them
    if (int(threadIdx.x) < num_top) {
      out.top_ids[threadIdx.x] = s.c.sort_id[threadIdx.x];
      out.top_logprobs[threadIdx.x] = logprob(s.c.sort_x[threadIdx.x]);
    }
  }
  if (r.score_token >= 0) {
    if (threadIdx.x == 0) {
      const int t = min(r.score_token, vocab - 1);
      out.token = t;
      out.logprob = logprob(x[t]);
      out.num_top = num_top;
    }
    return;
  }

  // Steps 3-7.
  const int32_t* list = p.ids ? p.ids + r.ids_begin : nullptr;
  float best = m;  // without bans or penalties: the raw row's argmax
  int best_id = m_id;
  if (list && r.num_banned + r.num_prompt + r.num_output + r.num_bias > 0) {
    apply_bias(r, p.ids, x, vocab);
    apply_penalties(r, list, x, reinterpret_cast<uint32_t*>(w), vocab);
    best = -INFINITY;
    best_id = INT_MAX;
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (better(x[i], i, best, best_id)) best = x[i], best_id = i;
    block_argmax(best, best_id, s);
  }
  int token = -1;
  if (best > -INFINITY && r.temperature == 0.0f) {
    token = best_id;
  } else if (best > -INFINITY) {
    token = full_path ? kNeedFullPath : sample_row_fast(s, r, x, vocab, clean(best));
    if (token == kNeedFullPath) token = sample_row(s, r, x, w, vocab, clean(best));
  }
  if (token < 0)
    token = fallback_token(s, list, list ? r.num_banned : 0, mask, r.num_mask_words, vocab,
                           reinterpret_cast<uint32_t*>(w));
  if (threadIdx.x == 0) {
    out.token = token;
    out.logprob = logprob(clean(to_float(logits[token])));
    out.num_top = num_top;
  }
}

// PAGELLM_SAMPLER_FULL_PATH=1 sends every sampled row through the full path (tests of both).
bool full_path_only() {
  static const bool full = [] {
    const char* v = std::getenv("PAGELLM_SAMPLER_FULL_PATH");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return full;
}

// Whether the greedy rows take greedy_chunk_kernel first: rows known on the host, some of them
// plain greedy, a vocabulary large enough for several chunks.
bool greedy_chunks_pay(const SampleParams& p) {
  if (!p.host_rows || p.vocab < kGreedyMinVocab || p.num_rows > kGreedyMaxRows) return false;
  return std::any_of(p.host_rows, p.host_rows + p.num_rows, plain_greedy);
}

}  // namespace

cudaError_t sample(const SampleParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.vocab <= 0 || p.vocab > kMaxVocab) return cudaErrorInvalidValue;
  if (p.num_rows == 0) return cudaSuccess;
  if (!p.logits || !p.rows || !p.work || !p.weights || !p.out) return cudaErrorInvalidValue;
  const bool chunked = greedy_chunks_pay(p);
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    if (chunked) {
      const dim3 grid(unsigned(greedy_chunks(p.vocab)), unsigned(p.num_rows));
      greedy_chunk_kernel<scalar_t><<<grid, kThreads, 0, stream>>>(p);
    }
    auto* kernel = sample_kernel<scalar_t>;
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem)));
    if (err != cudaSuccess) return err;
    kernel<<<p.num_rows, kThreads, sizeof(Smem), stream>>>(p, full_path_only(), chunked);
    return launch_status();
  });
}

}  // namespace pagellm::cuda
