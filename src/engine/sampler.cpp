// CPU token sampler. The pipeline for one row, in order (vLLM V1 / HF semantics):
//   1. sanitize: NaN -> -inf, +inf -> FLT_MAX (a broken model must not turn into UB in comparisons);
//   2. raw logprobs: log_softmax of the row as passed in (chosen token + top-N), kept aside;
//   3. banned ids -> -inf; repetition penalty over prompt ∪ output (logit > 0 ? /p : *p);
//      frequency then presence penalty over output tokens (logit -= f * count; logit -= p);
//      after the call the row holds these penalized logits;
//   4. greedy (temperature == 0): argmax, lowest id on ties — top-k/top-p/min-p are ignored;
//   5. otherwise weights w = exp((x - max) / T); top-k, then top-p (smallest prefix of the
//      (logit desc, id asc) order whose mass >= top_p of the remaining mass), then min-p (w >= min_p,
//      i.e. prob >= min_p * max prob);
//   6. draw: u = sample_uniform(seed, num_output_tokens); walk the kept tokens in ASCENDING TOKEN-ID
//      order accumulating w in double and return the first whose running sum exceeds u * (kept mass).
//      The CUDA sampler must use the same order (a prefix scan in id order), the same weights and the
//      same u to draw the same token.
// Truncations only ever need the position of a cut in the sorted order, so top-k is one nth_element
// and top-p sorts only as many chunks of the best tokens as it needs; plain sampling never sorts.
#include "engine/sampler.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"

namespace pagellm::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// SplitMix64's finalizer (Steele et al.): a bijective 64-bit mix, integer ops only.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's stream increment

// NaN compares false with everything, which breaks strict weak ordering (UB in std::sort): map it to
// -inf. +inf would make (x - max) NaN: clamp it to the largest finite float.
inline float clean(float x) {
  if (x != x) return kNegInf;
  return x > FLT_MAX ? FLT_MAX : x;
}

// Per-thread scratch sized to the vocabulary, reused across calls so a 150k-vocab row costs no
// allocation. `marks` and `counts` are all-zero between calls (each call clears what it touched).
struct Scratch {
  std::vector<float> weights;     // [vocab] exp((x - max) / T)
  std::vector<int32_t> order;     // [num_candidates] token ids, partially sorted by `Better`
  std::vector<uint8_t> marks;     // [vocab] bit 0: raw value saved; bit 1: repetition applied
  std::vector<int32_t> counts;    // [vocab] occurrences in the output
  std::vector<int32_t> touched;   // [num_touched] ids whose logit this call changed
  std::vector<float> touched_raw; // [num_touched] their values before the change
  std::vector<int32_t> distinct;  // [num_distinct] distinct in-vocab output ids

