// Speculative decoding's pieces without a model: --speculative-config parsing and its one-line
// errors, the n-gram proposer, and the rejection sampler's laws (greedy acceptance, p-exact
// output, resampling from the residual max(p - q, 0)).
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/sampler.h"
#include "engine/stats.h"
#include "server/metrics.h"
#include "spec/draft_cost.h"
#include "spec/ngram_proposer.h"
#include "spec/proposer.h"
#include "spec/rejection_sampler.h"

namespace pagellm {
namespace {

std::string error_of(const std::string& json) {
  try {
    SpeculativeConfig::from_json(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SpecConfig, ParsesVllmJson) {
  const SpeculativeConfig ngram =
      SpeculativeConfig::from_json(R"({"method": "ngram", "num_speculative_tokens": 4})");
  EXPECT_EQ(ngram.method, "ngram");
  EXPECT_EQ(ngram.num_speculative_tokens, 4);
  EXPECT_EQ(ngram.prompt_lookup_min, 5);  // vLLM's defaults
  EXPECT_EQ(ngram.prompt_lookup_max, 5);
  const SpeculativeConfig bounded = SpeculativeConfig::from_json(
      R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 4})");
  EXPECT_EQ(bounded.prompt_lookup_min, 2);
  EXPECT_EQ(bounded.prompt_lookup_max, 4);
  EXPECT_EQ(SpeculativeConfig::from_json(
                R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3})")
                .prompt_lookup_min,
            3);
  const SpeculativeConfig draft =
      SpeculativeConfig::from_json(R"({"model": "/m/draft", "num_speculative_tokens": 3})");
  EXPECT_EQ(draft.method, "draft_model");
  EXPECT_EQ(draft.model, "/m/draft");
  EXPECT_EQ(
      SpeculativeConfig::from_json(R"({"model": "ngram", "num_speculative_tokens": 3})").method,
      "ngram");
  EXPECT_FALSE(SpeculativeConfig{}.enabled());
  EXPECT_EQ(SpeculativeConfig::from_json(
                R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 8})")
                .max_speculating_seqs(),
            8);
}

TEST(SpecConfig, AdaptiveKeysAndDefaultCosts) {
  const SpeculativeConfig off =
      SpeculativeConfig::from_json(R"({"method": "ngram", "num_speculative_tokens": 4})");
  EXPECT_FALSE(off.adaptive);
  const SpeculativeConfig ngram = SpeculativeConfig::from_json(
      R"({"method": "ngram", "num_speculative_tokens": 4, "adaptive": true})");
  EXPECT_TRUE(ngram.adaptive);
  EXPECT_DOUBLE_EQ(ngram.effective_draft_cost(), SpeculativeConfig::kNgramDraftCost);
  const SpeculativeConfig draft = SpeculativeConfig::from_json(
      R"({"model": "/m/draft", "num_speculative_tokens": 4, "adaptive": true})");
  EXPECT_DOUBLE_EQ(draft.effective_draft_cost(), SpeculativeConfig::kModelDraftCost);
  const SpeculativeConfig set = SpeculativeConfig::from_json(
      R"({"model": "/m/draft", "num_speculative_tokens": 4, "adaptive": true, "draft_token_cost": 0.3})");
  EXPECT_DOUBLE_EQ(set.effective_draft_cost(), 0.3);
}

// The most j in [1, k] with alpha^j >= cost, alpha = (hits + 1) / (trials + 1).
TEST(AdaptiveNumDrafts, DraftsWhatTheMeasuredAcceptancePaysFor) {
  EXPECT_EQ(spec::adaptive_num_drafts(0, 0, 4, 0.05), 4);    // no data: alpha = 1
  EXPECT_EQ(spec::adaptive_num_drafts(9, 9, 7, 0.05), 7);    // every draft accepted
  EXPECT_EQ(spec::adaptive_num_drafts(0, 1, 8, 0.05), 4);    // alpha 0.5: 0.5^4 >= 0.05 > 0.5^5
  EXPECT_EQ(spec::adaptive_num_drafts(0, 3, 8, 0.05), 2);    // alpha 0.25
  EXPECT_EQ(spec::adaptive_num_drafts(0, 100, 8, 0.05), 1);  // never below one draft
  EXPECT_EQ(spec::adaptive_num_drafts(7, 9, 4, 0.05), 4);    // alpha 0.8: 13 drafts pay, k caps
  EXPECT_EQ(spec::adaptive_num_drafts(7, 9, 16, 0.5), 3);    // 0.8^3 >= 0.5 > 0.8^4
  EXPECT_EQ(spec::adaptive_num_drafts(3, 3, 4, 0.0), 4);
  // More accepted drafts never mean fewer drafts; a dearer draft never means more.
  for (double trials = 0; trials < 20; trials += 1)
    for (double hits = 0; hits + 1 <= trials; hits += 1) {
      EXPECT_GE(spec::adaptive_num_drafts(hits + 1, trials, 8, 0.1),
                spec::adaptive_num_drafts(hits, trials, 8, 0.1));
      EXPECT_LE(spec::adaptive_num_drafts(hits, trials, 8, 0.3),
                spec::adaptive_num_drafts(hits, trials, 8, 0.1));
    }
}

// Adaptive k's measured draft cost: the default until both the proposals and the target steps have
// been timed a few times, then the proposal time per draft position over the target step's plus the
// verification share; bad samples are ignored, new ones move the averages, the cost stays below a
// whole target step.
TEST(DraftCostMeter, MeasuresAfterAFewSamples) {
  using spec::DraftCostMeter;
  DraftCostMeter m;
  EXPECT_DOUBLE_EQ(m.cost(0.2, 0.05), 0.2);
  for (int i = 0; i + 1 < DraftCostMeter::kMinSamples; ++i) {
    m.add_proposal(0.004, 2);
    m.add_target_step(0.01);
  }
  EXPECT_FALSE(m.measured());
  EXPECT_DOUBLE_EQ(m.cost(0.2, 0.05), 0.2);
  m.add_proposal(0.004, 2);
  EXPECT_FALSE(m.measured());  // one more target step still missing
  m.add_target_step(0.01);
  ASSERT_TRUE(m.measured());
  EXPECT_NEAR(m.cost(0.2, 0.05), 0.002 / 0.01 + 0.05, 1e-12);
  m.add_proposal(-1.0, 2);
  m.add_proposal(1.0, 0);
  m.add_target_step(0.0);
  EXPECT_NEAR(m.cost(0.2, 0.05), 0.25, 1e-12);
  m.add_proposal(0.024, 2);  // 0.012 per position: the average moves a tenth of the way
  EXPECT_NEAR(m.cost(0.2, 0.05), (0.002 + 0.1 * 0.01) / 0.01 + 0.05, 1e-12);
  for (int i = 0; i < 200; ++i) m.add_proposal(0.1, 1);
  EXPECT_DOUBLE_EQ(m.cost(0.2, 0.05), DraftCostMeter::kMaxCost);
}

TEST(SpecConfig, BadConfigsGiveOneLineErrors) {
  const std::map<std::string, std::string> cases = {
      {R"({"method": "ngram", "num_speculative_tokens": 0})",
       "num_speculative_tokens must be in [1, 16], got 0"},
      {R"({"method": "ngram", "num_speculative_tokens": 17})",
       "num_speculative_tokens must be in [1, 16], got 17"},
      {R"({"method": "medusa", "num_speculative_tokens": 2})", "unknown method 'medusa'"},
      {R"({"method": "ngram"})", "num_speculative_tokens is missing"},
      {R"({"num_speculative_tokens": 2})", "'method' is missing"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})",
       "prompt_lookup_min (4) must be <= prompt_lookup_max (2)"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0})",
       "prompt_lookup_min must be >= 1"},
      {R"({"method": "draft_model", "num_speculative_tokens": 2})", "needs \"model\""},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "tree": 1})", "unknown key 'tree'"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0})",
       "disable_by_batch_size must be >= 1, got 0"},
      {R"({"method": "ngram", "num_speculative_tokens": "4"})",
       "num_speculative_tokens must be an integer"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": 1})",
       "adaptive must be true or false, got 1"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": true, "draft_token_cost": 1.5})",
       "draft_token_cost must be in (0, 1), got 1.5"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": true, "draft_token_cost": -0.1})",
       "draft_token_cost must be in (0, 1)"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "draft_token_cost": 0.1})",
       "draft_token_cost applies with \"adaptive\": true only"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "adaptive": true, "draft_token_cost": "x"})",
       "draft_token_cost must be a number"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"method": )", "expected a JSON object"},
  };
  for (const auto& [json, expected] : cases) {
    const std::string message = error_of(json);
    EXPECT_NE(message.find("--speculative-config: "), std::string::npos)
        << json << " -> " << message;
    EXPECT_NE(message.find(expected), std::string::npos) << json << " -> " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(SpecConfig, AcceptedOnCudaRefusedWithPooling) {
  EngineArgs args;
  args.speculative =
      SpeculativeConfig::from_json(R"({"method": "ngram", "num_speculative_tokens": 2})");
  args.validate();
  args.device = "cuda";
  args.validate();  // the CUDA runner verifies drafts too
  args.device = "cpu";
  args.runner = "pooling";
  EXPECT_THROW(args.validate(), Error);
}

TEST(NgramProposer, LongestSuffixLatestOccurrence) {
  using spec::ngram_propose;
  // Suffix "1 2 3" occurs at 0..2 (followed by 9 9) and at 5..7 (followed by 4 5): the latest wins.
  const std::vector<int32_t> t = {1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 7, 1, 2, 3};
  EXPECT_EQ(ngram_propose(t, 1, 3, 2), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ngram_propose(t, 1, 3, 5), (std::vector<int32_t>{4, 5, 7, 1, 2}));
  // A longer match beats a later shorter one: "8 1 2 3" occurs once, early.
  const std::vector<int32_t> u = {8, 1, 2, 3, 6, 6, 2, 3, 5, 5, 8, 1, 2, 3};
  EXPECT_EQ(ngram_propose(u, 1, 4, 2), (std::vector<int32_t>{6, 6}));
  EXPECT_EQ(ngram_propose(u, 1, 2, 2), (std::vector<int32_t>{5, 5}));  // n <= 2: the later "2 3"
  // min_n not reached: nothing.
  EXPECT_TRUE(ngram_propose(u, 5, 6, 2).empty());
  // The match near the end proposes only what follows it.
  const std::vector<int32_t> v = {4, 4, 4};
  EXPECT_EQ(ngram_propose(v, 1, 2, 3), (std::vector<int32_t>{4}));
  EXPECT_TRUE(ngram_propose(std::vector<int32_t>{1}, 1, 2, 3).empty());
  EXPECT_TRUE(ngram_propose(std::vector<int32_t>{1, 2, 3}, 1, 2, 3).empty());
  EXPECT_TRUE(ngram_propose(t, 1, 3, 0).empty());
}

// A seq of one verified token followed by `drafts`, sampled at temperature `temp`.
struct SpecRow {
  SamplingParams params;
  std::vector<int32_t> tokens;
  std::vector<int32_t> prompt = {0};
  engine::ScheduledSeq seq;
  SpecRow(std::vector<int32_t> drafts, float temp, uint64_t seed) {
    params.temperature = temp;
    tokens = {0};
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());
    seq.token_ids = tokens;
    seq.num_spec_tokens = static_cast<int32_t>(drafts.size());
    seq.needs_sample = true;
    seq.params = &params;
    seq.seed = seed;
    seq.prompt_token_ids = prompt;
  }
};

