// Scheduler tests against the fake runner (no model): token budgets and chunked prefill, decodes
// before prefills, preemption order (fcfs and priority, recompute and swap), forked samples, abort at
// every stage, requests that can never fit. Every test ends with a leak check.
#include <map>
#include <memory>
#include <numeric>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/scheduler.h"
#include "fake_runner.h"

namespace pagellm::engine {
namespace {

using testing::FakeRunner;

struct Harness {
  Harness(int num_blocks, SchedulerConfig config = {}, int block_size = 16, int num_swap = 0,
          bool caching = true)
      : kv({num_blocks, block_size, caching, num_swap}),
        sched(config, kv),
        runner(num_blocks, block_size, num_swap) {}

  ~Harness() = default;

  Request& add(std::vector<int32_t> prompt, int max_tokens, int priority = 0, int n = 1,
               std::string salt = {}) {
    auto req = std::make_unique<Request>();
    req->request_id = "r" + std::to_string(next_arrival);
    req->arrival_index = next_arrival++;
    req->priority = priority;
    req->params.max_tokens = max_tokens;
    req->params.n = n;
    req->params.temperature = n > 1 ? 1.0f : 0.0f;
    req->base_seed = 1000 + req->arrival_index;
    req->cache_salt = salt;
    req->cache_salt_hash = kv::KVCacheManager::hash_salt(salt);
    req->prompt_token_ids = std::move(prompt);
    sched.check_fits(*req);
    sched.add_request(*req);
    reqs.push_back(std::move(req));
    return *reqs.back();
  }

  // One engine step with length-only finishing; returns the number of tokens scheduled.
  int step() {
    const SchedulerOutput& out = sched.schedule();
    const int num_tokens = out.num_scheduled_tokens;
    if (out.seqs.empty() && out.blocks_to_swap_out.empty() && out.blocks_to_swap_in.empty()) return 0;
    ModelRunnerOutput res = runner.execute(out);
    std::vector<NewToken> new_tokens;
    sched.update_from_output(res, new_tokens);
    for (const NewToken& t : new_tokens) {
      if (t.seq->num_output_tokens() >= t.seq->request->params.max_tokens) {
        sched.finish_seq(*t.seq, FinishReason::kLength);
      }
    }
    ++num_steps;
    return num_tokens;
  }

  void run(int max_steps = 10000) {
    for (int i = 0; i < max_steps && sched.has_unfinished(); ++i) step();
    ASSERT_FALSE(sched.has_unfinished()) << "did not finish in " << max_steps << " steps";
  }

  std::vector<int32_t> output(const Request& r, int sample = 0) const {
    auto ids = r.seqs[static_cast<size_t>(sample)]->output_ids();
    return {ids.begin(), ids.end()};
  }

  void expect_no_leaks() const {
    EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks()) << "KV blocks leaked";
    EXPECT_EQ(kv.num_seqs(), 0) << "sequence state leaked";
    EXPECT_EQ(kv.num_free_swap_blocks(), kv.num_swap_blocks()) << "swap blocks leaked";
    EXPECT_EQ(runner.kv_errors, 0) << "the runner read KV that does not match the sequence";
  }

  kv::KVCacheManager kv;
  Scheduler sched;
  FakeRunner runner;
  std::vector<std::unique_ptr<Request>> reqs;
  uint64_t next_arrival = 0;
  int num_steps = 0;
};

std::vector<int32_t> prompt_of(int len, int seed) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int i = 0; i < len; ++i) p[static_cast<size_t>(i)] = 3 + (seed * 131 + i * 17) % 250;
  return p;
}

// Output of each prompt when it runs alone in a roomy engine.
std::vector<int32_t> solo_output(const std::vector<int32_t>& prompt, int max_tokens) {
  Harness h(256);
  Request& r = h.add(prompt, max_tokens);
  h.run();
  return h.output(r);
}

TEST(Scheduler, ChunkedPrefillRespectsTheTokenBudget) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 32;
  Harness h(64, cfg);
  Request& a = h.add(prompt_of(100, 1), 4);
  // 100 prompt tokens in chunks of 32, 32, 32, 4; the last chunk samples the first token.
  EXPECT_EQ(h.step(), 32);
  EXPECT_EQ(a.seqs[0]->num_output_tokens(), 0);
  EXPECT_EQ(h.step(), 32);
  EXPECT_EQ(h.step(), 32);
  EXPECT_EQ(h.step(), 4);
  EXPECT_EQ(a.seqs[0]->num_output_tokens(), 1);
  h.run();
  EXPECT_EQ(h.output(a), solo_output(prompt_of(100, 1), 4));
  for (const auto& b : h.runner.batches) EXPECT_LE(b.num_tokens, 32);
  h.expect_no_leaks();
}

