// The Llama forward pass end to end on real and random weights: stories260K must reproduce
// llama2.c's published greedy sample, and chunked prefill / batching must not change a sequence's
// logits.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cpu_test_util.h"
#include "models/llama.h"
#include "runner/model_loader.h"

namespace pagellm {
namespace {

using testing::make_batch;
using testing::TestSeq;

const std::filesystem::path kStories =
    std::filesystem::path(PAGELLM_SHARED_DIR) / "models/stories260K";

std::string published_sample() {
  std::ifstream in(kStories / "README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const auto begin = readme.find("```\nOnce upon a time");
  const auto end = readme.find("\n```", begin + 4);
  if (begin == std::string::npos || end == std::string::npos) return "";
  return readme.substr(begin + 4, end - begin - 4);
}

runner::LoadedModel load_stories() {
  EngineArgs args;
  args.model = kStories.string();
  args.num_kv_blocks = 64;
  return runner::load_model(args);
}

TEST(LlamaModel, Stories260KReproducesLlama2cGreedySample) {
  if (!std::filesystem::exists(kStories / "model.safetensors"))
    GTEST_SKIP() << "stories260K not present";
  auto model = load_stories();
  auto& runner = dynamic_cast<runner::CpuRunner&>(*model.runner);
  // run.c with -n 256 forwards positions 0..255 and prints the token sampled at each: 256 tokens
  // after BOS. (The 255th ends in "help you"; the 256th is the final ".")
  const auto ids = testing::greedy(runner, {1}, 256, 17);
  const std::string text = testing::decode_with_vocab(kStories / "tokenizer.json", ids);
  const std::string expected = published_sample();
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(text, expected);
}

// Runs a prompt through the runner in chunks of `chunk` tokens and returns the last logits.
std::vector<float> prefill_in_chunks(runner::CpuRunner& runner, const std::vector<int32_t>& prompt,
                                     int chunk) {
  TestSeq seq(0, 8, prompt);
  std::vector<float> last;
  while (seq.num_computed < static_cast<int>(prompt.size())) {
    const auto s = seq.schedule(chunk);
    last = runner.execute_logits(make_batch({s}))[0];
    seq.num_computed += static_cast<int32_t>(s.token_ids.size());
  }
  return last;
}

// A random model with every optional path on (q/k/v bias, q/k norm, GQA, untied head, llama3 RoPE)
// and a small block size, so sequences span many blocks.
std::unique_ptr<runner::CpuRunner> all_features_runner() {
  io::ModelConfig c = runner::demo_model_config();
  c.attention_bias = true;
  c.qk_norm = true;
  c.tie_word_embeddings = false;
  c.rope_scaling.type = io::RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  auto model = std::make_unique<models::LlamaModel>(c, models::random_llama_weights(c, 7));
  return std::make_unique<runner::CpuRunner>(std::move(model), 64, 4);
}

TEST(LlamaModel, ChunkedPrefillGivesIdenticalLogits) {
  auto runner_ptr = all_features_runner();
  auto& runner = *runner_ptr;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back((i * 37 + 11) % 256);
  const auto whole = prefill_in_chunks(runner, prompt, -1);
  for (int chunk : {1, 3, 5, 16})
    EXPECT_EQ(prefill_in_chunks(runner, prompt, chunk), whole) << "chunk " << chunk;
}

TEST(LlamaModel, BatchingGivesIdenticalLogits) {
  auto runner_ptr = all_features_runner();
  auto& runner = *runner_ptr;
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> p;
    for (int i = 0; i < 5 + 7 * s; ++i) p.push_back((i * 13 + s * 29 + 3) % 256);
    prompts.push_back(p);
  }
  // Solo: each prompt alone, then 3 decode steps.
  std::vector<std::vector<std::vector<float>>> solo(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    TestSeq seq(0, 8, prompts[s]);
    for (int step = 0; step < 4; ++step) {
      auto logits = runner.execute_logits(make_batch({seq.schedule()}))[0];
      seq.num_computed = static_cast<int32_t>(seq.tokens.size());
      seq.tokens.push_back(testing::argmax(logits));
      solo[s].push_back(std::move(logits));
    }
  }
  // Together: all seqs in every step, each in its own blocks; seq 2 prefills in two chunks, so it
  // shares steps with the others' decodes.
  std::vector<TestSeq> seqs;
  for (size_t s = 0; s < prompts.size(); ++s)
    seqs.emplace_back(static_cast<int64_t>(s), 8, prompts[s]);
  std::vector<int> step_of(prompts.size(), 0);
  for (int round = 0; round < 6; ++round) {
    std::vector<engine::ScheduledSeq> batch;
    std::vector<size_t> members;
    for (size_t s = 0; s < seqs.size(); ++s) {
      if (step_of[s] >= 4) continue;
      batch.push_back(seqs[s].schedule(s == 2 && round == 0 ? 6 : -1));
      members.push_back(s);
    }
    if (batch.empty()) break;
    const auto logits = runner.execute_logits(make_batch(batch));
    for (size_t i = 0; i < members.size(); ++i) {
      TestSeq& seq = seqs[members[i]];
      seq.num_computed += static_cast<int32_t>(batch[i].token_ids.size());
      if (!batch[i].needs_sample) continue;
      const int step = step_of[members[i]]++;
      EXPECT_EQ(logits[i], solo[members[i]][step]) << "seq " << members[i] << " step " << step;
      seq.tokens.push_back(testing::argmax(logits[i]));
    }
  }
  for (int s : step_of) EXPECT_EQ(s, 4);
}

// Logits of every prompt position through the model-level API (one prefill step).
std::vector<std::vector<float>> all_position_logits(models::LlamaModel& model,
                                                    const std::vector<int32_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t block_size = 16;
  models::KvCache cache(model.config().num_hidden_layers, (n + block_size - 1) / block_size,
                        block_size, model.config().num_key_value_heads, model.config().head_dim);
  std::vector<int32_t> positions, block_table;  // [n], [num_blocks]
  std::vector<int64_t> slots, rows;             // [n], [n]
  for (int64_t i = 0; i < n; ++i) {
    positions.push_back(static_cast<int32_t>(i));
    slots.push_back(i);
    rows.push_back(i);
  }
  for (int64_t b = 0; b < cache.num_blocks(); ++b) block_table.push_back(static_cast<int32_t>(b));
  const cpu::AttentionSeq seq{0, n, 0, block_table};
  const models::ForwardBatch batch{ids, positions, slots,
                                   std::span<const cpu::AttentionSeq>(&seq, 1)};
  const auto hidden = model.forward(batch, cache);
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> flat(static_cast<size_t>(n * vocab));  // [n, vocab]
  model.compute_logits(hidden, rows, flat.data());
  std::vector<std::vector<float>> out;
  for (int64_t i = 0; i < n; ++i)
    out.emplace_back(flat.begin() + i * vocab, flat.begin() + (i + 1) * vocab);
  return out;
}

class HfReference : public ::testing::TestWithParam<std::string> {};

// Every position's logits of `model` on ids within 1e-4 (relative to the largest) of transformers'.
void expect_logits_match(models::LlamaModel& model, const nlohmann::json& prompt,
                         const std::string& what) {
  const auto ids = prompt["token_ids"].get<std::vector<int32_t>>();
  const auto expected = prompt["logits"].get<std::vector<std::vector<float>>>();
  const auto got = all_position_logits(model, ids);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_EQ(got[t].size(), expected[t].size());
    float scale = 1.0f, max_err = 0.0f;
    for (size_t v = 0; v < got[t].size(); ++v) {
      scale = std::max(scale, std::fabs(expected[t][v]));
      max_err = std::max(max_err, std::fabs(got[t][v] - expected[t][v]));
    }
    EXPECT_LE(max_err, 1e-4f * scale) << what << " position " << t;
  }
}

nlohmann::json reference_of(const std::filesystem::path& dir) {
  std::ifstream in(dir / "reference.json");
  return nlohmann::json::parse(in);
}

const std::filesystem::path kHfReference =
    std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/data/hf_reference";

// Tiny random-weight models and their logits from HF transformers (float32, eager attention), made
// by tests/device/make_reference_logits.py.
TEST_P(HfReference, LogitsMatchTransformers) {
  const auto dir = kHfReference / GetParam();
  const io::ModelConfig config = io::load_model_config(dir);
  const io::WeightStore store = io::WeightStore::open(dir);
  models::LlamaModel model(config, models::load_llama_weights(config, store));
  const auto ref = reference_of(dir);
  ASSERT_GE(ref["prompts"].size(), 2u);
  for (const auto& prompt : ref["prompts"]) expect_logits_match(model, prompt, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Tiny, HfReference,
                         ::testing::Values("llama3_tiny", "qwen3_tiny", "qwen2_tiny",
                                           "qwen3_moe_tiny", "mixtral_tiny", "phi3_tiny",
                                           "gemma2_tiny", "gemma3_tiny"));

// Phi-3's longrope: transformers takes the long factors for a forward longer than the original
// context (16 positions here) and the short ones otherwise; pagellm takes them by max_model_len
// (use_long), so each prompt is checked with the factors transformers used for it. Both use the
// attention factor sqrt(1 + ln 4 / ln 16) on cos and sin.
TEST(HfReferenceLongRope, BothFactorListsMatchTransformers) {
  const auto dir = kHfReference / "phi3_longrope_tiny";
  io::ModelConfig config = io::load_model_config(dir);
  ASSERT_EQ(config.rope_scaling.type, io::RopeScaling::Type::kLongRope);
  EXPECT_NEAR(config.rope_scaling.attention_factor, std::sqrt(1.0 + std::log(4.0) / std::log(16.0)),
              1e-12);
  const io::WeightStore store = io::WeightStore::open(dir);
  const auto ref = reference_of(dir);
  int long_prompts = 0, short_prompts = 0;
  for (const auto& prompt : ref["prompts"]) {
    config.rope_scaling.use_long = prompt["token_ids"].size() > 16;
    (config.rope_scaling.use_long ? long_prompts : short_prompts) += 1;
    models::LlamaModel model(config, models::load_llama_weights(config, store));
    expect_logits_match(model, prompt, config.rope_scaling.use_long ? "long" : "short");
  }
  EXPECT_GT(long_prompts, 0);
  EXPECT_GT(short_prompts, 0);
}

}  // namespace
}  // namespace pagellm
