#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/sampler.h"

namespace pagellm::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A sequence's sampling context, owning what ScheduledSeq only points to.
struct Seq {
  SamplingParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::vector<int32_t> banned;
  std::vector<uint32_t> mask;  // structured-output mask (empty: none)
  uint64_t seed = 1234;

  ScheduledSeq view() const {
    ScheduledSeq s;
    s.needs_sample = true;
    s.params = &params;
    s.seed = seed;
    s.prompt_token_ids = prompt;
    s.output_token_ids = output;
    s.banned_token_ids = banned;
    s.allowed_token_mask = mask;
    return s;
  }
  // Draws with RNG counter `counter` (the number of generated tokens) and no penalty history.
  int32_t draw(std::vector<float> logits, size_t counter) {
    output.assign(counter, 0);
    return sample_token(logits, view()).token_id;
  }
};

SampleResult sample(std::vector<float> logits, const Seq& seq) {
  return sample_token(logits, seq.view());
}

// ---- sample_uniform -------------------------------------------------------------------------

uint64_t ref_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

TEST(SampleUniform, IsCounterIndexedSplitMix64) {
  // Published SplitMix64 vector: the first output for state 0.
  ASSERT_EQ(ref_mix(0x9e3779b97f4a7c15ULL), 0xe220a8397b1dcdafULL);
  for (uint64_t seed : {0ULL, 1ULL, 42ULL, ~0ULL}) {
    for (uint64_t counter : {0ULL, 1ULL, 7ULL, 1000000ULL}) {
      const uint64_t bits = ref_mix(ref_mix(seed) + 0x9e3779b97f4a7c15ULL * (counter + 1));
      EXPECT_EQ(sample_uniform(seed, counter),
                static_cast<double>(bits >> 11) / 9007199254740992.0);
    }
  }
}

TEST(SampleUniform, RangeAndUniformity) {
  constexpr int kBins = 20;
  constexpr int kDraws = 100000;
  for (int pass = 0; pass < 2; ++pass) {  // along counters of one seed, then across seeds
    std::vector<int> bins(kBins, 0);
    for (int i = 0; i < kDraws; ++i) {
      const double u = pass == 0 ? sample_uniform(7, i) : sample_uniform(i, 0);
      ASSERT_GE(u, 0.0);
      ASSERT_LT(u, 1.0);
      ++bins[static_cast<int>(u * kBins)];
    }
    double chi2 = 0.0;
    const double expected = static_cast<double>(kDraws) / kBins;
    for (int b : bins) chi2 += (b - expected) * (b - expected) / expected;
    EXPECT_LT(chi2, 50.0) << "pass " << pass;  // 19 dof: p < 1e-4
  }
  EXPECT_EQ(sample_uniform(3, 9), sample_uniform(3, 9));
  EXPECT_NE(sample_uniform(3, 9), sample_uniform(4, 9));
  EXPECT_NE(sample_uniform(3, 9), sample_uniform(3, 10));
}

// ---- greedy, bans, penalties ----------------------------------------------------------------

TEST(Sampler, GreedyPicksLowestIdAmongTies) {
  Seq seq;
  seq.params.temperature = 0.0f;
  EXPECT_EQ(sample({0.5f, 2.0f, -1.0f, 2.0f, 1.9f}, seq).token_id, 1);
  EXPECT_EQ(sample({3.0f, 3.0f, 3.0f}, seq).token_id, 0);
  // Greedy ignores truncation settings entirely.
  seq.params.top_k = 1;
  seq.params.top_p = 0.01f;
  seq.params.min_p = 1.0f;
  EXPECT_EQ(sample({0.5f, 2.0f, -1.0f, 2.5f}, seq).token_id, 3);
}

TEST(Sampler, GreedyStillAppliesPenaltiesAndBans) {
  Seq seq;
  seq.params.temperature = 0.0f;
  seq.params.repetition_penalty = 2.0f;
  seq.prompt = {3};
  EXPECT_EQ(sample({0.5f, 2.0f, -1.0f, 3.0f}, seq).token_id, 1);  // 3 / 2 = 1.5 < 2
  seq.banned = {1};
  EXPECT_EQ(sample({0.5f, 2.0f, -1.0f, 3.0f}, seq).token_id, 3);  // 1.5 > 0.5
}