TEST(Scheduler, LongPrefillThresholdCapsEachPromptsChunk) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 64;
  cfg.long_prefill_token_threshold = 10;
  Harness h(64, cfg);
  Request& a = h.add(prompt_of(8, 1), 12);
  EXPECT_EQ(h.step(), 8);  // under the threshold: whole
  Request& b = h.add(prompt_of(25, 2), 3);
  Request& c = h.add(prompt_of(25, 3), 3);
  // a decodes; b and c each take at most 10 prompt tokens per step: 10 + 10 + 5.
  EXPECT_EQ(h.step(), 1 + 10 + 10);
  EXPECT_EQ(h.step(), 1 + 10 + 10);
  EXPECT_EQ(h.step(), 1 + 5 + 5);
  EXPECT_EQ(b.seqs[0]->num_output_tokens(), 1);
  h.run();
  EXPECT_EQ(h.output(a), solo_output(prompt_of(8, 1), 12));
  EXPECT_EQ(h.output(b), solo_output(prompt_of(25, 2), 3));
  EXPECT_EQ(h.output(c), solo_output(prompt_of(25, 3), 3));
  h.expect_no_leaks();
}

TEST(Scheduler, LongPrefillThresholdLeavesUnchunkedPromptsWhole) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 64;
  cfg.enable_chunked_prefill = false;
  cfg.long_prefill_token_threshold = 10;  // applies to chunked prefill only
  Harness h(64, cfg);
  h.add(prompt_of(40, 1), 2);
  EXPECT_EQ(h.step(), 40);
  h.run();
  h.expect_no_leaks();
}

TEST(Scheduler, NoChunkingSchedulesWholePromptsOnly) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 64;
  cfg.enable_chunked_prefill = false;
  Harness h(64, cfg);
  h.add(prompt_of(40, 1), 2);
  h.add(prompt_of(40, 2), 2);  // does not fit next to the first: waits a step
  EXPECT_EQ(h.step(), 40);
  EXPECT_EQ(h.step(), 41);  // one decode + the second prompt whole
  h.run();
  h.expect_no_leaks();
}

TEST(Scheduler, RunningDecodesGoBeforeNewPrompts) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 16;
  Harness h(64, cfg);
  Request& a = h.add(prompt_of(8, 1), 20);
  h.step();  // a's prompt
  Request& b = h.add(prompt_of(64, 2), 2);
  for (int i = 0; i < 4; ++i) {
    h.step();
    // a always gets its decode token; b's prefill takes the rest of the budget.
    const auto& batch = h.runner.batches.back();
    ASSERT_EQ(batch.seqs.size(), 2u);
    EXPECT_EQ(batch.seqs[0], std::make_pair(a.seqs[0]->seq_id, 1));
    EXPECT_EQ(batch.seqs[1], std::make_pair(b.seqs[0]->seq_id, 15));
  }
  h.run();
  EXPECT_EQ(h.output(a), solo_output(prompt_of(8, 1), 20));
  EXPECT_EQ(h.output(b), solo_output(prompt_of(64, 2), 2));
  h.expect_no_leaks();
}

TEST(Scheduler, MaxNumSeqsCapsTheBatch) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 3;
  Harness h(256, cfg);
  for (int i = 0; i < 7; ++i) h.add(prompt_of(5, i), 6);
  while (h.sched.has_unfinished()) {
    h.step();
    EXPECT_LE(h.runner.batches.back().seqs.size(), 3u);
    EXPECT_LE(h.sched.num_running(), 3);
  }
  h.expect_no_leaks();
}

TEST(Scheduler, PreemptsTheLatestRequestUnderFcfsAndRecomputes) {
  // 6 blocks of 4 tokens; three requests of 6 prompt tokens growing to 14 need 4 blocks each.
  Harness h(6, {}, 4);
  Request& a = h.add(prompt_of(6, 1), 8);
  Request& b = h.add(prompt_of(6, 2), 8);
  Request& c = h.add(prompt_of(6, 3), 8);
  std::vector<int64_t> first_victims;
  while (h.sched.has_unfinished()) {
    const uint64_t before = h.sched.num_preemptions();
    h.step();
    if (h.sched.num_preemptions() > before && first_victims.empty()) {
      for (const auto* r : {&a, &b, &c}) {
        if (r->seqs[0]->status == SeqStatus::kWaiting && r->seqs[0]->num_output_tokens() > 0) {
          first_victims.push_back(static_cast<int64_t>(r->arrival_index));
        }
      }
    }
  }
  EXPECT_GT(h.sched.num_preemptions(), 0u);
  ASSERT_FALSE(first_victims.empty());
  EXPECT_EQ(first_victims.back(), 2) << "the latest request must be preempted first";
  EXPECT_EQ(h.output(a), solo_output(prompt_of(6, 1), 8));
  EXPECT_EQ(h.output(b), solo_output(prompt_of(6, 2), 8));
  EXPECT_EQ(h.output(c), solo_output(prompt_of(6, 3), 8));
  h.expect_no_leaks();
}