  void reserve(size_t vocab) {
    if (weights.size() < vocab) {
      weights.resize(vocab);
      order.resize(vocab);
      marks.resize(vocab, 0);
      counts.resize(vocab, 0);
    }
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The one total order used by every truncation: higher logit first, lower id on ties.
struct Better {
  const float* x;
  bool operator()(int32_t a, int32_t b) const { return x[a] > x[b] || (x[a] == x[b] && a < b); }
};

struct RowStats {
  float max = kNegInf;
  double lse = -std::numeric_limits<double>::infinity();  // log(sum(exp(x)))
};

// Stable log-sum-exp: exp in float after subtracting the max, summed in double.
RowStats row_stats(std::span<const float> x) {
  RowStats s;
  for (float v : x) s.max = std::max(s.max, clean(v));
  if (s.max == kNegInf) return s;
  double sum = 0.0;
  for (float v : x) sum += std::exp(clean(v) - s.max);
  s.lse = static_cast<double>(s.max) + std::log(sum);
  return s;
}

float logprob_of(float raw, const RowStats& s) {
  if (s.max == kNegInf) return kNegInf;
  return static_cast<float>(static_cast<double>(clean(raw)) - s.lse);
}

// The n best (logit desc, id asc) entries of the row as (id, logprob), best first. One pass with a
// small sorted buffer: almost every element fails the first comparison.
void top_n_logprobs(std::span<const float> x, int n, const RowStats& s,
                    std::vector<std::pair<int32_t, float>>& out) {
  out.clear();
  const size_t num = std::min<size_t>(static_cast<size_t>(std::max(n, 0)), x.size());
  if (num == 0) return;
  std::vector<std::pair<float, int32_t>> best;  // [<= num] (clean logit, id), best first
  best.reserve(num + 1);
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = clean(x[i]);
    // Ids arrive in increasing order, so an equal value never beats an entry already kept.
    if (best.size() == num && !(v > best.back().first)) continue;
    auto pos = std::upper_bound(best.begin(), best.end(), v,
                                [](float val, const auto& e) { return val > e.first; });
    best.insert(pos, {v, static_cast<int32_t>(i)});
    if (best.size() > num) best.pop_back();
  }
  for (const auto& [v, id] : best) out.emplace_back(id, logprob_of(v, s));
}

// Records the raw value of `id` once, before the first change this call makes to it.
void save_raw(std::span<float> x, int32_t id, Scratch& s) {
  if (s.marks[id] & 1) return;
  s.marks[id] |= 1;
  s.touched.push_back(id);
  s.touched_raw.push_back(x[id]);
}

inline bool in_vocab(int32_t id, size_t vocab) {
  return id >= 0 && static_cast<size_t>(id) < vocab;
}

void apply_repetition(std::span<float> x, std::span<const int32_t> ids, float penalty,
                      Scratch& s) {
  for (int32_t id : ids) {
    if (!in_vocab(id, x.size()) || (s.marks[id] & 2)) continue;  // once per distinct token
    save_raw(x, id, s);
    s.marks[id] |= 2;
    x[id] = x[id] > 0.0f ? x[id] / penalty : x[id] * penalty;
  }
}

void apply_presence_frequency(std::span<float> x, std::span<const int32_t> output,
                              const SamplingParams& p, Scratch& s) {
  s.distinct.clear();
  for (int32_t id : output) {
    if (!in_vocab(id, x.size())) continue;
    if (s.counts[id]++ == 0) s.distinct.push_back(id);
  }
  for (int32_t id : s.distinct) {
    save_raw(x, id, s);
    x[id] -= p.frequency_penalty * static_cast<float>(s.counts[id]);
    x[id] -= p.presence_penalty;
    s.counts[id] = 0;
  }
}

// Step 3 of the pipeline; every changed id lands in s.touched with its raw value.
void apply_bans_and_penalties(std::span<float> x, const ScheduledSeq& seq, Scratch& s) {
  const SamplingParams& p = *seq.params;
  for (int32_t id : seq.banned_token_ids) {
    if (!in_vocab(id, x.size())) continue;
    save_raw(x, id, s);
    x[id] = kNegInf;
  }
  if (p.repetition_penalty != 1.0f) {
    apply_repetition(x, seq.prompt_token_ids, p.repetition_penalty, s);
    apply_repetition(x, seq.output_token_ids, p.repetition_penalty, s);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    apply_presence_frequency(x, seq.output_token_ids, p, s);
  }
  for (int32_t id : s.touched) s.marks[id] = 0;
}

// Lowest id among the maximal logits; -1 when every logit is -inf.
int32_t argmax(std::span<const float> x) {
  int32_t best = -1;
  float best_v = kNegInf;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] > best_v) {
      best_v = x[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// The kept set is a prefix of the Better order ending at `id` (inclusive), intersected with
// w >= min_w. A token with zero weight is never kept.
struct Cut {
  bool active = false;
  float x = 0.0f;
  int32_t id = 0;
};

inline bool kept(std::span<const float> x, const float* w, size_t i, const Cut& cut, float min_w) {
  if (!(w[i] > 0.0f) || w[i] < min_w) return false;
  if (!cut.active) return true;
  return x[i] > cut.x || (x[i] == cut.x && static_cast<int32_t>(i) <= cut.id);
}

Cut cut_at(std::span<const float> x, int32_t id) { return Cut{true, x[id], id}; }

// Top-p over order[0, num): the smallest Better-prefix whose weight reaches `target`. Sorts chunks
// of growing size from the front, each chunk first separated from the rest by nth_element, so a
// peaked distribution costs O(vocab) and a flat one O(vocab log vocab) at worst.
Cut top_p_cut(std::span<const float> x, const float* w, int32_t* order, size_t num,
              double target) {
  const Better better{x.data()};
  double cum = 0.0;
  size_t begin = 0;
  size_t chunk = 256;
  while (begin < num) {
    const size_t end = std::min(num, begin + chunk);
    if (end < num) std::nth_element(order + begin, order + end - 1, order + num, better);
    std::sort(order + begin, order + end, better);
    for (size_t j = begin; j < end; ++j) {
      cum += w[order[j]];
      if (cum >= target) return cut_at(x, order[j]);
    }
    begin = end;
    chunk *= 2;
  }
  return cut_at(x, order[num - 1]);  // only reachable through rounding: keep everything
}

// Steps 5 and 6 for a row whose max logit `max_x` is finite.
int32_t sample_row(std::span<const float> x, float max_x, const SamplingParams& p, double u,
                   Scratch& s) {
  float* w = s.weights.data();     // [vocab]
  int32_t* order = s.order.data(); // [num_candidates]
  size_t num_cand = 0;
  double total = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    w[i] = std::exp((x[i] - max_x) / p.temperature);
    total += w[i];
    if (w[i] > 0.0f) order[num_cand++] = static_cast<int32_t>(i);
  }
  Cut cut;
  const Better better{x.data()};
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < num_cand) {
    const size_t num_all = num_cand;
    num_cand = static_cast<size_t>(p.top_k);
    std::nth_element(order, order + num_cand - 1, order + num_all, better);
    cut = cut_at(x, order[num_cand - 1]);
    if (p.top_p < 1.0f) {
      std::sort(order, order + num_cand, better);  // fixes the summation order of the top-k mass
      total = 0.0;
      for (size_t j = 0; j < num_cand; ++j) total += w[order[j]];
    }
  }
  if (p.top_p < 1.0f) cut = top_p_cut(x, w, order, num_cand, static_cast<double>(p.top_p) * total);
  const float min_w = p.min_p;  // w of the most likely token is exactly 1
  double kept_mass = total;
  if (cut.active || min_w > 0.0f) {
    kept_mass = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (kept(x, w, i, cut, min_w)) kept_mass += w[i];
    }
  }
  const double target = u * kept_mass;
  double cum = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!kept(x, w, i, cut, min_w)) continue;
    cum += w[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;  // u * mass rounded up to the mass: the last kept token
}