TEST(Sampler, PenaltiesExactValues) {
  Seq seq;
  seq.params.temperature = 0.0f;
  seq.params.repetition_penalty = 1.5f;
  seq.params.frequency_penalty = 0.25f;
  seq.params.presence_penalty = 0.5f;
  seq.prompt = {0, 1, 1, 6};             // token 6 only in the prompt
  seq.output = {1, 2, 2, 2, 5, 99, -4};  // out-of-vocab ids are ignored
  seq.banned = {4};
  std::vector<float> row = {3.0f, 3.0f, -2.0f, 0.0f, 9.0f, 1.0f, -1.0f, 7.0f};
  sample_token(row, seq.view());
  EXPECT_FLOAT_EQ(row[0], 3.0f / 1.5f);                      // prompt only: repetition only
  EXPECT_FLOAT_EQ(row[1], 3.0f / 1.5f - 0.25f * 1 - 0.5f);   // prompt twice + output once
  EXPECT_FLOAT_EQ(row[2], -2.0f * 1.5f - 0.25f * 3 - 0.5f);  // negative: multiplied
  EXPECT_FLOAT_EQ(row[3], 0.0f);                             // untouched
  EXPECT_EQ(row[4], kNegInf);                                // banned
  EXPECT_FLOAT_EQ(row[5], 1.0f / 1.5f - 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(row[6], -1.0f * 1.5f);  // prompt only, negative
  EXPECT_FLOAT_EQ(row[7], 7.0f);
}

TEST(Sampler, PenaltyOverflowClampsToTheLargestFloat) {
  Seq seq;
  seq.params.repetition_penalty = 0.01f;  // 3e38 / 0.01 overflows to +inf without the clamp
  seq.prompt = {1};
  std::vector<float> row = {0.0f, 3e38f, FLT_MAX, -1.0f};
  sample_token(row, seq.view());
  EXPECT_EQ(row[1], FLT_MAX);
  // Ids 1 and 2 now tie at FLT_MAX: both must be drawn (an inf weight would take every draw).
  std::set<int32_t> seen;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    seq.seed = seed;
    seen.insert(sample({0.0f, 3e38f, FLT_MAX, -1.0f}, seq).token_id);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2}));
}

TEST(Sampler, NegativePenaltiesEncourageRepeats) {
  Seq seq;
  seq.params.temperature = 0.0f;
  seq.params.frequency_penalty = -1.0f;
  seq.output = {2, 2};
  EXPECT_EQ(sample({1.0f, 2.5f, 0.8f}, seq).token_id, 2);  // 0.8 + 2 = 2.8 > 2.5
}

TEST(Sampler, PenaltyStateDoesNotLeakBetweenCalls) {
  Seq penalized;
  penalized.params.temperature = 0.0f;
  penalized.params.repetition_penalty = 10.0f;
  penalized.params.presence_penalty = 2.0f;
  penalized.output = {0};
  EXPECT_EQ(sample({5.0f, 1.0f}, penalized).token_id, 1);
  Seq plain;
  plain.params.temperature = 0.0f;
  std::vector<float> row = {5.0f, 1.0f};
  EXPECT_EQ(sample_token(row, plain.view()).token_id, 0);
  EXPECT_EQ(row[0], 5.0f);
}

TEST(Sampler, BannedIdsAreNeverSampled) {
  Seq seq;
  seq.params.temperature = 1.5f;
  seq.banned = {0, 3};
  const std::vector<float> row = {4.0f, 1.0f, 0.5f, 4.0f, 0.0f};
  std::vector<int> counts(row.size(), 0);
  for (size_t c = 0; c < 3000; ++c) ++counts[seq.draw(row, c)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[4], 0);
}

TEST(Sampler, AllBannedOrNonFiniteRowStillReturnsAToken) {
  Seq seq;
  seq.banned = {0, 1, 2};
  EXPECT_EQ(sample({1.0f, 2.0f, 3.0f}, seq).token_id, 0);
  seq.banned = {0};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(sample({nan, nan, nan}, seq).token_id, 1);
  // NaN entries are treated as -inf and never drawn; +inf behaves as the largest logit.
  seq.banned.clear();
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t c = 0; c < 200; ++c) {
    EXPECT_EQ(seq.draw({nan, 1.0f, inf, nan}, c), 2);
    EXPECT_EQ(seq.draw({nan, 1.0f, nan, 1.0f}, c) % 2, 1);
  }
}

