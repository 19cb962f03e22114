// EAGLE speculation on the CPU backend, with the head tools/train_eagle.py trained for pycode-25M
// (tests/data/pycode-25M-eagle): greedy output identical to no speculation (batched, chunked,
// with prefix caching, under preemption by recomputation and by swapping, with stop strings,
// penalties and logprobs), the drafts good enough to be accepted (a broken feature alignment
// would not be), the sampled law unchanged, the head's state released with its sequences, and bad
// heads refused.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model_files_util.h"
#include "runner/model_loader.h"
#include "sanitized.h"
#include "spec/eagle_proposer.h"
#include "spec_test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

using namespace spec_test;

double mean_acceptance_length(const EngineStats& s) {
  return 1.0 +
         double(s.spec_num_accepted_tokens) / double(std::max<uint64_t>(1, s.spec_num_drafts));
}

TEST(SpecEagle, GreedyEqualsPlainBatchedAndDraftsAreAccepted) {
  const auto prompts = code_prompts();
  const std::vector<SamplingParams> params(prompts.size(), greedy(64));
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  EngineArgs a = base_args(kPycode);
  a.speculative = eagle(4);
  const SpecRun spec = generate(a, prompts, params);
  expect_same_outputs(plain, spec);
  expect_consistent_counters(spec.stats, 4);
  // The trained head agrees with the target on ~73% of held-out positions (train.log): chains of
  // drafts pass. Zeros or shifted features would leave little more than the first draft.
  EXPECT_GE(mean_acceptance_length(spec.stats), 2.5)
      << spec.stats.spec_num_accepted_tokens << " accepted in " << spec.stats.spec_num_drafts;
}

TEST(SpecEagle, ChunkedPrefillPrefixCachingAndPreemptionKeepOutputsIdentical) {
  std::string prefix;
  for (int i = 0; i < 10; ++i)
    prefix += "def f" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i) + "\n\n";
  std::vector<PromptInput> prompts;
  for (const PromptInput& p : code_prompts())
    prompts.push_back(PromptInput::from_text(prefix + p.text));
  // Sanitizer builds: half the tokens (sanitized.h); the pool below stays too small either way.
  const std::vector<SamplingParams> params(prompts.size(), greedy(testing::kSanitized ? 24 : 48));
  EngineArgs plain_args = base_args(kPycode);
  plain_args.enable_prefix_caching = false;
  const SpecRun plain = generate(plain_args, prompts, params);
  {
    EngineArgs a = base_args(kPycode);
    a.speculative = eagle(3);
    a.max_num_batched_tokens = 64;  // the prompts prefill in chunks
    LLM llm(a);
    llm.generate({prompts[0]}, std::vector<SamplingParams>(1, params[0]));  // caches the prefix
    SpecRun spec;
    spec.outputs = llm.generate(prompts, params);  // the prefix's features never reach the head
    spec.stats = llm.engine().take_stats();
    expect_same_outputs(plain, spec, false);
    EXPECT_GT(spec.stats.prefix_cache_hits, 0u);
    EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0u);
  }
  for (double swap_gib : {0.0, 0.05}) {
    EngineArgs a = base_args(kPycode);
    a.speculative = eagle(4);
    a.num_kv_blocks = 24;  // 384 token slots for 8 sequences of ~160 tokens
    a.max_num_batched_tokens = 128;
    a.enable_prefix_caching = false;
    a.swap_space_gib = swap_gib;
    const SpecRun spec = generate(a, prompts, params);
    expect_same_outputs(plain, spec);
    EXPECT_GT(spec.stats.num_preemptions, 0u) << "the pool was meant to be too small";
    EXPECT_GE(mean_acceptance_length(spec.stats), 2.0);
  }
}

TEST(SpecEagle, StopStringsPenaltiesAndLogprobsKeepOutputsIdentical) {
  const auto prompts = code_prompts();
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(static_cast<int>(5 + 9 * i));
    p.logprobs = 2;
    if (i % 2 == 0) p.stop = {"\n\n", "return"};
    if (i % 3 == 0) p.stop_token_ids = {13};
    if (i == 5) p.min_tokens = 20, p.stop_token_ids = {13};
    if (i == 6) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.4f, p.presence_penalty = 0.2f;
    params.push_back(p);
  }
  const SpecRun plain = generate(base_args(kPycode), prompts, params);
  EngineArgs a = base_args(kPycode);
  a.speculative = eagle(5);
  expect_same_outputs(plain, generate(a, prompts, params));
}