std::vector<double> softmax(const std::vector<float>& x) {
  double m = x[0], z = 0;
  for (float v : x) m = std::max(m, double(v));
  std::vector<double> p;
  for (float v : x) p.push_back(std::exp(v - m)), z += p.back();
  for (double& v : p) v /= z;
  return p;
}

// Pearson chi-square of counts against probabilities; df = nonzero cells - 1.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double stat = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] <= 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double e = probs[i] * n;
    stat += (counts[i] - e) * (counts[i] - e) / e;
  }
  return stat;
}

TEST(RejectionSampler, GreedyAcceptsWhileTheArgmaxAgrees) {
  const std::vector<float> rows = {0, 5, 1, 0,   // argmax 1
                                   0, 0, 9, 0,   // argmax 2
                                   7, 0, 0, 0,   // argmax 0
                                   0, 0, 0, 3};  // bonus: 3
  for (auto [drafts, expected] : std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>{
           {{1, 2, 0}, {1, 2, 0, 3}}, {{1, 3, 0}, {1, 2}}, {{2, 2, 0}, {1}}}) {
    SpecRow r(drafts, 0.0f, 1);
    std::vector<float> logits = rows;
    const spec::VerifyResult v = spec::verify_drafts(logits, r.seq);
    EXPECT_EQ(v.token_ids, expected);
    ASSERT_EQ(v.logprobs.size(), expected.size());
    EXPECT_NEAR(v.logprobs[0].logprob, std::log(softmax({0, 5, 1, 0})[1]), 1e-5);
  }
}