TEST(Sampler, StructuredOutputMaskComesFirst) {
  Seq seq;
  seq.params.temperature = 1.0f;
  std::vector<float> row(40, 0.0f);
  row[3] = 10.0f;  // the best token, but not allowed
  seq.mask = {(1u << 5) | (1u << 9), 1u << (33 - 32)};  // 5, 9 and 33; ids past the mask (none here) too
  std::vector<int> counts(row.size(), 0);
  for (size_t c = 0; c < 600; ++c) ++counts[seq.draw(row, c)];
  EXPECT_EQ(counts[5] + counts[9] + counts[33], 600);
  EXPECT_GT(counts[5], 0);
  EXPECT_GT(counts[33], 0);
  seq.params.temperature = 0.0f;
  seq.params.logprobs = 2;
  const SampleResult greedy = sample(row, seq);
  EXPECT_EQ(greedy.token_id, 5);  // lowest allowed id among equal logits
  EXPECT_NEAR(greedy.logprobs.logprob, std::log(1.0f / 3.0f), 1e-5);  // logprobs of the masked row
  // A mask shorter than the row disallows the ids past it; an all-disallowed row falls back to an
  // allowed id.
  seq.mask = {0u};
  seq.params.temperature = 1.0f;
  EXPECT_EQ(sample(row, seq).token_id, 0);
  seq.mask = {0u, 1u << 7};
  EXPECT_EQ(sample({kNegInf, kNegInf, kNegInf}, seq).token_id, 0);  // nothing allowed in range: id 0
}

// ---- determinism --------------------------------------------------------------------------

TEST(Sampler, SameSeedAndCounterGiveTheSameToken) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> row(1000);
  for (float& v : row) v = normal(rng);
  Seq a;
  a.params.temperature = 0.9f;
  a.params.top_k = 40;
  a.params.top_p = 0.9f;
  a.seed = 77;
  Seq other;
  other.params.temperature = 1.3f;
  other.params.repetition_penalty = 1.3f;
  other.prompt = {1, 2, 3};
  other.seed = 78;
  std::vector<int32_t> first;
  for (size_t c = 0; c < 50; ++c) first.push_back(a.draw(row, c));
  // Interleave unrelated draws (other seeds, penalties, vocab sizes) and repeat in reverse order.
  for (size_t c = 50; c-- > 0;) {
    other.draw(row, c);
    other.draw(std::vector<float>(row.begin(), row.begin() + 17), c + 3);
    EXPECT_EQ(a.draw(row, c), first[c]) << "counter " << c;
  }
  // The counter is the number of generated tokens, whatever they were (no penalties here).
  a.output = {5, 6, 7};
  EXPECT_EQ(sample(row, a).token_id, first[3]);
  // Different seeds give different streams.
  Seq b = a;
  b.seed = 99;
  int num_diff = 0;
  for (size_t c = 0; c < 50; ++c) num_diff += b.draw(row, c) != first[c];
  EXPECT_GT(num_diff, 10);
}

// ---- distribution ------------------------------------------------------------------------

// Naive reference of the documented algorithm: full sort, then truncations, then id-order draw.
// Returns each token's probability of being drawn.
std::vector<double> reference_probs(const std::vector<float>& x, const SamplingParams& p) {
  const float max_x = *std::max_element(x.begin(), x.end());
  std::vector<double> w(x.size());
  for (size_t i = 0; i < x.size(); ++i) w[i] = std::exp((x[i] - max_x) / p.temperature);
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  size_t num = order.size();
  if (p.top_k > 0) num = std::min<size_t>(num, p.top_k);
  double mass = 0.0;
  for (size_t j = 0; j < num; ++j) mass += w[order[j]];
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t j = 0; j < num; ++j) {
      cum += w[order[j]];
      if (cum >= p.top_p * mass) {
        num = j + 1;
        break;
      }
    }
  }
  std::vector<double> probs(x.size(), 0.0);
  double kept = 0.0;
  for (size_t j = 0; j < num; ++j) {
    if (w[order[j]] >= p.min_p) kept += probs[order[j]] = w[order[j]];
  }
  for (double& q : probs) q /= kept;
  return probs;
}

struct DistCase {
  const char* name;
  float temperature;
  int top_k;
  float top_p;
  float min_p;
  int num_kept;  // tokens with nonzero probability
};

