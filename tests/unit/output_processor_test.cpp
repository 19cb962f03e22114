// OutputProcessor on the byte-level demo tokenizer (id = byte, 256 <s>, 257 </s>): stop strings across
// token boundaries, holding back possible stop prefixes while streaming, stop ids, EOS, min/max tokens,
// logprobs, best_of ranking.
#include <gtest/gtest.h>

#include "engine/output_processor.h"

namespace pagellm::engine {
namespace {

constexpr int32_t kEos = 257;

struct Fixture {
  explicit Fixture(SamplingParams params, bool deltas = false)
      : op(tok::Tokenizer::byte_level_demo(), {kEos}, 1024) {
    req.request_id = "r";
    req.params = std::move(params);
    req.prompt_token_ids = {256, 'A'};
    req.stream_deltas = deltas;
    req.forked = true;
    for (int i = 0; i < req.num_samples(); ++i) {
      auto seq = std::make_unique<Sequence>();
      seq->request = &req;
      seq->sample_index = i;
      seq->token_ids = req.prompt_token_ids;
      seq->status = SeqStatus::kRunning;
      req.seqs.push_back(std::move(seq));
    }
    op.prepare(req);
  }
  // Feeds one token to sample `i`; marks it finished like the engine would.
  FinishReason feed(int32_t token, int i = 0, float logprob = -1.0f) {
    Sequence& s = *req.seqs[static_cast<size_t>(i)];
    s.token_ids.push_back(token);
    const FinishReason r = op.process_token(s, token, TokenLogprobs{token, logprob, {{token, logprob}, {1, -5.0f}}});
    if (r != FinishReason::kNone) {
      s.status = SeqStatus::kFinished;
      s.finish_reason = r;
    }
    return r;
  }
  FinishReason feed_text(const std::string& text, int i = 0) {
    FinishReason r = FinishReason::kNone;
    for (char c : text) {
      r = feed(static_cast<unsigned char>(c), i);
      if (r != FinishReason::kNone) break;
    }
    return r;
  }
  const Sequence& seq(int i = 0) const { return *req.seqs[static_cast<size_t>(i)]; }