// With draft d fixed and draft law q: out = d with probability min(1, p(d)/q(d)); otherwise out is
// drawn from norm(max(p - q, 0)). Checked over many seeds, and the marginal over d ~ q is p.
TEST(RejectionSampler, OutputsFollowTheTargetAndTheResidual) {
  const std::vector<float> target = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f};  // p = softmax (temperature 1)
  const std::vector<double> p = softmax(target);
  const std::vector<float> q = {0.05f, 0.5f, 0.3f, 0.1f, 0.05f};
  const int n = 20000;
  std::vector<int> marginal(5, 0);
  std::mt19937_64 rng(42);
  std::discrete_distribution<int> draw_q(q.begin(), q.end());
  for (int32_t d : {1, 3}) {
    std::vector<int> counts(5, 0);
    for (int s = 0; s < n; ++s) {
      SpecRow r({d}, 1.0f, static_cast<uint64_t>(s) * 7919 + static_cast<uint64_t>(d));
      r.seq.draft_probs = q;
      std::vector<float> logits = target;
      logits.insert(logits.end(), target.begin(), target.end());  // bonus row
      const spec::VerifyResult v = spec::verify_drafts(logits, r.seq);
      ASSERT_GE(v.token_ids.size(), 1u);
      ++counts[static_cast<size_t>(v.token_ids[0])];
      EXPECT_EQ(v.token_ids.size(), v.token_ids[0] == d ? 2u : 1u)
          << "a bonus token follows an acceptance only";
    }
    // Expected law for this d.
    const double accept = std::min(1.0, p[size_t(d)] / q[size_t(d)]);
    std::vector<double> residual(5);
    double z = 0;
    for (size_t i = 0; i < 5; ++i) z += residual[i] = std::max(0.0, p[i] - q[i]);
    std::vector<double> law(5);
    for (size_t i = 0; i < 5; ++i)
      law[i] = (1 - accept) * residual[i] / z + (int(i) == d ? accept : 0.0);
    // 4 degrees of freedom at most: 18.47 is the 0.999 quantile. Deterministic seeds: no flakes.
    EXPECT_LT(chi_square(counts, law, n), 18.47) << "draft " << d;
  }
  for (int s = 0; s < n; ++s) {
    const int32_t d = draw_q(rng);
    SpecRow r({d}, 1.0f, 1000003ULL * static_cast<uint64_t>(s));
    r.seq.draft_probs = q;
    std::vector<float> logits = target;
    logits.insert(logits.end(), target.begin(), target.end());
    ++marginal[static_cast<size_t>(spec::verify_drafts(logits, r.seq).token_ids[0])];
  }
  EXPECT_LT(chi_square(marginal, p, n), 18.47);
}