TEST(Sampler, EmpiricalDistributionMatchesTruncatedSoftmax) {
  const std::vector<float> row = {1.0f, 2.0f, 0.5f, 2.0f, -1.0f, 0.0f, 1.5f, -3.0f};
  const DistCase cases[] = {
      {"plain", 1.0f, -1, 1.0f, 0.0f, 8},
      {"hot", 2.0f, 0, 1.0f, 0.0f, 8},
      {"top_k", 0.7f, 3, 1.0f, 0.0f, 3},
      {"top_p", 1.0f, -1, 0.75f, 0.0f, 3},
      {"min_p", 1.0f, -1, 1.0f, 0.3f, 4},
      {"all_three", 0.8f, 5, 0.9f, 0.2f, 4},
      {"top_p_tiny", 1.0f, -1, 1e-4f, 0.0f, 1},
      {"min_p_one_keeps_tied_max", 1.0f, -1, 1.0f, 1.0f, 2},
      {"top_k_beyond_vocab", 1.0f, 100, 1.0f, 0.0f, 8},
  };
  constexpr int kDraws = 20000;
  for (const DistCase& dc : cases) {
    SCOPED_TRACE(dc.name);
    Seq seq;
    seq.params.temperature = dc.temperature;
    seq.params.top_k = dc.top_k;
    seq.params.top_p = dc.top_p;
    seq.params.min_p = dc.min_p;
    const std::vector<double> expected = reference_probs(row, seq.params);
    EXPECT_EQ(std::count_if(expected.begin(), expected.end(), [](double q) { return q > 0; }),
              dc.num_kept);
    std::vector<int> counts(row.size(), 0);
    for (int c = 0; c < kDraws; ++c) ++counts[seq.draw(row, c)];
    for (size_t i = 0; i < row.size(); ++i) {
      const double freq = static_cast<double>(counts[i]) / kDraws;
      const double sigma = std::sqrt(expected[i] * (1.0 - expected[i]) / kDraws);
      if (expected[i] == 0.0) {
        EXPECT_EQ(counts[i], 0) << "token " << i;
      } else {
        EXPECT_NEAR(freq, expected[i], 5.0 * sigma + 1e-9) << "token " << i;
      }
    }
  }
}

TEST(Sampler, TopKZeroAndMinusOneBothDisable) {
  const std::vector<float> row = {0.1f, 0.4f, 0.3f, -0.2f};
  Seq a, b;
  a.params.top_k = 0;
  b.params.top_k = -1;
  for (size_t c = 0; c < 100; ++c) EXPECT_EQ(a.draw(row, c), b.draw(row, c));
}

// The optimised path (histogram-bounded gather, nth_element, chunked top-p, two-level block draw)
// against the naive full sort on a vocabulary of many draw blocks: the inverse-CDF draw in id order
// must pick exactly the reference's token.
TEST(Sampler, LargeVocabMatchesNaiveReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(50000);  // flat-ish: top-p 0.95 needs many chunks
  for (float& v : row) v = std::round(normal(rng) * 64.0f) / 64.0f;  // plenty of exact ties
  struct P {
    int top_k;
    float top_p;
    float min_p;
    float temperature;
  };
  const P settings[] = {{-1, 0.95f, 0.0f, 1.0f},  {-1, 0.3f, 0.0f, 0.5f},  {40, 1.0f, 0.0f, 1.0f},
                        {1000, 0.8f, 0.0f, 1.2f}, {-1, 1.0f, 0.05f, 1.0f}, {-1, 1.0f, 0.0f, 1.0f},
                        {7, 0.5f, 0.5f, 0.9f}};
  for (const P& s : settings) {
    Seq seq;
    seq.params.top_k = s.top_k;
    seq.params.top_p = s.top_p;
    seq.params.min_p = s.min_p;
    seq.params.temperature = s.temperature;
    const std::vector<double> probs = reference_probs(row, seq.params);
    for (size_t c = 0; c < 8; ++c) {
      const double target = sample_uniform(seq.seed, c);
      double cum = 0.0;
      int32_t want = -1;
      for (size_t i = 0; i < row.size() && want < 0; ++i) {
        cum += probs[i];
        if (probs[i] > 0.0 && cum > target) want = static_cast<int32_t>(i);
      }
      EXPECT_EQ(seq.draw(row, c), want) << "top_k " << s.top_k << " top_p " << s.top_p << " min_p "
                                        << s.min_p << " counter " << c;
    }
  }
}

// ---- logprobs ------------------------------------------------------------------------------

