// Speculative decoding end to end on the CPU backend: greedy output identical with and without
// speculation (draft model and n-gram, batched, under preemption, with prefix caching, with stop
// strings and logprobs), the sampled distribution unchanged (two-sample chi-square over many seeds
// at fixed positions; fixed seeds, so the outcome is deterministic), counters, and bad drafts.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/engine_core.h"
#include "model_files_util.h"
#include "sanitized.h"
#include "spec/draft_cost.h"
#include "spec/draft_proposer.h"
#include "spec_test_util.h"

namespace pagellm {
namespace {

using namespace spec_test;

TEST(SpecDecode, DraftModelGreedyEqualsPlainBatched) {
  const auto prompts = code_prompts();
  const std::vector<SamplingParams> params(prompts.size(), greedy(64));
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  EngineArgs a = base_args(kPycode);
  a.speculative = draft(4);
  const SpecRun spec = generate(a, prompts, params);
  expect_same_outputs(plain, spec);
  expect_consistent_counters(spec.stats, 4);
  EXPECT_EQ(plain.stats.spec_num_drafts, 0u);
}

TEST(SpecDecode, NgramGreedyEqualsPlainOnPycodeAndStories) {
  {
    const auto prompts = code_prompts();
    const std::vector<SamplingParams> params(prompts.size(), greedy(80));
    const SpecRun plain = generate(base_args(kPycode), prompts, params);
    EngineArgs a = base_args(kPycode);
    a.speculative = ngram(4, 2, 4);
    const SpecRun spec = generate(a, prompts, params);
    expect_same_outputs(plain, spec);
    expect_consistent_counters(spec.stats, 4);
  }
  const auto prompts = story_prompts(24);
  const std::vector<SamplingParams> params(prompts.size(), greedy(64));
  const SpecRun plain = generate(base_args(kStories), prompts, params);
  EngineArgs a = base_args(kStories);
  a.speculative = ngram(3, 1, 3);
  const SpecRun spec = generate(a, prompts, params);
  expect_same_outputs(plain, spec);
  expect_consistent_counters(spec.stats, 3);
}

TEST(SpecDecode, PreemptionKeepsOutputsIdentical) {
  const auto prompts = code_prompts();
  // Sanitizer builds: half the tokens (sanitized.h); 8 sequences of ~50 still overflow the pool.
  const std::vector<SamplingParams> params(prompts.size(), greedy(testing::kSanitized ? 32 : 64));
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  for (const SpeculativeConfig& sc : {draft(3), ngram(4, 1, 3)}) {
    EngineArgs a = base_args(kPycode);
    a.speculative = sc;
    a.num_kv_blocks = 14;  // 224 token slots for 8 sequences of ~80 tokens
    a.max_num_batched_tokens = 128;
    const SpecRun spec = generate(a, prompts, params);
    expect_same_outputs(plain, spec);
    EXPECT_GT(spec.stats.num_preemptions, 0u)
        << sc.method << ": the pool was meant to be too small";
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0u) << sc.method;
  }
}

TEST(SpecDecode, PrefixCachingAndChunkedPrefillKeepOutputsIdentical) {
  // A long shared prefix, chunked over several steps, then cached for the later prompts.
  std::string prefix;
  for (int i = 0; i < 12; ++i)
    prefix += "def f" + std::to_string(i) + "(x):\n    return x + " + std::to_string(i) + "\n\n";
  std::vector<PromptInput> prompts;
  for (const PromptInput& p : code_prompts())
    prompts.push_back(PromptInput::from_text(prefix + p.text));
  const std::vector<SamplingParams> params(prompts.size(),
                                           greedy(testing::kSanitized ? 24 : 48));  // sanitized.h
  EngineArgs plain_args = base_args(kPycode);
  plain_args.enable_prefix_caching = false;
  const SpecRun plain = generate(plain_args, prompts, params);
  for (const SpeculativeConfig& sc : {draft(4), ngram(4, 2, 5)}) {
    EngineArgs a = base_args(kPycode);
    a.speculative = sc;
    a.max_num_batched_tokens = 96;  // the prompts prefill in chunks
    LLM llm(a);
    const std::vector<SamplingParams> one(1, params[0]);
    llm.generate({prompts[0]}, one);  // fills the cache with the prefix
    SpecRun spec;
    spec.outputs = llm.generate(prompts, params);
    spec.stats = llm.engine().take_stats();
    SpecRun again;
    again.outputs = llm.generate(prompts, params);  // whole prompts and outputs hit the cache now
    again.stats = llm.engine().take_stats();
    expect_same_outputs(plain, spec, false);
    expect_same_outputs(plain, again, false);
    EXPECT_GT(again.stats.prefix_cache_hits, 0u);
    for (const RequestOutput& o : spec.outputs) EXPECT_GT(o.num_cached_tokens, 0) << sc.method;
  }
}

TEST(SpecDecode, StopStringsMaxTokensMinTokensPenaltiesAndLogprobs) {
  const auto prompts = code_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(static_cast<int>(5 + 9 * i));  // max_tokens from 5 to 68
    p.logprobs = 2;
    if (i % 2 == 0) p.stop = {"\n\n", "return"};
    if (i % 3 == 0) p.stop_token_ids = {13};  // "\n" in the Llama-2 vocabulary
    if (i == 5) p.min_tokens = 20, p.stop_token_ids = {13};
    if (i == 6) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.4f, p.presence_penalty = 0.2f;
    params.push_back(p);
  }
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  for (const SpeculativeConfig& sc : {draft(5), ngram(3, 1, 4)}) {
    EngineArgs a = base_args(kPycode);
    a.speculative = sc;
    const SpecRun spec = generate(a, prompts, params);
    expect_same_outputs(plain, spec);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_LE(spec.outputs[i].outputs[0].token_ids.size(),
                static_cast<size_t>(params[i].max_tokens));
  }
}