// n-gram drafts are point masses: the first output is p-distributed whatever the draft.
TEST(RejectionSampler, PointMassDraftsKeepTheTargetLaw) {
  const std::vector<float> target = {0.5f, 1.5f, -1.0f, 0.0f};
  const std::vector<double> p = softmax(target);
  const int n = 20000;
  std::vector<int> counts(4, 0);
  for (int s = 0; s < n; ++s) {
    SpecRow r({1, 1}, 1.0f, static_cast<uint64_t>(s));
    std::vector<float> logits;
    for (int j = 0; j < 3; ++j) logits.insert(logits.end(), target.begin(), target.end());
    const spec::VerifyResult v = spec::verify_drafts(logits, r.seq);
    ++counts[static_cast<size_t>(v.token_ids[0])];
  }
  EXPECT_LT(chi_square(counts, p, n), 16.27);  // 3 degrees of freedom, 0.999 quantile
}

TEST(RejectionSampler, MalformedRowsAreInternalErrors) {
  SpecRow r({1, 2}, 0.0f, 1);
  std::vector<float> logits(7, 0.0f);  // not 3 rows
  EXPECT_THROW(spec::verify_drafts(logits, r.seq), Error);
  SpecRow bad({9}, 0.0f, 1);  // draft outside a 4-token vocabulary
  std::vector<float> two_rows(8, 0.0f);
  EXPECT_THROW(spec::verify_drafts(two_rows, bad.seq), Error);
}