std::vector<double> naive_log_softmax(const std::vector<float>& x) {
  double sum = 0.0;
  for (float v : x) sum += std::exp(static_cast<double>(v));
  std::vector<double> out;
  for (float v : x) out.push_back(static_cast<double>(v) - std::log(sum));
  return out;
}

TEST(Logprobs, TopNOrderingAndValues) {
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f, 2.0f, 0.5f, 2.0f, -7.0f, 2.5f};
  const std::vector<double> ref = naive_log_softmax(row);
  const TokenLogprobs lp = compute_logprobs(row, 2, 6);
  EXPECT_EQ(lp.token_id, 2);
  EXPECT_NEAR(lp.logprob, ref[2], 1e-5);
  const std::vector<int32_t> want_ids = {1, 3, 8, 4, 6, 0};  // ties by lower id
  ASSERT_EQ(lp.top.size(), want_ids.size());
  for (size_t j = 0; j < want_ids.size(); ++j) {
    EXPECT_EQ(lp.top[j].first, want_ids[j]) << j;
    EXPECT_NEAR(lp.top[j].second, ref[want_ids[j]], 1e-5) << j;
  }
  EXPECT_TRUE(compute_logprobs(row, 0, 0).top.empty());
  EXPECT_EQ(compute_logprobs(row, 0, 100).top.size(), row.size());  // N clamped to the vocab
  EXPECT_THROW(compute_logprobs(row, 9, 1), Error);
  EXPECT_THROW(compute_logprobs(row, -1, 1), Error);
}

TEST(Logprobs, RandomRowsMatchNaiveReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<float> row(3000);
    for (float& v : row) v = std::round(normal(rng) * 4.0f) / 4.0f + 30.0f;  // ties, large offset
    const std::vector<double> ref = naive_log_softmax(row);
    std::vector<int32_t> ids(row.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    const TokenLogprobs lp = compute_logprobs(row, 17, 20);
    EXPECT_NEAR(lp.logprob, ref[17], 1e-4);
    ASSERT_EQ(lp.top.size(), 20u);
    for (size_t j = 0; j < 20; ++j) {
      EXPECT_EQ(lp.top[j].first, ids[j]);
      EXPECT_NEAR(lp.top[j].second, ref[ids[j]], 1e-4);
    }
  }
}

TEST(Logprobs, SampledTokenLogprobsAreRaw) {
  const std::vector<float> row = {1.0f, 4.0f, 2.0f, 3.0f, 0.0f};
  const std::vector<double> ref = naive_log_softmax(row);
  Seq seq;
  seq.params.temperature = 0.0f;
  seq.params.repetition_penalty = 4.0f;
  seq.params.presence_penalty = 1.0f;
  seq.prompt = {1};
  seq.output = {3};
  seq.banned = {1};
  // Penalized: 1, -inf, 2, 3/4 - 1 = -0.25, 0 -> greedy picks 2.
  SampleResult r = sample(row, seq);
  EXPECT_EQ(r.token_id, 2);
  EXPECT_EQ(r.logprobs.token_id, 2);
  EXPECT_NEAR(r.logprobs.logprob, ref[2], 1e-6);
  EXPECT_TRUE(r.logprobs.top.empty());  // logprobs not requested
  seq.params.logprobs = 0;
  r = sample(row, seq);
  EXPECT_TRUE(r.logprobs.top.empty());
  seq.params.logprobs = 3;  // top-N of the raw row: the banned, penalized token 1 comes first
  r = sample(row, seq);
  ASSERT_EQ(r.logprobs.top.size(), 3u);
  EXPECT_EQ(r.logprobs.top[0].first, 1);
  EXPECT_EQ(r.logprobs.top[1].first, 3);
  EXPECT_EQ(r.logprobs.top[2].first, 2);
  EXPECT_NEAR(r.logprobs.top[0].second, ref[1], 1e-6);
  // With temperature, the reported logprob still ignores it and the chosen token's penalty.
  seq.params.temperature = 0.3f;
  seq.banned.clear();
  seq.params.repetition_penalty = 1.0f;
  seq.params.presence_penalty = 0.0f;
  for (size_t c = 0; c < 20; ++c) {
    seq.output.assign(c, 4);
    r = sample(row, seq);
    EXPECT_NEAR(r.logprobs.logprob, ref[r.token_id], 1e-6);
  }
}

}  // namespace
}  // namespace pagellm::engine