TEST(SpecDecode, PreemptionBySwapKeepsOutputsIdentical) {
  const auto prompts = code_prompts();
  const std::vector<SamplingParams> params(prompts.size(), greedy(64));
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  EngineArgs a = base_args(kPycode);
  a.speculative = draft(4);
  a.num_kv_blocks = 14;
  a.max_num_batched_tokens = 128;
  a.enable_prefix_caching = false;
  a.swap_space_gib = 0.05;  // ~400 host blocks of pycode-25M's 128 KiB
  const SpecRun spec = generate(a, prompts, params);
  expect_same_outputs(plain, spec);
  EXPECT_GT(spec.stats.num_preemptions, 0u);
}

// Seeded sampling with speculation is reproducible and batch-invariant, n > 1 included: a request's
// drafts and their verification depend only on the request.
TEST(SpecDecode, SeededSamplesAreReproducibleAndBatchInvariant) {
  for (const SpeculativeConfig& sc : {draft(3), ngram(3, 1, 3)}) {
    EngineArgs a = base_args(kPycode);
    a.speculative = sc;
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_p = 0.95f;
    p.max_tokens = 40;
    p.n = 3;
    p.seed = 77;
    const PromptInput prompt = PromptInput::from_text("def parse_args(argv):\n");
    LLM llm(a);
    const RequestOutput alone = llm.generate({prompt}, p)[0];
    ASSERT_EQ(alone.outputs.size(), 3u);
    EXPECT_NE(alone.outputs[0].token_ids, alone.outputs[1].token_ids);
    std::vector<PromptInput> prompts = code_prompts();
    std::vector<SamplingParams> params(prompts.size(), greedy(30));
    prompts[3] = prompt;
    params[3] = p;
    const auto batched = llm.generate(prompts, params);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(batched[3].outputs.at(i).token_ids, alone.outputs[i].token_ids)
          << sc.method << " sample " << i;
    }
    EXPECT_GT(llm.engine().take_stats().spec_num_accepted_tokens, 0u);
  }
}