TEST(SpecEagle, SeededSamplesAreReproducibleAndBatchInvariant) {
  EngineArgs a = base_args(kPycode);
  a.speculative = eagle(3);
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
  std::vector<PromptInput> prompts = code_prompts();
  std::vector<SamplingParams> params(prompts.size(), greedy(30));
  prompts[3] = prompt;
  params[3] = p;
  const auto batched = llm.generate(prompts, params);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(batched[3].outputs.at(i).token_ids, alone.outputs[i].token_ids) << "sample " << i;
  EXPECT_GT(llm.engine().take_stats().spec_num_accepted_tokens, 0u);
}

TEST(SpecEagleDistribution, SampledLawIsKept) {
  if (testing::kSanitized) GTEST_SKIP() << "statistical law checked by the Release run";
  expect_same_distribution(kPycode, eagle(3), "def parse_args(argv):\n", at_temperature(0.8f), 400,
                           6);
  SamplingParams p = at_temperature(1.0f);
  p.top_p = 0.9f;
  p.top_k = 40;
  p.repetition_penalty = 1.2f;
  expect_same_distribution(kPycode, eagle(3), "class Config:\n    def __init__(self, path):\n", p,
                           400, 6);
}

// The head's features and KV follow their sequences and are bounded while they run.
TEST(SpecEagle, HeadStateIsReleasedWithItsSequences) {
  EngineArgs a = base_args(kPycode);
  a.speculative = eagle(3);
  EngineCore core(a);
  auto* proposer = dynamic_cast<spec::EagleProposer*>(core.proposer());
  ASSERT_NE(proposer, nullptr);
  const auto prompts = code_prompts();
  for (size_t i = 0; i < prompts.size(); ++i)
    core.add_request(std::to_string(i), prompts[i], greedy(40), {}, false);
  // Bad words keep a sequence from speculating: nothing may pile up for it (60 tokens).
  SamplingParams banned = greedy(60);
  banned.bad_words = {" foo"};
  core.add_request("banned", prompts[0], banned, {}, false);
  int max_tracked = 0, max_held = 0;
  for (int step = 0; step < 10000 && core.has_unfinished(); ++step) {
    core.step();
    max_tracked = std::max(max_tracked, proposer->num_tracked());
    for (int i = 0; i < 32; ++i) max_held = std::max(max_held, proposer->num_held_features(i));
    if (step == 5) {
      EXPECT_TRUE(core.abort_request("2"));
    }
  }
  EXPECT_GT(max_tracked, 1);
  // Fed features are dropped each round: at most a prompt's worth, or one round's, is ever held.
  EXPECT_GT(max_held, 0);
  EXPECT_LE(max_held, 40);
  EXPECT_EQ(proposer->num_tracked(), 0);
}

// The other layouts of published EAGLE heads: tensors under "model.", an fc bias, more than one
// layer (the later ones with their input norm), a copy of the embedding, the architecture named
// after EAGLE. Untrained numbers: the drafts are poor, the output must still be the target's.
TEST(SpecEagle, HeadLayoutsWithPrefixBiasAndSeveralLayersLoad) {
  testing::TempDir dir;
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kEagle + "/config.json"));
  config["num_hidden_layers"] = 2;
  config["architectures"] = {"EagleLlamaForCausalLM"};
  testing::write_file(dir.path() / "config.json", config.dump());
  testing::SafetensorsBuilder b;
  b.add_f32("fc.weight", {384, 768}, 0.004f);
  b.add_f32("fc.bias", {384}, 0.001f);
  b.add_f32("model.embed_tokens.weight", {32000, 384});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (l > 0) b.add_f32_values(p + "input_layernorm.weight", {384}, std::vector<float>(384, 1.f));
    b.add_f32(p + "self_attn.q_proj.weight", {384, 384});
    b.add_f32(p + "self_attn.k_proj.weight", {128, 384});
    b.add_f32(p + "self_attn.v_proj.weight", {128, 384});
    b.add_f32(p + "self_attn.o_proj.weight", {384, 384});
    b.add_f32_values(p + "post_attention_layernorm.weight", {384}, std::vector<float>(384, 1.f));
    b.add_f32(p + "mlp.gate_proj.weight", {1024, 384});
    b.add_f32(p + "mlp.up_proj.weight", {1024, 384});
    b.add_f32(p + "mlp.down_proj.weight", {384, 1024});
  }
  testing::write_file(dir.path() / "model.safetensors", b.bytes());
  const auto prompts = code_prompts();
  const std::vector<SamplingParams> params(3, greedy(24));
  const std::vector<PromptInput> three(prompts.begin(), prompts.begin() + 3);
  EngineArgs a = base_args(kPycode);
  a.speculative = eagle(2);
  a.speculative.model = dir.path().string();
  const SpecRun spec = generate(a, three, params);
  expect_same_outputs(generate(base_args(kPycode), three, params), spec);
  EXPECT_GT(spec.stats.spec_num_draft_tokens, 0u);
}

