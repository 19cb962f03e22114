// CPU token sampler. The pipeline for one row, in order (vLLM V1 / HF semantics):
//   0. structured output: tokens outside seq.allowed_token_mask -> -inf;
//   1. sanitize: NaN -> -inf, +inf -> FLT_MAX (broken model output must not become UB in sorts);
//   2. raw logprobs: log_softmax of the row as passed in (chosen token + top-N), kept aside;
//   3. banned ids -> -inf; logit_bias added; repetition penalty over prompt ∪ output (logit > 0 ? /p : *p);
//      frequency then presence penalty over output tokens (logit -= f * count; logit -= p);
//      after the call the row holds these penalized logits;
//   4. greedy (temperature == 0): argmax, lowest id on ties — top-k/top-p/min-p are ignored;
//   5. otherwise weights w = (float)exp((double)((x - max) / T)) (the most likely token has w == 1;
//      exp in double rounded once, so that the CUDA sampler gets identical weights); top-k, then
//      top-p (smallest prefix of the (logit desc, id asc) order whose mass >= top_p of the top-k
//      mass), then min-p (w >= min_p, i.e. prob >= min_p * max prob); dropped tokens get w = 0;
//   6. draw by inverse CDF in ASCENDING TOKEN-ID order with u = sample_uniform(seed,
//      num_output_tokens): the vocabulary is cut into blocks of kDrawBlock ids, each block's mass
//      is summed in double; the first block whose running mass exceeds u * (total mass) is scanned
//      token by token (running sum in double) for the first token whose running sum exceeds the
//      rest of the target. If rounding leaves the target unreached, the last kept token of that
//      block (or of the last nonempty block) wins. A CUDA sampler using the same id order, blocks
//      and u draws the same token except where u falls within rounding of a CDF boundary.
// Truncations only need the position of a cut in the sorted order: a histogram of (max - x) / T
// bounds where the cut can be, only the tokens up to that bucket are gathered, and among them top-k
// is one nth_element and top-p sorts just the chunks of best tokens it needs. Plain sampling never
// sorts. Double sums use 8 interleaved partial sums: no long add-latency chain, fixed order.
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

// NaN compares false with everything, which breaks strict weak ordering (UB in std::sort): map it
// to -inf. +inf would make (x - max) NaN: clamp it to the largest finite float.
inline float clean(float x) {
  if (x != x) return kNegInf;
  return x > FLT_MAX ? FLT_MAX : x;
}

constexpr size_t kDrawBlock = 1024;    // ids per block of the two-level inverse-CDF draw
constexpr int kNumBuckets = 1024;      // histogram of (max - x) / T for bounding truncation cuts
constexpr float kBucketsPerUnit = 16;  // bucket width 1/16 in logit/T units: weight ratio 1.065

// Per-thread scratch sized to the vocabulary, reused across calls so a 150k-vocab row costs no
// allocation. `marks` and `counts` are all-zero between calls (each call clears what it touched).
struct Scratch {
  std::vector<float> weights;         // [vocab] exp((x - max) / T), 0 where dropped
  std::vector<int32_t> order;         // [num_candidates] token ids, partially sorted by `Better`
  std::vector<double> block_mass;     // [ceil(vocab / kDrawBlock)] sum of weights per block
  std::vector<uint8_t> marks;         // [vocab] bit 0: raw value saved; bit 1: repetition applied
  std::vector<int32_t> counts;        // [vocab] occurrences in the output
  std::vector<int32_t> touched;       // [num_touched] ids whose logit this call changed
  std::vector<float> touched_raw;     // [num_touched] their values before the change
  std::vector<int32_t> distinct;      // [num_distinct] distinct in-vocab output ids
  std::vector<double> bucket_mass;    // [kNumBuckets]
  std::vector<int32_t> bucket_count;  // [kNumBuckets]