// A model drafting for itself proposes exactly the target's tokens (greedy) and exactly its
// distribution (sampled: q == p, so every draft passes u < p/q): every draft must be accepted. Any
// slip in the draft's KV bookkeeping (positions, rollback, catch-up after a bonus token) shows up
// here.
TEST(SpecDecode, SelfDraftingAcceptsEveryDraft) {
  SpeculativeConfig sc = draft(4);
  EngineArgs a = base_args(kDraft);
  a.speculative = sc;
  const auto prompts = code_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(60);
    p.ignore_eos = true;
    if (i % 2 == 1) p.temperature = 1.0f, p.seed = i;
    params.push_back(p);
  }
  const SpecRun spec = generate(a, prompts, params);
  expect_consistent_counters(spec.stats, 4);
  EXPECT_EQ(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
  for (const RequestOutput& o : spec.outputs) EXPECT_EQ(o.outputs[0].token_ids.size(), 60u);
}

// All greedy: each round's drafts come from one greedy chain (ModelRunner::execute_greedy_chain),
// with fewer drafts for seqs near their max_tokens. Self-drafting still accepts every draft, and
// the text is the one without speculation.
TEST(SpecDecode, GreedyChainsAcceptEveryDraftWhenSelfDrafting) {
  EngineArgs a = base_args(kDraft);
  a.speculative = draft(4);
  const auto prompts = code_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(int(21 + 2 * i));  // rounds of 5 tokens end short of max_tokens
    p.ignore_eos = true;
    params.push_back(p);
  }
  const SpecRun spec = generate(a, prompts, params);
  expect_consistent_counters(spec.stats, 4);
  EXPECT_EQ(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
  expect_same_outputs(generate(base_args(kDraft), prompts, params), spec);
}

// The draft's own prefill goes in pieces of at most --max-num-batched-tokens (a GPU runner's step
// limit): pieces that split a prompt, and batches that mix pieces of several prompts, must leave
// the draft's KV exactly as one piece would, so a self-drafting model still accepts every draft.
TEST(SpecDecode, PiecewiseDraftPrefillAcceptsEveryDraftWhenSelfDrafting) {
  EngineArgs a = base_args(kDraft);
  a.speculative = draft(3);
  a.max_num_batched_tokens = 7;  // every prompt is longer: the draft's prefill is cut
  const auto prompts = code_prompts();
  SamplingParams p = greedy(24);
  p.ignore_eos = true;
  const SpecRun spec = generate(a, prompts, std::vector<SamplingParams>(prompts.size(), p));
  expect_consistent_counters(spec.stats, 3);
  EXPECT_EQ(spec.stats.spec_num_accepted_tokens, spec.stats.spec_num_draft_tokens);
  EngineArgs plain_args = base_args(kDraft);
  plain_args.max_num_batched_tokens = 7;
  expect_same_outputs(generate(plain_args, prompts, std::vector<SamplingParams>(prompts.size(), p)),
                      spec);
}

// The adaptive switch: no drafts while more than disable_by_batch_size sequences decode. Prompts
// with different lengths finish one by one, so only the last two decode with drafts; the output
// is the same either way.
TEST(SpecDecode, LargeBatchesDecodeWithoutDrafts) {
  const auto prompts = code_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(8 + 8 * static_cast<int>(i));
    p.ignore_eos = true;
    params.push_back(p);
  }
  EngineArgs a = base_args(kPycode);
  a.speculative = ngram(3, 1, 3);
  const SpecRun all = generate(a, prompts, params);
  a.speculative.disable_by_batch_size = 2;
  const SpecRun tail = generate(a, prompts, params);
  expect_same_outputs(generate(base_args(kPycode), prompts, params), tail);
  EXPECT_GT(tail.stats.spec_num_drafts, 0u);
  EXPECT_LT(tail.stats.spec_num_drafts, all.stats.spec_num_drafts);
  // Default: at most 256 / (1 + k) sequences speculate.
  EXPECT_EQ(ngram(3, 1, 3).max_speculating_seqs(), 64);
  EXPECT_EQ(ngram(16, 1, 3).max_speculating_seqs(), 15);
}