  OutputProcessor op;
  Request req;
};

SamplingParams params_with(std::vector<std::string> stop, int max_tokens = 100) {
  SamplingParams p;
  p.stop = std::move(stop);
  p.max_tokens = max_tokens;
  return p;
}

TEST(OutputProcessor, StopStringAcrossTokensIsExcluded) {
  Fixture f(params_with({"lo w"}));
  EXPECT_EQ(f.feed_text("Hello world"), FinishReason::kStop);
  EXPECT_EQ(f.seq().out.text, "Hel");
  EXPECT_EQ(f.seq().out.stop_reason, "lo w");
  const RequestOutput out = f.op.make_output(f.req);
  EXPECT_TRUE(out.finished);
  EXPECT_EQ(out.outputs[0].text, "Hel");
  EXPECT_EQ(out.outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(out.outputs[0].token_ids.size(), 7u);  // tokens are kept, text is cut
}

TEST(OutputProcessor, StopStringIncludedOnRequest) {
  SamplingParams p = params_with({"o w", "xyz"});
  p.include_stop_str_in_output = true;
  Fixture f(p);
  EXPECT_EQ(f.feed_text("Hello world"), FinishReason::kStop);
  EXPECT_EQ(f.seq().out.text, "Hello w");
}

TEST(OutputProcessor, EarliestStopStringWins) {
  Fixture f(params_with({"cd", "bcde"}));
  EXPECT_EQ(f.feed_text("abcdef"), FinishReason::kStop);
  EXPECT_EQ(f.seq().out.text, "ab");
}

TEST(OutputProcessor, StreamingHoldsBackPossibleStopPrefixes) {
  Fixture f(params_with({"lo w"}), /*deltas=*/true);
  std::string streamed;
  auto pull = [&] {
    RequestOutput o = f.op.make_output(f.req);
    for (const auto& c : o.outputs) streamed += c.text;
    return streamed;
  };
  f.feed_text("Hel");
  EXPECT_EQ(pull(), "He");  // "l" may start "lo w"
  f.feed_text("lo");
  EXPECT_EQ(pull(), "Hel");  // "lo" too
  f.feed_text(" x");
  EXPECT_EQ(pull(), "Hello x");  // not a stop after all: released
  f.feed_text("lo w");
  EXPECT_EQ(pull(), "Hello x");
  EXPECT_TRUE(f.seq().finished());
  const RequestOutput last = f.op.make_output(f.req);
  EXPECT_TRUE(last.outputs.empty()) << "finish already reported";
}

TEST(OutputProcessor, DeltasConcatenateToTheCumulativeText) {
  Fixture stream(params_with({}, 12), true);
  Fixture whole(params_with({}, 12), false);
  std::string streamed;
  std::vector<int32_t> ids;
  const std::string text = "héllo wörld!";  // multi-byte characters split over tokens
  for (char c : text) {
    stream.feed(static_cast<unsigned char>(c));
    whole.feed(static_cast<unsigned char>(c));
    for (auto& o : stream.op.make_output(stream.req).outputs) {
      streamed += o.text;
      ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
    }
    if (stream.seq().finished()) break;
  }
  const RequestOutput final_whole = whole.op.make_output(whole.req);
  EXPECT_EQ(streamed, final_whole.outputs[0].text);
  EXPECT_EQ(ids, final_whole.outputs[0].token_ids);
  EXPECT_EQ(final_whole.outputs[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(final_whole.outputs[0].text, text.substr(0, 12));
}

TEST(OutputProcessor, StopTokenIdsAndEos) {
  SamplingParams p = params_with({});
  p.stop_token_ids = {'#'};
  Fixture f(p);
  f.feed_text("ab");
  EXPECT_EQ(f.feed('#'), FinishReason::kStop);
  EXPECT_EQ(f.seq().out.text, "ab");
  EXPECT_EQ(f.seq().out.stop_token, '#');

  Fixture g(params_with({}));
  g.feed_text("ab");
  EXPECT_EQ(g.feed(kEos), FinishReason::kStop);
  EXPECT_EQ(g.seq().out.text, "ab");
  EXPECT_FALSE(g.seq().out.stop_token.has_value());

  SamplingParams q = params_with({}, 4);
  q.ignore_eos = true;
  Fixture h(q);
  EXPECT_EQ(h.feed(kEos), FinishReason::kNone);
  h.feed_text("ab");
  EXPECT_EQ(h.feed('c'), FinishReason::kLength);
}

TEST(OutputProcessor, MinTokensBansStopsUntilReached) {
  SamplingParams p = params_with({"x"});
  p.min_tokens = 3;
  p.stop_token_ids = {'#'};
  Fixture f(p);
  EXPECT_EQ(f.seq().banned_token_ids, (std::vector<int32_t>{kEos, '#'}));
  EXPECT_EQ(f.feed(kEos), FinishReason::kNone);  // would have stopped; too early
  EXPECT_EQ(f.feed('x'), FinishReason::kNone);    // stop string too early
  EXPECT_FALSE(f.seq().banned_token_ids.empty());
  EXPECT_EQ(f.feed('a'), FinishReason::kNone);
  EXPECT_TRUE(f.seq().banned_token_ids.empty());
  EXPECT_EQ(f.feed('#'), FinishReason::kStop);
}

TEST(OutputProcessor, LogprobsAreTrimmedAndSummed) {
  SamplingParams p = params_with({}, 3);
  p.logprobs = 1;
  Fixture f(p);
  f.feed('a', 0, -0.5f);
  f.feed('b', 0, -0.25f);
  const RequestOutput out = f.op.make_output(f.req);
  ASSERT_EQ(out.outputs[0].logprobs.size(), 2u);
  EXPECT_EQ(out.outputs[0].logprobs[0].top.size(), 1u);
  EXPECT_DOUBLE_EQ(out.outputs[0].cumulative_logprob, -0.75);
}

TEST(OutputProcessor, BestOfReturnsTheNBestOnlyAtTheEnd) {
  SamplingParams p = params_with({}, 2);
  p.n = 2;
  p.best_of = 3;
  Fixture f(p);
  f.feed('a', 0, -3.0f);
  f.feed('b', 1, -1.0f);
  f.feed('c', 2, -2.0f);
  EXPECT_TRUE(f.op.make_output(f.req).outputs.empty()) << "nothing before all samples finish";
  for (int i = 0; i < 3; ++i) f.feed('z', i, 0.0f);
  const RequestOutput out = f.op.make_output(f.req);
  ASSERT_TRUE(out.finished);
  ASSERT_EQ(out.outputs.size(), 2u);
  EXPECT_EQ(out.outputs[0].text, "bz");
  EXPECT_EQ(out.outputs[1].text, "cz");
  EXPECT_EQ(out.outputs[0].index, 0);
  EXPECT_EQ(out.outputs[1].index, 1);
}

}  // namespace
}  // namespace pagellm::engine