TEST(Scheduler, PriorityPolicyRunsLowerValuesFirstAndPreemptsTheHighest) {
  SchedulerConfig cfg;
  cfg.policy = SchedulingPolicy::kPriority;
  cfg.max_num_seqs = 1;
  Harness h(64, cfg);
  Request& low = h.add(prompt_of(4, 1), 2, /*priority=*/5);
  Request& high = h.add(prompt_of(4, 2), 2, /*priority=*/-1);
  h.step();
  EXPECT_EQ(h.runner.batches.back().seqs[0].first, high.seqs[0]->seq_id);
  h.run();
  EXPECT_EQ(low.seqs[0]->finish_reason, FinishReason::kLength);

  // Preemption picks the highest priority value even though it arrived first.
  SchedulerConfig cfg2;
  cfg2.policy = SchedulingPolicy::kPriority;
  Harness g(6, cfg2, 4);
  Request& x = g.add(prompt_of(6, 1), 8, /*priority=*/9);
  Request& y = g.add(prompt_of(6, 2), 8, /*priority=*/0);
  Request& z = g.add(prompt_of(6, 3), 8, /*priority=*/1);
  bool saw_x_preempted = false;
  while (g.sched.has_unfinished()) {
    const uint64_t before = g.sched.num_preemptions();
    g.step();
    if (g.sched.num_preemptions() > before) {
      EXPECT_NE(y.seqs[0]->status, SeqStatus::kWaiting) << "the most urgent request was preempted";
      saw_x_preempted |= x.seqs[0]->status == SeqStatus::kWaiting;
    }
  }
  EXPECT_TRUE(saw_x_preempted);
  EXPECT_EQ(g.output(x), solo_output(prompt_of(6, 1), 8));
  EXPECT_EQ(g.output(z), solo_output(prompt_of(6, 3), 8));
  h.expect_no_leaks();
  g.expect_no_leaks();
}

TEST(Scheduler, SwapsOutInsteadOfRecomputingWhenSwapSpaceExists) {
  Harness h(6, {}, 4, /*num_swap=*/8);
  Request& a = h.add(prompt_of(6, 1), 8);
  Request& b = h.add(prompt_of(6, 2), 8);
  Request& c = h.add(prompt_of(6, 3), 8);
  int max_swapped = 0;
  while (h.sched.has_unfinished()) {
    h.step();
    max_swapped = std::max(max_swapped, h.sched.num_swapped());
  }
  EXPECT_GT(max_swapped, 0);
  EXPECT_GT(h.runner.num_swaps, 0);
  EXPECT_EQ(h.output(a), solo_output(prompt_of(6, 1), 8));
  EXPECT_EQ(h.output(b), solo_output(prompt_of(6, 2), 8));
  EXPECT_EQ(h.output(c), solo_output(prompt_of(6, 3), 8));
  h.expect_no_leaks();
}

TEST(Scheduler, ManyRequestsUnderPressureMatchSoloRuns) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 40;
  Harness h(24, cfg, 8);
  std::vector<Request*> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back(&h.add(prompt_of(5 + i * 3, i), 10 + i));
  h.run();
  EXPECT_GT(h.sched.num_preemptions(), 0u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(h.output(*reqs[static_cast<size_t>(i)]), solo_output(prompt_of(5 + i * 3, i), 10 + i)) << i;
  }
  h.expect_no_leaks();
}

TEST(Scheduler, ForkedSamplesShareThePromptAndCopyOnWrite) {
  Harness h(64, {}, 16);
  // 20 prompt tokens: block 1 is partial when the samples fork at 19 computed tokens.
  Request& r = h.add(prompt_of(20, 1), 6, 0, /*n=*/3);
  h.step();  // computes 19 prompt tokens, then forks
  ASSERT_EQ(r.seqs.size(), 3u);
  const auto t0 = h.kv.block_table(r.seqs[0]->seq_id);
  const auto t2 = h.kv.block_table(r.seqs[2]->seq_id);
  ASSERT_EQ(t0.size(), 2u);
  EXPECT_EQ(std::vector<int32_t>(t0.begin(), t0.end()), std::vector<int32_t>(t2.begin(), t2.end()));
  EXPECT_EQ(h.kv.num_free_blocks(), 62);  // two blocks shared three ways
  h.step();  // each sample computes token 19 into block 1: two copy on write, the last writes in place
  EXPECT_EQ(h.runner.num_copies, 2);
  EXPECT_EQ(h.kv.block_table(r.seqs[0]->seq_id)[0], h.kv.block_table(r.seqs[1]->seq_id)[0]);
  EXPECT_NE(h.kv.block_table(r.seqs[0]->seq_id)[1], h.kv.block_table(r.seqs[1]->seq_id)[1]);
  h.run();
  // Different seeds give different samples; every sample saw its own correct KV.
  EXPECT_NE(h.output(r, 0), h.output(r, 1));
  EXPECT_NE(h.output(r, 1), h.output(r, 2));
  h.expect_no_leaks();
}