// Acceptance-adaptive k: the output stays the plain one, and the dearer a draft against the
// measured acceptance, the fewer tokens a drafting sequence proposes per round.
TEST(SpecDecode, AdaptiveKDraftsWhatAcceptancePaysFor) {
  const auto prompts = code_prompts();
  const std::vector<SamplingParams> params(prompts.size(), greedy(80));
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  EngineArgs a = base_args(kPycode);
  a.speculative = ngram(4, 2, 4);
  const SpecRun fixed = generate(a, prompts, params);
  a.speculative.adaptive = true;
  a.speculative.draft_token_cost = 0.6;
  const SpecRun dear = generate(a, prompts, params);
  expect_same_outputs(plain, dear);
  expect_consistent_counters(dear.stats, 4);
  const auto per_round = [](const EngineStats& s) {
    return static_cast<double>(s.spec_num_draft_tokens) / static_cast<double>(s.spec_num_drafts);
  };
  EXPECT_LT(per_round(dear.stats), per_round(fixed.stats));
  a.speculative.draft_token_cost = 0.001;  // cheap drafts: as many as the n-gram offers
  const SpecRun cheap = generate(a, prompts, params);
  expect_same_outputs(plain, cheap);
  EXPECT_GT(per_round(cheap.stats), per_round(dear.stats));
}

// Adaptive k measures what a draft costs: a draft model's proposals a sizeable share of a target
// step, n-gram lookups next to nothing beyond the verification share; a configured
// draft_token_cost stands as given. The outputs stay the target's.
TEST(SpecDecode, AdaptiveKMeasuresWhatADraftCosts) {
  const auto prompts = code_prompts();
  const std::vector<SamplingParams> params(prompts.size(), greedy(48));
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  EngineArgs a = base_args(kPycode);
  a.speculative = draft(3);
  a.speculative.adaptive = true;
  const SpecRun model = generate(a, prompts, params);
  expect_same_outputs(plain, model);
  // Measured, not the default (which an exact match would mean), and within its bounds.
  EXPECT_NE(model.stats.spec_draft_cost, SpeculativeConfig::kModelDraftCost);
  EXPECT_GT(model.stats.spec_draft_cost, 2 * SpeculativeConfig::kNgramDraftCost);
  EXPECT_LE(model.stats.spec_draft_cost, spec::DraftCostMeter::kMaxCost);
  a.speculative = ngram(4, 2, 4);
  a.speculative.adaptive = true;
  const SpecRun lookup = generate(a, prompts, params);
  expect_same_outputs(plain, lookup);
  EXPECT_NE(lookup.stats.spec_draft_cost, SpeculativeConfig::kNgramDraftCost);
  EXPECT_LT(lookup.stats.spec_draft_cost, model.stats.spec_draft_cost);
  a.speculative.draft_token_cost = 0.3;
  EXPECT_DOUBLE_EQ(generate(a, prompts, params).stats.spec_draft_cost, 0.3);
  a.speculative.adaptive = false;
  a.speculative.draft_token_cost = 0;
  EXPECT_EQ(generate(a, prompts, params).stats.spec_draft_cost, 0.0);
}

// The draft's KV follows its sequences: held while they run (also through preemption), freed when
// they finish or are aborted.
TEST(SpecDecode, DraftKvIsReleasedWithItsSequences) {
  EngineArgs a = base_args(kPycode);
  a.speculative = draft(3);
  a.num_kv_blocks = 16;
  EngineCore core(a);
  auto* proposer = dynamic_cast<spec::DraftModelProposer*>(core.proposer());
  ASSERT_NE(proposer, nullptr);
  const auto prompts = code_prompts();
  for (size_t i = 0; i < prompts.size(); ++i)
    core.add_request(std::to_string(i), prompts[i], greedy(48), {}, false);
  int max_tracked = 0;
  for (int step = 0; step < 10000 && core.has_unfinished(); ++step) {
    core.step();
    max_tracked = std::max(max_tracked, proposer->num_tracked());
    if (step == 6) {
      EXPECT_TRUE(core.abort_request("2"));
    }
  }
  EXPECT_GT(max_tracked, 1);
  EXPECT_EQ(proposer->num_tracked(), 0);
  EXPECT_EQ(proposer->kv().num_seqs(), 0);
  EXPECT_EQ(proposer->kv().num_free_blocks(), proposer->kv().num_blocks());
  EXPECT_EQ(core.kv_cache().num_free_blocks(), core.kv_cache().num_blocks());
  EXPECT_GT(core.counters().num_preemptions, 0u);
}

TEST(SpecDecodeDistribution, NgramOnStoriesKeepsTheSampledLaw) {
  expect_same_distribution(
      kStories, ngram(3, 1, 2),
      "Lily saw a big tree. Lily saw a big dog. Lily saw a big tree. Lily saw a",
      at_temperature(1.0f), 3000, 8);
}

// The draft-model laws run pycode-25M twice per seed: minutes at the sanitizer build's -O0, so that
// build checks the draft path's memory through the greedy tests above and the n-gram laws here, and
// the Release run checks these laws in full.
TEST(SpecDecodeDistribution, DraftModelOnPycodeKeepsTheSampledLaw) {
  if (testing::kSanitized) GTEST_SKIP() << "statistical law checked by the Release run (see above)";
  expect_same_distribution(kPycode, draft(3), "def parse_args(argv):\n", at_temperature(0.8f), 400,
                           6);
}

// Truncation and penalties change p (and the draft's q): the law must still hold.
TEST(SpecDecodeDistribution, TopPTopKAndPenaltiesKeepTheSampledLaw) {
  SamplingParams p = at_temperature(1.0f);
  p.top_p = 0.9f;
  p.top_k = 40;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.3f;
  expect_same_distribution(
      kStories, ngram(3, 1, 2),
      "Lily saw a big tree. Lily saw a big dog. Lily saw a big tree. Lily saw a", p, 3000, 8);
  if (testing::kSanitized) return;  // as DraftModelOnPycodeKeepsTheSampledLaw
  expect_same_distribution(kPycode, draft(3), "class Config:\n    def __init__(self, path):\n", p,
                           400, 6);
}

TEST(SpecDecode, DraftWithAnotherVocabularyOrTokenizerIsRefused) {
  SpeculativeConfig sc = draft(2);
  sc.model = kStories;
  std::string message = load_error(sc);
  EXPECT_NE(message.find("has vocab_size 512 but the target has 32000"), std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  // The draft's own config and a tokenizer.json with the ids of two tokens swapped.
  testing::TempDir dir;
  std::filesystem::copy_file(kDraft + "/config.json", dir.path() / "config.json");
  nlohmann::json tok = nlohmann::json::parse(std::ifstream(kDraft + "/tokenizer.json"));
  auto& vocab = tok["model"]["vocab"];
  std::string first, second;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (it.value() == 1000) first = it.key();
    if (it.value() == 1001) second = it.key();
  }
  ASSERT_FALSE(first.empty() || second.empty());
  vocab[first] = 1001;
  vocab[second] = 1000;
  std::ofstream(dir.path() / "tokenizer.json") << tok.dump();
  sc.model = dir.path().string();
  message = load_error(sc);
  EXPECT_NE(message.find("has a different tokenizer than the target (token id 1000"),
            std::string::npos)
      << message;
  sc.model = (dir.path() / "missing").string();
  EXPECT_NE(load_error(sc).find("has no config.json"), std::string::npos);
}

}  // namespace
}  // namespace pagellm