  void reserve(size_t vocab) {
    if (weights.size() < vocab) {
      weights.resize(vocab);
      order.resize(vocab);
      block_mass.resize((vocab + kDrawBlock - 1) / kDrawBlock);
      marks.resize(vocab, 0);
      counts.resize(vocab, 0);
    }
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Sum in double with 8 interleaved partial sums (a fixed order, but no serial add chain).
double sum_lanes(const float* w, size_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) acc[j] += w[i + j];
  }
  for (; i < n; ++i) acc[i % 8] += w[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Max of clean(x). NaN never wins `v > m` and a +inf max is cleaned at the end, so the loop needs
// no clean(); 16 independent lanes let it vectorize (a single running max is one long serial
// chain).
float max_of(std::span<const float> x) {
  float lanes[16];
  std::fill(std::begin(lanes), std::end(lanes), kNegInf);
  size_t i = 0;
  for (; i + 16 <= x.size(); i += 16) {
    for (size_t j = 0; j < 16; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  float m = kNegInf;
  for (; i < x.size(); ++i) m = x[i] > m ? x[i] : m;
  for (float v : lanes) m = v > m ? v : m;
  return clean(m);
}

// In place: NaN -> -inf, +inf -> FLT_MAX (written as selects so that it vectorizes).
void clean_row(std::span<float> x) {
  for (float& v : x) {
    float c = v != v ? kNegInf : v;
    c = c > FLT_MAX ? FLT_MAX : c;
    v = c;
  }
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

// Stable log-sum-exp: exp in float after subtracting the max (into `tmp`: [vocab]), summed in
// double.
RowStats row_stats(std::span<const float> x, float* tmp) {
  RowStats s;
  s.max = max_of(x);
  if (s.max == kNegInf) return s;
  for (size_t i = 0; i < x.size(); ++i) tmp[i] = std::exp(clean(x[i]) - s.max);
  s.lse = static_cast<double>(s.max) + std::log(sum_lanes(tmp, x.size()));
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

void apply_repetition(std::span<float> x, std::span<const int32_t> ids, float penalty, Scratch& s) {
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
  for (const auto& [id, bias] : p.logit_bias) {
    if (!in_vocab(id, x.size())) continue;
    save_raw(x, id, s);
    x[id] += bias;
  }
  if (p.repetition_penalty != 1.0f) {
    apply_repetition(x, seq.prompt_token_ids, p.repetition_penalty, s);
    apply_repetition(x, seq.output_token_ids, p.repetition_penalty, s);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    apply_presence_frequency(x, seq.output_token_ids, p, s);
  }
  for (int32_t id : s.touched) {
    s.marks[id] = 0;
    // A penalty may overflow (x / 0.01 near FLT_MAX): +inf would make the weights inf and NaN.
    if (x[id] > FLT_MAX) x[id] = FLT_MAX;
  }
}

// Lowest id among the maximal logits; -1 when every logit is -inf.
int32_t argmax(std::span<const float> x) {
  const float m = max_of(x);
  if (m == kNegInf) return -1;
  return static_cast<int32_t>(std::find(x.begin(), x.end(), m) - x.begin());
}

// Fills w = exp((x - max) / T) and the per-block masses; returns the total mass.
double fill_weights(std::span<const float> x, float max_x, float temperature, Scratch& s) {
  float* w = s.weights.data();  // [vocab]
  // exp in double, rounded once to float: correctly rounded in practice, so the CUDA sampler
  // ((float)exp((double)z)) computes the same weights and the same truncation sets.
  for (size_t i = 0; i < x.size(); ++i)
    w[i] = static_cast<float>(std::exp(static_cast<double>((x[i] - max_x) / temperature)));
  double total = 0.0;
  for (size_t b = 0; b * kDrawBlock < x.size(); ++b) {
    const size_t begin = b * kDrawBlock;
    s.block_mass[b] = sum_lanes(w + begin, std::min(kDrawBlock, x.size() - begin));
    total += s.block_mass[b];
  }
  return total;
}

// Monotone in x (non-increasing): better tokens never land in a later bucket.
inline int bucket_of(float x, float max_x, float temperature) {
  const float scaled = (max_x - x) / temperature * kBucketsPerUnit;  // >= 0, may be +inf
  return static_cast<int>(std::min(scaled, static_cast<float>(kNumBuckets - 1)));
}

// Gathers into s.order every token with w > 0 whose bucket is at or before the one where the
// top-k count (or, without top-k, the top-p mass) is reached: a prefix of the Better order that
// surely contains the cut. Returns how many were gathered.
size_t gather_candidates(std::span<const float> x, float max_x, const SamplingParams& p,
                         double total, Scratch& s) {
  const float* w = s.weights.data();
  s.bucket_mass.assign(kNumBuckets, 0.0);
  s.bucket_count.assign(kNumBuckets, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(w[i] > 0.0f)) continue;
    const int b = bucket_of(x[i], max_x, p.temperature);
    s.bucket_mass[b] += w[i];
    ++s.bucket_count[b];
  }
  const bool use_k = p.top_k > 0;
  // The histogram sums in another order than `total`: a relative margin keeps the bound safe.
  const double mass_needed = static_cast<double>(p.top_p) * total * (1.0 + 1e-9);
  int limit = kNumBuckets - 1;
  double mass = 0.0;
  int64_t count = 0;
  for (int b = 0; b < kNumBuckets; ++b) {
    mass += s.bucket_mass[b];
    count += s.bucket_count[b];
    if (use_k ? count >= p.top_k : mass >= mass_needed) {
      limit = b;
      break;
    }
  }
  int32_t* order = s.order.data();  // [num_candidates]
  size_t num = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (w[i] > 0.0f && bucket_of(x[i], max_x, p.temperature) <= limit) {
      order[num++] = static_cast<int32_t>(i);
    }
  }
  return num;
}

// The kept set is a prefix of the Better order ending at `id` (inclusive).
struct Cut {
  bool active = false;
  float x = 0.0f;
  int32_t id = 0;
};

Cut cut_at(std::span<const float> x, int32_t id) { return Cut{true, x[id], id}; }

// Top-p over order[0, num): the smallest Better-prefix whose weight reaches `target`. Sorts chunks
// of growing size from the front, each chunk first separated from the rest by nth_element, so a
// peaked distribution costs O(num) and a flat one O(num log num) at worst.
Cut top_p_cut(std::span<const float> x, const float* w, int32_t* order, size_t num, double target) {
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

// Top-k then top-p (step 5), given the weights and their total.
Cut truncation_cut(std::span<const float> x, float max_x, const SamplingParams& p, double total,
                   Scratch& s) {
  size_t num = gather_candidates(x, max_x, p, total, s);
  const float* w = s.weights.data();
  int32_t* order = s.order.data();
  const Better better{x.data()};
  Cut cut;
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) <= num) {  // num < k: everything gathered
    std::nth_element(order, order + p.top_k - 1, order + num, better);
    num = static_cast<size_t>(p.top_k);
    cut = cut_at(x, order[num - 1]);
  }
  if (p.top_p < 1.0f) {
    if (p.top_k > 0) {
      std::sort(order, order + num, better);  // fixes the summation order of the top-k mass
      total = 0.0;
      for (size_t j = 0; j < num; ++j) total += w[order[j]];
    }
    cut = top_p_cut(x, w, order, num, static_cast<double>(p.top_p) * total);
  }
  return cut;
}

// Zeroes the weights of dropped tokens and recomputes the block masses; returns the kept mass.
double apply_cut(std::span<const float> x, const Cut& cut, float min_w, Scratch& s) {
  float* w = s.weights.data();
  const int32_t cut_id = cut.id;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool before_cut =
        !cut.active || x[i] > cut.x || (x[i] == cut.x && static_cast<int32_t>(i) <= cut_id);
    if (!before_cut || w[i] < min_w) w[i] = 0.0f;
  }
  double total = 0.0;
  for (size_t b = 0; b * kDrawBlock < x.size(); ++b) {
    const size_t begin = b * kDrawBlock;
    s.block_mass[b] = sum_lanes(w + begin, std::min(kDrawBlock, x.size() - begin));
    total += s.block_mass[b];
  }
  return total;
}

// Step 6: the two-level inverse-CDF draw described at the top of the file.
int32_t draw(size_t vocab, double total, double u, const Scratch& s) {
  const float* w = s.weights.data();
  const size_t num_blocks = (vocab + kDrawBlock - 1) / kDrawBlock;
  const double target = u * total;
  double cum = 0.0;
  size_t block = num_blocks;  // last nonempty block seen
  bool reached = false;
  for (size_t b = 0; b < num_blocks && !reached; ++b) {
    if (s.block_mass[b] > 0.0) block = b;
    reached = cum + s.block_mass[b] > target;
    if (!reached) cum += s.block_mass[b];
  }
  if (block == num_blocks) return -1;  // no weight at all
  const size_t begin = block * kDrawBlock;
  const size_t end = std::min(vocab, begin + kDrawBlock);
  // Target unreached through rounding: scan the last nonempty block to its end.
  const double rest = reached ? target - cum : std::numeric_limits<double>::infinity();
  double run = 0.0;
  int32_t last = -1;
  for (size_t i = begin; i < end; ++i) {
    if (!(w[i] > 0.0f)) continue;
    run += w[i];
    last = static_cast<int32_t>(i);
    if (run > rest) break;
  }
  return last;
}

// Steps 5 and 6 for a row whose max logit `max_x` is finite.
int32_t sample_row(std::span<const float> x, float max_x, const SamplingParams& p, double u,
                   Scratch& s) {
  double total = fill_weights(x, max_x, p.temperature, s);
  const bool truncate = (p.top_k > 0 && static_cast<size_t>(p.top_k) < x.size()) || p.top_p < 1.0f;
  Cut cut;
  if (truncate) cut = truncation_cut(x, max_x, p, total, s);
  if (cut.active || p.min_p > 0.0f) total = apply_cut(x, cut, p.min_p, s);
  return draw(x.size(), total, u, s);
}

// Every logit is -inf (e.g. the model emitted NaNs, or everything was banned): return the lowest id
// that was not banned so that the sequence can still make progress and hit its length limit.
inline bool mask_allows(std::span<const uint32_t> mask, size_t id) {
  return mask.empty() || (id / 32 < mask.size() && ((mask[id / 32] >> (id % 32)) & 1));
}

// Every logit is -inf: the lowest id the structured-output mask allows and nothing bans.
int32_t fallback_token(size_t vocab, std::span<const int32_t> banned, std::span<const uint32_t> mask) {
  for (size_t i = 0; i < vocab; ++i) {
    if (mask_allows(mask, i) && std::find(banned.begin(), banned.end(), static_cast<int32_t>(i)) == banned.end()) {
      return static_cast<int32_t>(i);
    }
  }
  for (size_t i = 0; i < vocab; ++i) {
    if (mask_allows(mask, i)) return static_cast<int32_t>(i);
  }
  return 0;
}

// Structured output: tokens outside the mask -> -inf (ids past its end included).
void apply_token_mask(std::span<float> x, std::span<const uint32_t> mask) {
  if (mask.empty()) return;
  for (size_t w = 0; w * 32 < x.size(); ++w) {
    const uint32_t bits = w < mask.size() ? mask[w] : 0u;
    if (bits == ~0u) continue;
    const size_t end = std::min(x.size(), w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i) {
      if (!((bits >> (i - w * 32)) & 1)) x[i] = kNegInf;
    }
  }
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
  Scratch& s = scratch();
  s.reserve(logits.size());
  const RowStats stats = row_stats(logits, s.weights.data());
  TokenLogprobs out;
  out.token_id = token;
  out.logprob = logprob_of(logits[token], stats);
  top_n_logprobs(logits, top_n, stats, out.top);
  return out;
}

void sampling_probs(std::span<float> logits, const ScheduledSeq& seq, std::span<float> probs) {
  if (seq.params == nullptr || logits.empty() || probs.size() != logits.size()) {
    throw_error(ErrorKind::kInternal, "sampling_probs: missing sampling params or mismatched rows");
  }
  const SamplingParams& p = *seq.params;
  apply_token_mask(logits, seq.allowed_token_mask);  // as sample_token: the mask comes first
  clean_row(logits);
  Scratch& s = scratch();
  s.reserve(logits.size());
  s.touched.clear();
  s.touched_raw.clear();
  apply_bans_and_penalties(logits, seq, s);
  std::fill(probs.begin(), probs.end(), 0.0f);
  int32_t token = -1;
  if (p.greedy()) {
    token = argmax(logits);
  } else if (const float max_x = max_of(logits); max_x > kNegInf) {
    double total = fill_weights(logits, max_x, p.temperature, s);
    const bool truncate = (p.top_k > 0 && static_cast<size_t>(p.top_k) < logits.size()) || p.top_p < 1.0f;
    Cut cut;
    if (truncate) cut = truncation_cut(logits, max_x, p, total, s);
    if (cut.active || p.min_p > 0.0f) total = apply_cut(logits, cut, p.min_p, s);
    if (total > 0.0) {
      for (size_t i = 0; i < logits.size(); ++i)
        probs[i] = static_cast<float>(static_cast<double>(s.weights[i]) / total);
      return;
    }
  }
  if (token < 0) token = fallback_token(logits.size(), seq.banned_token_ids, seq.allowed_token_mask);
  probs[static_cast<size_t>(token)] = 1.0f;
}

SampleResult sample_token(std::span<float> logits, const ScheduledSeq& seq) {
  if (seq.params == nullptr || logits.empty()) {
    throw_error(ErrorKind::kInternal, "sample_token: missing sampling params or empty logits row");
  }
  const SamplingParams& p = *seq.params;
  apply_token_mask(logits, seq.allowed_token_mask);
  clean_row(logits);
  Scratch& s = scratch();
  s.reserve(logits.size());
  const RowStats raw = row_stats(logits, s.weights.data());
  SampleResult result;
  if (p.logprobs) top_n_logprobs(logits, *p.logprobs, raw, result.logprobs.top);

  s.touched.clear();
  s.touched_raw.clear();
  apply_bans_and_penalties(logits, seq, s);

  int32_t token = -1;
  if (p.greedy()) {
    token = argmax(logits);
  } else {
    const float max_x = max_of(logits);
    if (max_x > kNegInf) {
      const double u = sample_uniform(seq.seed, seq.output_token_ids.size());
      token = sample_row(logits, max_x, p, u, s);
    }
  }
  if (token < 0) token = fallback_token(logits.size(), seq.banned_token_ids, seq.allowed_token_mask);
  result.token_id = token;
  result.logprobs.token_id = token;
  result.logprobs.logprob = logprob_of(raw_value(logits, token, s), raw);
  return result;
}

}  // namespace pagellm::engine
