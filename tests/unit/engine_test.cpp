// EngineCore end to end on the fake runner and the byte-level demo tokenizer: outputs, finish reasons,
// duplicate ids, validation, abort, n/best_of, prefix-cache accounting, prompt logprobs, deltas, stats.
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/engine_core.h"
#include "fake_runner.h"

namespace pagellm {
namespace {

using testing::FakeRunner;

struct EngineFixture {
  explicit EngineFixture(int num_blocks = 64, int block_size = 16, EngineArgs args = {}) {
    auto runner = std::make_unique<FakeRunner>(num_blocks, block_size, 0, 258);
    fake = runner.get();
    io::GenerationConfig gen;
    gen.eos_token_ids = {257};
    core = std::make_unique<EngineCore>(args, std::move(runner), tok::Tokenizer::byte_level_demo(), gen, "fake");
  }
  // Runs to completion; returns the final output of every request.
  std::map<std::string, RequestOutput> run() {
    std::map<std::string, RequestOutput> done;
    for (int i = 0; i < 100000 && core->has_unfinished(); ++i) {
      for (RequestOutput& o : core->step()) {
        if (o.finished) done[o.request_id] = std::move(o);
      }
    }
    EXPECT_FALSE(core->has_unfinished());
    return done;
  }
  void expect_no_leaks() {
    EXPECT_EQ(core->kv_cache().num_free_blocks(), core->kv_cache().num_blocks());
    EXPECT_EQ(core->kv_cache().num_seqs(), 0);
    EXPECT_EQ(fake->kv_errors, 0);
  }
  FakeRunner* fake = nullptr;
  std::unique_ptr<EngineCore> core;
};

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

TEST(Engine, GeneratesUntilLengthAndStop) {
  EngineFixture f;
  // Script: the reply is "ok!" and then EOS.
  f.fake->next = [](std::span<const int32_t> ctx, const engine::ScheduledSeq& s) -> int32_t {
    const std::string reply = "ok!";
    const size_t k = s.output_token_ids.size();
    (void)ctx;
    return k < reply.size() ? static_cast<unsigned char>(reply[k]) : 257;
  };
  f.core->add_request("a", PromptInput::from_text("hi"), greedy(10), {}, false);
  f.core->add_request("b", PromptInput::from_text("hi"), greedy(2), {}, false);
  auto done = f.run();
  EXPECT_EQ(done["a"].outputs[0].text, "ok!");
  EXPECT_EQ(done["a"].outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(done["a"].outputs[0].token_ids, (std::vector<int32_t>{'o', 'k', '!', 257}));
  EXPECT_EQ(done["a"].prompt_token_ids, (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(done["b"].outputs[0].text, "ok");
  EXPECT_EQ(done["b"].outputs[0].finish_reason, FinishReason::kLength);
  const EngineStats s = f.core->take_stats();
  EXPECT_EQ(s.requests_finished_stop, 1u);
  EXPECT_EQ(s.requests_finished_length, 1u);
  EXPECT_EQ(s.generation_tokens, 6u);
  EXPECT_EQ(s.prompt_tokens, 6u);
  EXPECT_EQ(s.ttft_samples.size(), 2u);
  EXPECT_EQ(s.e2e_samples.size(), 2u);
  EXPECT_EQ(f.core->take_stats().ttft_samples.size(), 0u) << "samples are handed out once";
  f.expect_no_leaks();
}

TEST(Engine, RejectsBadRequestsWithoutQueuing) {
  EngineFixture f(4, 16);  // 64 tokens of KV
  f.core->add_request("a", PromptInput::from_text("x"), greedy(4), {}, false);
  EXPECT_THROW(f.core->add_request("a", PromptInput::from_text("y"), greedy(4), {}, false), Error);
  SamplingParams bad = greedy(4);
  bad.top_p = 0.0f;
  EXPECT_THROW(f.core->add_request("c", PromptInput::from_text("x"), bad, {}, false), Error);
  EXPECT_THROW(f.core->add_request("d", PromptInput::from_ids({1, 999}), greedy(4), {}, false), Error);
  EXPECT_THROW(f.core->add_request("e", PromptInput::from_text(std::string(60, 'z')), greedy(10), {}, false),
               Error);  // needs 5 blocks
  EXPECT_EQ(f.core->num_unfinished(), 1);
  f.run();
  f.expect_no_leaks();
}

TEST(Engine, AbortGivesAFinalOutputAndFreesBlocks) {
  EngineFixture f;
  f.core->add_request("a", PromptInput::from_text("hello"), greedy(50), {}, true);
  f.core->add_request("b", PromptInput::from_text("hello"), greedy(50), {}, false);
  for (int i = 0; i < 3; ++i) f.core->step();
  EXPECT_TRUE(f.core->abort_request("a"));
  EXPECT_FALSE(f.core->abort_request("a"));
  EXPECT_FALSE(f.core->abort_request("nope"));
  std::vector<RequestOutput> outs = f.core->step();
  bool saw_abort = false;
  for (const auto& o : outs) {
    if (o.request_id == "a") {
      saw_abort = true;
      EXPECT_TRUE(o.finished);
      ASSERT_EQ(o.outputs.size(), 1u);
      EXPECT_EQ(o.outputs[0].finish_reason, FinishReason::kAbort);
    }
  }
  EXPECT_TRUE(saw_abort);
  f.core->abort_request("b");
  f.run();
  EXPECT_EQ(f.core->take_stats().requests_finished_abort, 2u);
  f.expect_no_leaks();
}

TEST(Engine, PrefixCachingReportsCachedTokens) {
  EngineFixture f;
  const std::string shared(40, 'p');
  f.core->add_request("a", PromptInput::from_text(shared + "1"), greedy(3), {}, false);
  f.run();
  f.core->add_request("b", PromptInput::from_text(shared + "2"), greedy(3), {}, false);
  f.core->add_request("c", PromptInput::from_text(shared + "2"), greedy(3), {}, false);
  RequestOptions salted;
  salted.cache_salt = "other-tenant";
  f.core->add_request("d", PromptInput::from_text(shared + "2"), greedy(3), salted, false);
  auto done = f.run();
  EXPECT_EQ(done["b"].num_cached_tokens, 32);  // two full blocks of the 41-token shared prefix
  EXPECT_EQ(done["c"].num_cached_tokens, 32);
  EXPECT_EQ(done["d"].num_cached_tokens, 0);
  EXPECT_EQ(done["b"].outputs[0].token_ids, done["c"].outputs[0].token_ids);
  const EngineStats s = f.core->take_stats();
  EXPECT_EQ(s.prefix_cache_hits, 64u);
  f.expect_no_leaks();
}

TEST(Engine, NSamplesAndBestOf) {
  EngineFixture f;
  SamplingParams p;
  p.n = 3;
  p.max_tokens = 5;
  p.seed = 7;
  f.core->add_request("n3", PromptInput::from_text("abc"), p, {}, false);
  SamplingParams q = p;
  q.n = 1;
  q.best_of = 4;
  f.core->add_request("best", PromptInput::from_text("abc"), q, {}, false);
  auto done = f.run();
  ASSERT_EQ(done["n3"].outputs.size(), 3u);
  EXPECT_NE(done["n3"].outputs[0].token_ids, done["n3"].outputs[1].token_ids);
  ASSERT_EQ(done["best"].outputs.size(), 1u);
  EXPECT_EQ(done["best"].outputs[0].token_ids.size(), 5u);
  EXPECT_GT(f.fake->num_copies, 0) << "forked samples copy the shared partial block";
  f.expect_no_leaks();
}

TEST(Engine, PromptLogprobsSurviveChunking) {
  EngineArgs args;
  args.max_num_batched_tokens = 8;
  EngineFixture f(64, 16, args);
  SamplingParams p = greedy(2);
  p.prompt_logprobs = 0;
  f.core->add_request("a", PromptInput::from_text(std::string(29, 'q')), p, {}, false);
  auto done = f.run();
  const auto& plp = done["a"].prompt_logprobs;
  ASSERT_EQ(plp.size(), 30u);  // <s> + 29 tokens
  EXPECT_FALSE(plp[0].has_value());
  for (size_t i = 1; i < plp.size(); ++i) {
    ASSERT_TRUE(plp[i].has_value()) << i;
    EXPECT_EQ(plp[i]->token_id, 'q');
    EXPECT_TRUE(plp[i]->top.empty());  // 0 alternatives asked for
  }
  f.expect_no_leaks();
}

TEST(Engine, DeltaStreamingMatchesCumulative) {
  EngineFixture f;
  SamplingParams p = greedy(20);
  f.core->add_request("d", PromptInput::from_text("same"), p, {}, true);
  f.core->add_request("c", PromptInput::from_text("same"), p, {}, false);
  std::string streamed;
  std::vector<int32_t> ids;
  RequestOutput cumulative;
  while (f.core->has_unfinished()) {
    for (RequestOutput& o : f.core->step()) {
      if (o.request_id == "d") {
        for (const auto& c : o.outputs) {
          streamed += c.text;
          ids.insert(ids.end(), c.token_ids.begin(), c.token_ids.end());
        }
      } else if (o.finished) {
        cumulative = o;
      }
    }
  }
  EXPECT_EQ(streamed, cumulative.outputs[0].text);
  EXPECT_EQ(ids, cumulative.outputs[0].token_ids);
  f.expect_no_leaks();
}

}  // namespace
}  // namespace pagellm

// ---- Acceptance on the real stories260K model (CPU runner) ----

namespace pagellm {
namespace {

const std::string kStories = std::string(PAGELLM_SHARED_DIR) + "/models/stories260K";

EngineArgs stories_args() {
  EngineArgs a;
  a.model = kStories;
  a.num_threads = 1;
  return a;
}

std::vector<PromptInput> varied_prompts(int num) {
  const char* names[] = {"Lily", "Tom", "Sue", "Max", "Ben", "Anna", "Sam", "Mia"};
  const char* things[] = {"a red ball", "a big tree", "a little dog", "the park", "a cake", "the sea", "a toy car",
                          "a bird"};
  std::vector<PromptInput> prompts;
  for (int i = 0; i < num; ++i) {
    prompts.push_back(PromptInput::from_text(std::string("Once upon a time, ") + names[i % 8] + " saw " +
                                             things[(i / 8) % 8] + (i % 3 == 0 ? "." : " and")));
  }
  return prompts;
}

// Each prompt run on its own (one request in the engine at a time).
std::vector<std::vector<int32_t>> solo_outputs(const std::vector<PromptInput>& prompts,
                                               const std::vector<SamplingParams>& params) {
  EngineArgs a = stories_args();
  a.enable_prefix_caching = false;
  LLM llm(a);
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out.push_back(llm.generate({prompts[i]}, params[i])[0].outputs[0].token_ids);
  }
  return out;
}

void expect_same_as_solo(const std::vector<RequestOutput>& batched, const std::vector<std::vector<int32_t>>& solo) {
  ASSERT_EQ(batched.size(), solo.size());
  for (size_t i = 0; i < solo.size(); ++i) {
    ASSERT_EQ(batched[i].outputs.size(), 1u);
    EXPECT_EQ(batched[i].outputs[0].token_ids, solo[i]) << "prompt " << i;
  }
}

SamplingParams stories_greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

TEST(EngineStories, SixtyFourPromptsBatchedEqualSolo) {
  const auto prompts = varied_prompts(64);
  const std::vector<SamplingParams> params(64, stories_greedy(48));
  const auto solo = solo_outputs(prompts, params);
  LLM llm(stories_args());
  expect_same_as_solo(llm.generate(prompts, params), solo);
  EXPECT_EQ(llm.engine().take_stats().num_preemptions, 0u);
}

TEST(EngineStories, PreemptionKeepsOutputsIdentical) {
  const auto prompts = varied_prompts(64);
  const std::vector<SamplingParams> params(64, stories_greedy(48));
  const auto solo = solo_outputs(prompts, params);
  EngineArgs a = stories_args();
  a.num_kv_blocks = 48;  // 768 token slots for 64 sequences of ~60 tokens
  a.max_num_batched_tokens = 512;
  LLM llm(a);
  expect_same_as_solo(llm.generate(prompts, params), solo);
  EXPECT_GT(llm.engine().take_stats().num_preemptions, 0u) << "the pool was meant to be too small";
}

// Preemption by swapping (--swap-space): victims' KV blocks go to the CPU runner's host pool and
// come back into other device blocks; the tokens must not change.
TEST(EngineStories, PreemptionBySwapKeepsOutputsIdentical) {
  const auto prompts = varied_prompts(24);
  const std::vector<SamplingParams> params(24, stories_greedy(48));
  const auto solo = solo_outputs(prompts, params);
  EngineArgs a = stories_args();
  a.num_kv_blocks = 20;  // 320 token slots for 24 sequences of ~60 tokens
  a.max_num_batched_tokens = 512;
  a.enable_prefix_caching = false;
  // Room for 256 swapped blocks: all layers' K and V of 16 tokens of stories260K.
  a.swap_space_gib = 256.0 * 2 * 5 * 16 * 4 * 8 * 4 / 1073741824.0;
  LLMEngine engine(a);
  for (size_t i = 0; i < prompts.size(); ++i)
    engine.add_request(std::to_string(i), prompts[i], params[i]);
  std::vector<std::vector<int32_t>> outputs(prompts.size());
  int max_swapped = 0;
  while (engine.has_unfinished_requests()) {
    for (RequestOutput& out : engine.step())
      if (out.finished) outputs[std::stoul(out.request_id)] = out.outputs.at(0).token_ids;
    max_swapped = std::max(max_swapped, engine.take_stats().num_swapped);
  }
  for (size_t i = 0; i < solo.size(); ++i) EXPECT_EQ(outputs[i], solo[i]) << "prompt " << i;
  EXPECT_GT(engine.take_stats().num_preemptions, 0u) << "the pool was meant to be too small";
  EXPECT_GT(max_swapped, 0) << "preemption was meant to swap, not recompute";
}

// The grammar takes each token while the next step runs (Matcher::settle on the mask threads). A
// runner that ignores the masks shows what the engine does with the step after the output is
// complete (its token is dropped: the output ends where the grammar did) and with a token outside
// the step's mask (an error, at once).
TEST(Engine, StructuredOutputEndsWhereItsGrammarDoes) {
  EngineFixture f;
  f.fake->next = [](std::span<const int32_t>, const engine::ScheduledSeq& s) -> int32_t {
    const std::string script = s.prompt_token_ids.back() == 'a' ? "yes!!" : "nx";
    const size_t k = s.output_token_ids.size();
    return k < script.size() ? static_cast<unsigned char>(script[k]) : 257;
  };
  SamplingParams p = greedy(10);
  StructuredOutputs choice;
  choice.choice = std::vector<std::string>{"yes", "no"};
  p.structured_outputs = choice;
  f.core->add_request("complete", PromptInput::from_text("a"), p, {}, false);
  f.core->add_request("outside", PromptInput::from_text("b"), p, {}, false);
  auto done = f.run();
  EXPECT_EQ(done["complete"].outputs[0].text, "yes");
  EXPECT_EQ(done["complete"].outputs[0].token_ids, (std::vector<int32_t>{'y', 'e', 's'}));
  EXPECT_EQ(done["complete"].outputs[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(done["outside"].outputs[0].token_ids, (std::vector<int32_t>{'n', 'x'}));
  EXPECT_EQ(done["outside"].outputs[0].finish_reason, FinishReason::kError);
  f.expect_no_leaks();
}

TEST(EngineStories, SharedPrefixHitsTheCacheWithIdenticalOutputs) {
  EngineArgs a = stories_args();
  LLM probe(a);
  std::vector<int32_t> prefix = probe.engine().tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, "
      "she saw a big, red ball. She wanted to play with it, but it was too high. Lily's mom said, \"Lily, "
      "let's go to the park.\" Lily was sad and didn't know what to do.",
      true);
  ASSERT_GE(prefix.size(), 100u);
  prefix.resize(100);
  std::vector<PromptInput> prompts;
  for (const PromptInput& p : varied_prompts(64)) {
    std::vector<int32_t> ids = prefix;
    const auto tail = probe.engine().tokenizer().encode(p.text, false);
    ids.insert(ids.end(), tail.begin(), tail.end());
    prompts.push_back(PromptInput::from_ids(ids));
  }
  const std::vector<SamplingParams> params(64, stories_greedy(32));
  const auto solo = solo_outputs(prompts, params);
  LLM llm(a);
  const auto batched = llm.generate(prompts, params);
  expect_same_as_solo(batched, solo);
  int num_cached = 0;
  for (const auto& o : batched) num_cached += o.num_cached_tokens;
  EXPECT_GT(num_cached, 0);
  EXPECT_GT(llm.engine().take_stats().prefix_cache_hits, 0u);
}

TEST(EngineStories, SeededSamplingIsBatchInvariant) {
  SamplingParams seeded;
  seeded.temperature = 0.9f;
  seeded.top_p = 0.95f;
  seeded.max_tokens = 40;
  seeded.seed = 1234;
  const PromptInput prompt = PromptInput::from_text("Once upon a time");
  LLM llm(stories_args());
  const auto alone = llm.generate({prompt}, seeded)[0].outputs[0].text;
  std::vector<PromptInput> prompts = varied_prompts(64);
  std::vector<SamplingParams> params(64);
  for (int i = 0; i < 64; ++i) {
    params[static_cast<size_t>(i)].temperature = 1.0f;
    params[static_cast<size_t>(i)].max_tokens = 20 + i % 30;
    params[static_cast<size_t>(i)].seed = static_cast<uint64_t>(i);
  }
  prompts[37] = prompt;
  params[37] = seeded;
  const auto batched = llm.generate(prompts, params);
  EXPECT_EQ(batched[37].outputs[0].text, alone);
  SamplingParams other_seed = seeded;
  other_seed.seed = 99;
  EXPECT_NE(llm.generate({prompt}, other_seed)[0].outputs[0].text, alone);
}

TEST(AsyncEngine, StreamsDeltasFromManyThreadsAndAborts) {
  AsyncEngine engine(stories_args());
  ASSERT_TRUE(engine.healthy());
  const auto prompts = varied_prompts(16);
  struct Collected {
    std::mutex mu;
    std::map<std::string, std::string> text;
    std::map<std::string, FinishReason> finish;
    std::condition_variable cv;
  } got;
  auto callback = [&got](RequestOutput&& o) {
    std::lock_guard<std::mutex> lock(got.mu);
    for (const auto& c : o.outputs) {
      got.text[o.request_id] += c.text;
      if (c.finish_reason != FinishReason::kNone) got.finish[o.request_id] = c.finish_reason;
    }
    got.cv.notify_all();
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 16; i += 4) {
        engine.add_request("req" + std::to_string(i), prompts[static_cast<size_t>(i)], stories_greedy(40), callback);
      }
    });
  }
  for (auto& th : threads) th.join();
  SamplingParams long_run = stories_greedy(400);
  long_run.ignore_eos = true;
  engine.add_request("long", prompts[0], long_run, callback);
  // A duplicate of a live id is refused ("long" cannot have finished: it is aborted only below).
  EXPECT_THROW(engine.add_request("long", prompts[0], stories_greedy(4), callback), Error);
  engine.abort_request("long");
  {
    std::unique_lock<std::mutex> lock(got.mu);
    ASSERT_TRUE(got.cv.wait_for(lock, std::chrono::seconds(60), [&] { return got.finish.size() == 17; }));
  }
  EXPECT_EQ(got.finish["long"], FinishReason::kAbort);
  // Streaming deltas add up to the offline result.
  LLM llm(stories_args());
  const auto offline = llm.generate(prompts, stories_greedy(40));
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(got.text["req" + std::to_string(i)], offline[static_cast<size_t>(i)].outputs[0].text) << i;
  }
  EXPECT_EQ(engine.num_unfinished(), 0);
  const EngineStats stats = engine.take_stats();
  EXPECT_GE(stats.generation_tokens, 16u);
  EXPECT_EQ(stats.requests_finished_abort, 1u);
  // Shutdown aborts what is still running once the timeout passes.
  engine.add_request("late", prompts[1], long_run, callback);
  engine.shutdown(0.0);
  EXPECT_THROW(engine.add_request("after", prompts[1], stories_greedy(4), callback), Error);
  std::lock_guard<std::mutex> lock(got.mu);
  EXPECT_EQ(got.finish["late"], FinishReason::kAbort);
}

}  // namespace
}  // namespace pagellm
