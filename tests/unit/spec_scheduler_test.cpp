// The scheduler's side of speculative decoding with hand-built runner outputs (no model): a decode
// row carries the last token plus its drafts, drafts take only the budget the other decodes leave,
// never more than max_tokens can use and never stale ones; verification rolls num_computed_tokens
// back past the rejected drafts, and only verified tokens reach the prefix cache.
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/scheduler.h"

namespace pagellm::engine {
namespace {

struct SpecHarness {
  explicit SpecHarness(int budget = 64) : kv({32, 4, true, 0}), sched(config(budget), kv) {}
  static SchedulerConfig config(int budget) {
    SchedulerConfig c;
    c.max_num_batched_tokens = budget;
    return c;
  }
  Sequence& add(std::vector<int32_t> prompt, int max_tokens) {
    auto req = std::make_unique<Request>();
    req->request_id = std::to_string(reqs.size());
    req->arrival_index = reqs.size();
    req->params.temperature = 0.0f;
    req->params.max_tokens = max_tokens;
    req->prompt_token_ids = std::move(prompt);
    sched.add_request(*req);
    reqs.push_back(std::move(req));
    return *reqs.back()->seqs.front();
  }
  // Runs the prompts' prefill, each sampling `first`.
  void prefill(int32_t first) {
    const SchedulerOutput& out = sched.schedule();
    ModelRunnerOutput res;
    res.sampled_token_ids.assign(out.seqs.size(), first);
    res.sampled_logprobs.resize(out.seqs.size());
    std::vector<NewToken> nt;
    sched.update_from_output(res, nt);
  }
  static void propose(Sequence& seq, std::vector<int32_t> drafts) {
    seq.spec_token_ids = std::move(drafts);
    seq.spec_base_len = seq.num_tokens();
  }
  kv::KVCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Request>> reqs;
};

TEST(SpecScheduler, DraftRowVerifiesAndRollsBack) {
  SpecHarness h;
  Sequence& seq = h.add({1, 2, 3, 4, 5, 6, 7}, 20);
  h.prefill(10);
  ASSERT_EQ(seq.num_computed_tokens, 7);
  std::vector<std::pair<Sequence*, int>> candidates;
  h.sched.spec_candidates(candidates);
  ASSERT_EQ(candidates.size(), 1u);
  EXPECT_EQ(candidates[0].second, 18);  // 20 tokens, 1 generated, the step's own token
  SpecHarness::propose(seq, {11, 12, 13});
  const SchedulerOutput& out = h.sched.schedule();
  ASSERT_EQ(out.seqs.size(), 1u);
  const ScheduledSeq& s = out.seqs[0];
  EXPECT_EQ(std::vector<int32_t>(s.token_ids.begin(), s.token_ids.end()),
            (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(s.num_spec_tokens, 3);
  EXPECT_EQ(s.num_computed_tokens, 7);
  EXPECT_TRUE(s.needs_sample);
  EXPECT_EQ(out.num_scheduled_tokens, 4);
  EXPECT_GE(s.block_tables[0].size() * 4, 11u) << "slots for every draft";
  EXPECT_EQ(seq.num_tokens(), 8) << "drafts are not the sequence's tokens yet";

  ModelRunnerOutput res;
  res.sampled_token_ids = {-1};
  res.sampled_logprobs.resize(1);
  res.spec_token_ids = {{11, 99}};  // draft 11 accepted, 12 rejected and replaced by 99
  res.spec_logprobs = {{{11, -0.1f, {}}, {99, -0.2f, {}}}};
  std::vector<NewToken> nt;
  h.sched.update_from_output(res, nt);
  EXPECT_EQ(seq.token_ids, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 10, 11, 99}));
  EXPECT_EQ(seq.num_computed_tokens, 9) << "the last token and the accepted draft";
  ASSERT_EQ(nt.size(), 2u);
  EXPECT_EQ(nt[0].token_id, 11);
  EXPECT_EQ(nt[0].num_tokens, 9);
  EXPECT_EQ(nt[1].token_id, 99);
  EXPECT_EQ(nt[1].num_tokens, 10);
  EXPECT_FLOAT_EQ(nt[1].logprobs->logprob, -0.2f);
  EXPECT_TRUE(seq.spec_token_ids.empty());
  const SpecDecodeCounters& c = h.sched.spec_counters();
  EXPECT_EQ(c.num_drafts, 1u);
  EXPECT_EQ(c.num_draft_tokens, 3u);
  EXPECT_EQ(c.num_accepted_tokens, 1u);
  EXPECT_EQ(c.accepted_per_pos, (std::vector<uint64_t>{1, 0, 0}));

  // Only verified tokens are cached: blocks [0, 4) and [4, 8) (9 computed tokens). A request whose
  // tokens agree with the rejected draft in block 2 must not find it.
  Sequence& probe = h.add({1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15}, 2);
  const kv::ComputedBlocks hit = h.kv.get_computed_blocks({probe.seq_id, probe.token_ids, 0});
  EXPECT_EQ(hit.num_computed_tokens(), 8);
  h.kv.free(probe.seq_id);
}

TEST(SpecScheduler, DraftsTakeOnlyTheBudgetOtherDecodesLeave) {
  SpecHarness h(4);
  Sequence& a = h.add({1, 2, 3}, 30);
  Sequence& b = h.add({4, 5}, 30);
  h.prefill(7);
  SpecHarness::propose(a, {8, 9, 10});
  SpecHarness::propose(b, {8, 9, 10});
  const SchedulerOutput& out = h.sched.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].num_spec_tokens, 2) << "one token of the budget is kept for b";
  EXPECT_EQ(out.seqs[1].num_spec_tokens, 0);
  EXPECT_EQ(out.seqs[1].token_ids.size(), 1u);
  EXPECT_EQ(out.num_scheduled_tokens, 4);
}

TEST(SpecScheduler, StaleOrUnusableDraftsAreIgnored) {
  SpecHarness h;
  Sequence& a = h.add({1, 2, 3}, 3);  // after its first token, room for 1 draft only
  Sequence& b = h.add({4, 5, 6}, 30);
  h.prefill(7);
  SpecHarness::propose(a, {8, 9, 10});
  SpecHarness::propose(b, {8, 9});
  b.spec_base_len = 2;  // drafted for another length: stale
  const SchedulerOutput& out = h.sched.schedule();
  ASSERT_EQ(out.seqs.size(), 2u);
  EXPECT_EQ(out.seqs[0].num_spec_tokens, 1)
      << "max_tokens 3: one generated, one draft and its successor";
  EXPECT_EQ(out.seqs[1].num_spec_tokens, 0);
}

TEST(SpecScheduler, ARunnerThatVerifiesNothingIsAnInternalError) {
  SpecHarness h;
  Sequence& seq = h.add({1, 2, 3}, 10);
  h.prefill(7);
  SpecHarness::propose(seq, {8, 9});
  h.sched.schedule();
  ModelRunnerOutput res;
  res.sampled_token_ids = {5};
  res.sampled_logprobs.resize(1);
  std::vector<NewToken> nt;
  EXPECT_THROW(h.sched.update_from_output(res, nt), Error);
}

}  // namespace
}  // namespace pagellm::engine