// Every logit is -inf (e.g. the model emitted NaNs, or everything was banned): return the lowest id
// that was not banned so that the sequence can still make progress and hit its length limit.
int32_t fallback_token(size_t vocab, std::span<const int32_t> banned) {
  for (size_t i = 0; i < vocab; ++i) {
    if (std::find(banned.begin(), banned.end(), static_cast<int32_t>(i)) == banned.end()) {
      return static_cast<int32_t>(i);
    }
  }
  return 0;
}

float raw_value(std::span<const float> x, int32_t id, const Scratch& s) {
  for (size_t j = 0; j < s.touched.size(); ++j) {
    if (s.touched[j] == id) return s.touched_raw[j];
  }
  return x[id];
}

}  // namespace

double sample_uniform(uint64_t seed, uint64_t counter) {
  // Output number `counter` of a SplitMix64 stream whose start is the mixed seed: nearby seeds give
  // unrelated streams, and any (seed, counter) is computed directly, without stepping a state.
  const uint64_t bits = mix64(mix64(seed) + kGolden * (counter + 1));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random bits, exact in a double
}

TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  if (!in_vocab(token, logits.size())) {
    throw_error(ErrorKind::kInternal, "compute_logprobs: token " + std::to_string(token) +
                                          " outside the vocabulary of " +
                                          std::to_string(logits.size()));
  }
  const RowStats stats = row_stats(logits);
  TokenLogprobs out;
  out.token_id = token;
  out.logprob = logprob_of(logits[token], stats);
  top_n_logprobs(logits, top_n, stats, out.top);
  return out;
}

SampleResult sample_token(std::span<float> logits, const ScheduledSeq& seq) {
  if (seq.params == nullptr || logits.empty()) {
    throw_error(ErrorKind::kInternal, "sample_token: missing sampling params or empty logits row");
  }
  const SamplingParams& p = *seq.params;
  for (float& v : logits) v = clean(v);
  const RowStats raw = row_stats(logits);
  SampleResult result;
  if (p.logprobs) top_n_logprobs(logits, *p.logprobs, raw, result.logprobs.top);

  Scratch& s = scratch();
  s.reserve(logits.size());
  s.touched.clear();
  s.touched_raw.clear();
  apply_bans_and_penalties(logits, seq, s);

  int32_t token = -1;
  if (p.greedy()) {
    token = argmax(logits);
  } else {
    const int32_t best = argmax(logits);
    if (best >= 0) {
      const double u = sample_uniform(seq.seed, seq.output_token_ids.size());
      token = sample_row(logits, logits[best], p, u, s);
    }
  }
  if (token < 0) token = fallback_token(logits.size(), seq.banned_token_ids);
  result.token_id = token;
  result.logprobs.token_id = token;
  result.logprobs.logprob = logprob_of(raw_value(logits, token, s), raw);
  return result;
}

}  // namespace pagellm::engine
