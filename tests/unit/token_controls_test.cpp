// logit_bias (CPU sampler), allowed_token_ids and bad_words: the helpers on their own, then through
// the engine on stories260K (every generated token obeys them, greedy and sampled, n > 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "engine/sampler.h"
#include "engine/token_controls.h"
#include "pagellm/llm.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

const std::string kStories = std::string(PAGELLM_SHARED_DIR) + "/models/stories260K";

engine::ScheduledSeq seq_of(const SamplingParams& p, std::span<const int32_t> output = {}) {
  engine::ScheduledSeq s;
  s.needs_sample = true;
  s.params = &p;
  s.seed = 99;
  s.output_token_ids = output;
  return s;
}

TEST(LogitBias, ShiftsTheArgmaxAndKeepsRawLogprobs) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 1;
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f};
  EXPECT_EQ(engine::sample_token(logits, seq_of(p)).token_id, 1);
  p.logit_bias = {{2, 1.5f}, {1, -0.1f}};
  logits = {1.0f, 3.0f, 2.0f, 0.0f};
  const auto r = engine::sample_token(logits, seq_of(p));
  EXPECT_EQ(r.token_id, 2);
  // Logprobs are the raw model's (before the bias), as vLLM reports them by default.
  const float lse = std::log(std::exp(1.0f) + std::exp(3.0f) + std::exp(2.0f) + std::exp(0.0f));
  EXPECT_NEAR(r.logprobs.logprob, 2.0f - lse, 1e-5);
  // -100 removes a token in practice, +100 forces it; ids past the row are ignored.
  p.logit_bias = {{1, -100.0f}, {3, 100.0f}, {1000, 5.0f}};
  logits = {1.0f, 3.0f, 2.0f, 0.0f};
  EXPECT_EQ(engine::sample_token(logits, seq_of(p)).token_id, 3);
  p.temperature = 1.0f;
  for (int i = 0; i < 20; ++i) {
    logits = {1.0f, 3.0f, 2.0f, 0.0f};
    std::vector<int32_t> out(static_cast<size_t>(i), 0);
    EXPECT_EQ(engine::sample_token(logits, seq_of(p, out)).token_id, 3);
  }
}

TEST(LogitBias, ValidateRejectsOutOfRange) {
  SamplingParams p;
  p.logit_bias = {{1, 101.0f}};
  EXPECT_THROW(p.validate(), Error);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(p.validate(), Error);
  p.logit_bias = {};
  p.allowed_token_ids = std::vector<int32_t>{};
  EXPECT_THROW(p.validate(), Error);
}

TEST(TokenControls, AllowedMaskAndBadWordBans) {
  const auto mask = engine::allowed_token_mask({0, 33, 63}, 64);
  ASSERT_EQ(mask.size(), 2u);
  EXPECT_EQ(mask[0], 1u);
  EXPECT_EQ(mask[1], (1u << 1) | (1u << 31));
  EXPECT_THROW(engine::allowed_token_mask({64}, 64), Error);

  const std::vector<std::vector<int32_t>> words = {{5}, {7, 8, 9}, {7, 10}};
  std::vector<int32_t> banned = {2};
  engine::add_bad_word_bans(words, std::vector<int32_t>{1, 2}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{2, 5}));  // only the one-token word
  banned.clear();
  engine::add_bad_word_bans(words, std::vector<int32_t>{3, 7, 8}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{5, 9}));
  banned.clear();
  engine::add_bad_word_bans(words, std::vector<int32_t>{7}, banned);
  EXPECT_EQ(banned, (std::vector<int32_t>{5, 10}));
}

TEST(TokenControls, BadWordsTokenizeAtTheStartAndAfterASpace) {
  const auto tokenizer = tok::Tokenizer::byte_level_demo();
  const auto words =
      engine::tokenize_bad_words({"cat", "  dog"}, *tokenizer, tokenizer->vocab_size());
  ASSERT_GE(words.size(), 2u);
  EXPECT_EQ(words[0], tokenizer->encode("cat", false));
  for (const auto& w : words) EXPECT_FALSE(w.empty());
  EXPECT_NE(std::find(words.begin(), words.end(), tokenizer->encode("dog", false)), words.end());
}

EngineArgs stories_args() {
  EngineArgs a;
  a.model = kStories;
  a.num_threads = 2;
  return a;
}

TEST(TokenControlsEngine, AllowedTokenIdsRestrictEveryToken) {
  LLM llm(stories_args());
  const std::vector<int32_t> allowed = {100, 200, 300, 400};
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.n = 2;
    p.seed = 3;
    p.max_tokens = 24;
    p.allowed_token_ids = allowed;
    for (const RequestOutput& r : llm.generate({PromptInput::from_text("Once upon a time")}, p)) {
      for (const CompletionOutput& o : r.outputs) {
        EXPECT_EQ(o.token_ids.size(), 24u);
        for (int32_t id : o.token_ids)
          EXPECT_NE(std::find(allowed.begin(), allowed.end(), id), allowed.end()) << id;
      }
    }
  }
}

TEST(TokenControlsEngine, BadWordsAndBiasChangeGreedyOutput) {
  LLM llm(stories_args());
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 32;
  const auto base = llm.generate({PromptInput::from_text("Once upon a time")}, p)[0].outputs[0];
  ASSERT_GE(base.token_ids.size(), 4u);
  // Banning the text of the greedy output's third token (as a word) changes it from there on.
  const std::string word =
      llm.engine().tokenizer().decode(std::vector<int32_t>{base.token_ids[2]}, true);
  SamplingParams banned = p;
  banned.bad_words = {word};
  const auto out = llm.generate({PromptInput::from_text("Once upon a time")}, banned)[0].outputs[0];
  const auto words = engine::tokenize_bad_words({word}, llm.engine().tokenizer(),
                                                llm.engine().tokenizer().vocab_size());
  for (const auto& w : words) {
    if (w.size() != 1) continue;
    EXPECT_EQ(std::find(out.token_ids.begin(), out.token_ids.end(), w[0]), out.token_ids.end())
        << word;
  }
  // A large bias on one token makes greedy decoding pick it every time.
  SamplingParams biased = p;
  biased.max_tokens = 8;
  biased.logit_bias = {{base.token_ids[0] + 1, 100.0f}};
  const auto forced = llm.generate({PromptInput::from_text("Once upon a time")}, biased);
  ASSERT_FALSE(forced[0].outputs[0].token_ids.empty());
  for (int32_t id : forced[0].outputs[0].token_ids) EXPECT_EQ(id, base.token_ids[0] + 1);
}

}  // namespace
}  // namespace pagellm