TEST(SamplingProbs, MatchesTheSamplersTruncation) {
  SamplingParams params;
  params.temperature = 0.5f;
  params.top_k = 2;
  engine::ScheduledSeq seq;
  seq.params = &params;
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  std::vector<float> probs(4);
  engine::sampling_probs(logits, seq, probs);
  const double a = std::exp(3.0 / 0.5), b = std::exp(2.0 / 0.5);
  EXPECT_NEAR(probs[1], a / (a + b), 1e-6);
  EXPECT_NEAR(probs[2], b / (a + b), 1e-6);
  EXPECT_EQ(probs[0], 0.0f);
  EXPECT_EQ(probs[3], 0.0f);
  params.temperature = 0.0f;
  logits = {1.0f, 3.0f, 2.0f, 0.0f};
  engine::sampling_probs(logits, seq, probs);
  EXPECT_EQ(probs, (std::vector<float>{0, 1, 0, 0}));
}

TEST(SpecMetrics, CountersUnderVllmNamesAndSummedOverReplicas) {
  EngineStats a;
  a.spec_num_drafts = 10;
  a.spec_num_draft_tokens = 40;
  a.spec_num_accepted_tokens = 25;
  a.spec_accepted_per_pos = {9, 7, 5, 4};
  EngineStats b;
  b.spec_num_drafts = 1;
  b.spec_num_draft_tokens = 2;
  b.spec_num_accepted_tokens = 1;
  b.spec_accepted_per_pos = {1};
  const EngineStats sum = engine::sum_stats({a, b});
  EXPECT_EQ(sum.spec_num_drafts, 11u);
  EXPECT_EQ(sum.spec_num_accepted_tokens, 26u);
  EXPECT_EQ(sum.spec_accepted_per_pos, (std::vector<uint64_t>{10, 7, 5, 4}));
  server::Metrics m("x");
  m.set_engine_stats(a);
  const std::string text = m.render(0, 0);
  const std::string L = "{model_name=\"x\"}";
  for (const std::string& line : {"vllm:spec_decode_num_drafts_total" + L + " 10\n",
                                  "vllm:spec_decode_num_draft_tokens_total" + L + " 40\n",
                                  "vllm:spec_decode_num_accepted_tokens_total" + L + " 25\n",
                                  std::string("vllm:spec_decode_num_accepted_tokens_per_pos_total{"
                                              "model_name=\"x\",position=\"0\"} 9\n"),
                                  std::string("vllm:spec_decode_num_accepted_tokens_per_pos_total{"
                                              "model_name=\"x\",position=\"3\"} 4\n"),
                                  std::string("# TYPE vllm:spec_decode_num_drafts_total counter\n"),
                                  "pagellm:spec_decode_num_accepted_tokens_total" + L + " 25\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line;
  const std::string logged = engine::StatsLogger::format(EngineStats{}, a, 1.0);
  EXPECT_NE(logged.find("acceptance rate 62.5%, mean acceptance length 3.50"), std::string::npos)
      << logged;
}

}  // namespace
}  // namespace pagellm