TEST(Scheduler, ForkOfAOneTokenPrompt) {
  Harness h(16, {}, 4);
  Request& r = h.add({7}, 5, 0, /*n=*/4);
  h.run();
  ASSERT_EQ(r.seqs.size(), 4u);
  for (const auto& s : r.seqs) EXPECT_EQ(s->num_output_tokens(), 5);
  h.expect_no_leaks();
}

TEST(Scheduler, AbortAtEveryStage) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 16;
  Harness h(12, cfg, 4, /*num_swap=*/16);
  Request& waiting = h.add(prompt_of(30, 1), 8);
  h.sched.abort_request(waiting);  // never scheduled
  EXPECT_TRUE(waiting.all_finished());
  Request& mid_prefill = h.add(prompt_of(30, 2), 8);
  h.step();
  EXPECT_GT(mid_prefill.seqs[0]->num_computed_tokens, 0);
  h.sched.abort_request(mid_prefill);  // half-way through its prompt
  Request& decoding = h.add(prompt_of(3, 3), 30);
  Request& forked = h.add(prompt_of(3, 4), 30, 0, 2);
  for (int i = 0; i < 3; ++i) h.step();
  EXPECT_EQ(forked.seqs.size(), 2u);
  h.sched.abort_request(forked);  // forked samples sharing blocks
  // Fill the pool until something is swapped out, then abort the swapped one.
  Request& other = h.add(prompt_of(20, 5), 20);
  Request* swapped = nullptr;
  for (int i = 0; i < 40 && swapped == nullptr && h.sched.has_unfinished(); ++i) {
    h.step();
    for (Request* r : {&decoding, &other}) {
      if (!r->seqs[0]->finished() && r->seqs[0]->status == SeqStatus::kSwapped) swapped = r;
    }
  }
  ASSERT_NE(swapped, nullptr) << "expected a swap-out";
  h.sched.abort_request(*swapped);
  h.run();
  h.sched.abort_request(decoding);  // after finishing: no-op
  for (const auto& r : h.reqs) EXPECT_TRUE(r->all_finished());
  EXPECT_EQ(waiting.seqs[0]->finish_reason, FinishReason::kAbort);
  h.expect_no_leaks();
}

TEST(Scheduler, FinishedRequestsMayBeDestroyedBeforeTheNextStep) {
  Harness h(64);
  h.add(prompt_of(5, 1), 50);
  Request& b = h.add(prompt_of(5, 2), 50);
  h.add(prompt_of(5, 3), 50);
  h.step();
  h.step();
  h.sched.finish_seq(*b.seqs[0], FinishReason::kStop);
  h.reqs[1].reset();  // the engine frees a finished request at once (ASan checks no one looks at it)
  h.step();
  EXPECT_EQ(h.sched.num_running(), 2);
  for (auto& r : h.reqs) {
    if (r) h.sched.abort_request(*r);
  }
  h.expect_no_leaks();
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  SchedulerConfig cfg;
  cfg.max_model_len = 64;
  cfg.max_num_seqs = 4;
  Harness h(3, cfg, 16);
  EXPECT_THROW(h.add(prompt_of(60, 1), 5), Error);    // 65 > max_model_len
  EXPECT_THROW(h.add(prompt_of(40, 1), 10), Error);   // 49 tokens need 4 blocks of 16 > 3
  EXPECT_THROW(h.add({}, 5), Error);                  // empty prompt
  EXPECT_THROW(h.add(prompt_of(4, 1), 4, 0, 5), Error);  // 5 samples > max_num_seqs
  try {
    h.add(prompt_of(40, 1), 10);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("KV blocks"), std::string::npos);
  }
  Request& ok = h.add(prompt_of(40, 1), 9);  // 48 tokens: exactly 3 blocks
  h.run();
  EXPECT_EQ(ok.seqs[0]->num_output_tokens(), 9);
  h.expect_no_leaks();
}

}  // namespace
}  // namespace pagellm::engine