// A CPU runner that answers like the CUDA runners: sampled seqs' drafts are not worth verifying.
class HostVerifyingRunner : public runner::ModelRunner {
 public:
  explicit HostVerifyingRunner(std::unique_ptr<runner::ModelRunner> inner)
      : inner_(std::move(inner)) {}
  int num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int block_size() const override { return inner_->block_size(); }
  const io::ModelConfig& config() const override { return inner_->config(); }
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override {
    return inner_->execute(batch);
  }
  void set_return_hidden() override { inner_->set_return_hidden(); }
  bool verifies_sampled_drafts() const override { return false; }

 private:
  std::unique_ptr<runner::ModelRunner> inner_;
};

// There, sampled requests decode without drafts and hand the proposer no hidden states; greedy
// ones still speculate.
TEST(SpecEagle, SampledRequestsDecodeWithoutDraftsWhereVerifyingThemIsSlow) {
  EngineArgs a = base_args(kPycode);
  a.speculative = eagle(3);
  runner::LoadedModel m = runner::load_model(a);
  EngineCore core(a, std::make_unique<HostVerifyingRunner>(std::move(m.runner)),
                  tok::Tokenizer::from_dir(kPycode), m.generation_config, m.name);
  auto* proposer = dynamic_cast<spec::EagleProposer*>(core.proposer());
  ASSERT_NE(proposer, nullptr);
  const auto prompts = code_prompts();
  SamplingParams sampled = at_temperature(0.8f);
  sampled.max_tokens = 24;
  sampled.seed = 3;
  core.add_request("sampled", prompts[0], sampled, {}, false);
  int max_held = 0;
  while (core.has_unfinished()) {
    core.step();
    for (int i = 0; i < 8; ++i) max_held = std::max(max_held, proposer->num_held_features(i));
  }
  EXPECT_EQ(core.take_stats().spec_num_drafts, 0u);
  EXPECT_EQ(max_held, 0);
  core.add_request("greedy", prompts[1], greedy(24), {}, false);
  while (core.has_unfinished()) core.step();
  EXPECT_GT(core.take_stats().spec_num_drafts, 0u);
}

std::string eagle_error(const std::string& head) {
  SpeculativeConfig sc = eagle(2);
  sc.model = head;
  return load_error(sc);
}

TEST(SpecEagle, BadHeadsAreRefused) {
  // A model that is no EAGLE head; another target's head; an EAGLE-3 head; no folder.
  std::string message = eagle_error(kDraft);
  EXPECT_NE(message.find("has no tensor fc.weight: not an EAGLE head"), std::string::npos)
      << message;
  testing::TempDir dir;
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kEagle + "/config.json"));
  config["hidden_size"] = 256;
  std::ofstream(dir.path() / "config.json") << config.dump();
  std::filesystem::copy_file(kEagle + "/model.safetensors", dir.path() / "model.safetensors");
  message = eagle_error(dir.path().string());
  EXPECT_NE(message.find("has hidden_size 256 but the target has 384"), std::string::npos)
      << message;
  config["hidden_size"] = 384;
  config["intermediate_size"] = 2048;  // the checkpoint's MLP is 1024 wide
  std::ofstream(dir.path() / "config.json") << config.dump();
  message = eagle_error(dir.path().string());
  EXPECT_NE(message.find("layers.0.mlp.gate_proj.weight' has shape [1024, 384] but config.json "
                         "implies [2048, 384]"),
            std::string::npos)
      << message;
  config["intermediate_size"] = 1024;
  config["architectures"] = {"LlamaForCausalLMEagle3"};
  std::ofstream(dir.path() / "config.json") << config.dump();
  message = eagle_error(dir.path().string());
  EXPECT_NE(message.find("is an EAGLE-3 head"), std::string::npos) << message;
  EXPECT_NE(eagle_error((dir.path() / "missing").string()).find("has no config.json"),
            std::string::npos);
  for (const std::string& m : {message, eagle_error(kDraft)})
    EXPECT_EQ(m.find('\n'), std::string::npos);
  SpeculativeConfig sc = eagle(2);
  sc.model.clear();
  EXPECT_NE(load_error(sc).find("method eagle needs \"model\""), std::string::npos);
  EXPECT_NE(std::string(load_error(SpeculativeConfig::from_json(
                            R"({"method": "eagle", "model": "x", "num_speculative_tokens": 2})")))
                .find("has no config.json"),
            std::string::npos);
  try {
    SpeculativeConfig::from_json(
        R"({"method": "eagle3", "model": "x", "num_speculative_tokens": 2})");
    ADD_FAILURE() << "eagle3 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("eagle3 is not available yet"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagellm
