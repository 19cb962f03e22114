// Batches in flight (pipeline parallelism, issue 10) on a fake runner: the scheduler keeps up to N
// batches in flight, never puts a sequence in two of them, never preempts one in flight, frees an
// aborted one's blocks only when its batch comes back, and the engine's outputs equal one batch
// at a time. The fake runs a batch only when its output is collected, reading every span then, so
// a batch whose memory changed or was freed while in flight shows up as a KV error (or under ASan).
#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/engine_core.h"
#include "engine/scheduler.h"
#include "fake_runner.h"

namespace pagellm {
namespace {

using testing::FakeRunner;

class PipelinedFakeRunner : public FakeRunner {
 public:
  PipelinedFakeRunner(int num_blocks, int block_size, int max_in_flight, int num_swap = 0)
      : FakeRunner(num_blocks, block_size, num_swap, 258), max_in_flight_(max_in_flight) {}

  int max_batches_in_flight() const override { return max_in_flight_; }
  void submit(const engine::SchedulerOutput& batch) override {
    if (int(queue_.size()) >= max_in_flight_) ++violations;
    for (const auto& s : batch.seqs)
      if (!in_flight_ids_.insert(s.seq_id).second) ++violations;  // a seq in two batches
    queue_.push_back(&batch);
    max_seen = std::max(max_seen, int(queue_.size()));
    if (batch.seqs.size() > 0) batch_sizes.push_back(int(batch.seqs.size()));
  }
  engine::ModelRunnerOutput wait_next() override {
    if (queue_.empty()) throw_error(ErrorKind::kInternal, "fake: nothing in flight");
    const engine::SchedulerOutput* batch = queue_.front();
    queue_.erase(queue_.begin());
    for (const auto& s : batch->seqs) in_flight_ids_.erase(s.seq_id);
    return execute(*batch);  // now: everything it points to must still be as it was
  }

  ~PipelinedFakeRunner() override {
    if (report != nullptr) *report = kv_errors + violations;
  }

  int violations = 0;
  int max_seen = 0;
  std::vector<int> batch_sizes;
  int* report = nullptr;  // set: receives kv_errors + violations when the runner goes

 private:
  int max_in_flight_;
  std::vector<const engine::SchedulerOutput*> queue_;
  std::set<int64_t> in_flight_ids_;
};

struct Fixture {
  explicit Fixture(int max_in_flight, int num_blocks = 64, EngineArgs args = {}, int num_swap = 0) {
    auto runner = std::make_unique<PipelinedFakeRunner>(num_blocks, 16, max_in_flight, num_swap);
    fake = runner.get();
    io::GenerationConfig gen;
    gen.eos_token_ids = {257};
    core = std::make_unique<EngineCore>(args, std::move(runner), tok::Tokenizer::byte_level_demo(),
                                        gen, "fake");
  }
  std::map<std::string, RequestOutput> run() {
    std::map<std::string, RequestOutput> done;
    for (int i = 0; i < 100000 && core->has_unfinished(); ++i)
      for (RequestOutput& o : core->step())
        if (o.finished) done[o.request_id] = std::move(o);
    EXPECT_FALSE(core->has_unfinished());
    return done;
  }
  void expect_clean() {
    EXPECT_EQ(core->kv_cache().num_free_blocks(), core->kv_cache().num_blocks()) << "KV leaked";
    EXPECT_EQ(core->kv_cache().num_seqs(), 0);
    EXPECT_EQ(fake->kv_errors, 0) << "a batch in flight read changed memory or KV";
    EXPECT_EQ(fake->violations, 0) << "in-flight limit exceeded or a seq in two batches";
  }
  PipelinedFakeRunner* fake = nullptr;
  std::unique_ptr<EngineCore> core;
};

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

// A mixed load: prompts from 1 to ~60 tokens, some stopping on a stop string, a sampled n=2.
void add_mixed(EngineCore& core, int num_requests) {
  for (int i = 0; i < num_requests; ++i) {
    SamplingParams p = greedy(5 + (i * 7) % 23);
    if (i % 5 == 3)  // the fake emits bytes 3..202: a lowercase letter comes soon
      for (char c = 'a'; c <= 'z'; ++c) p.stop.emplace_back(1, c);
    if (i % 7 == 6) {
      p.n = 2;
      p.temperature = 0.8f;
      p.seed = 11 + i;
    }
    std::string prompt(size_t(1 + (i * 13) % 60), char('a' + i % 26));
    prompt.push_back('?');
    core.add_request(std::string(1, 'r').append(std::to_string(i)), PromptInput::from_text(prompt),
                     p, {}, false);
  }
}

std::map<std::string, RequestOutput> mixed_outputs(int max_in_flight, int num_blocks,
                                                   int num_swap) {
  EngineArgs args;
  args.max_num_batched_tokens = 48;  // chunked prefill of the longer prompts
  Fixture f(max_in_flight, num_blocks, args, num_swap);
  add_mixed(*f.core, 24);
  auto done = f.run();
  f.expect_clean();
  EXPECT_EQ(done.size(), 24u);
  return done;
}

void expect_same_outputs(const std::map<std::string, RequestOutput>& want,
                         const std::map<std::string, RequestOutput>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [id, w] : want) {
    const RequestOutput& g = got.at(id);
    ASSERT_EQ(w.outputs.size(), g.outputs.size()) << what << " " << id;
    for (size_t k = 0; k < w.outputs.size(); ++k) {
      EXPECT_EQ(w.outputs[k].token_ids, g.outputs[k].token_ids) << what << " " << id;
      EXPECT_EQ(w.outputs[k].text, g.outputs[k].text) << what << " " << id;
      EXPECT_EQ(w.outputs[k].finish_reason, g.outputs[k].finish_reason) << what << " " << id;
    }
  }
}

TEST(PipelineBatches, OutputsEqualOneBatchAtATime) {
  const auto ref = mixed_outputs(1, 256, 0);
  int num_stops = 0;
  for (const auto& [id, o] : ref) num_stops += o.outputs[0].finish_reason == FinishReason::kStop;
  EXPECT_GT(num_stops, 0) << "the load should include stop strings";
  for (int n : {2, 4}) expect_same_outputs(ref, mixed_outputs(n, 256, 0), "N=" + std::to_string(n));
}

TEST(PipelineBatches, KeepsTheLimitAndSplitsTheRunningSequences) {
  for (int n : {2, 3}) {
    Fixture f(n, 256);
    for (int i = 0; i < 12; ++i) {
      const std::string id = std::to_string(i);
      f.core->add_request(id, PromptInput::from_text(std::string("hello ").append(id)), greedy(20),
                          {}, false);
    }
    f.run();
    f.expect_clean();
    EXPECT_EQ(f.fake->max_seen, n);
    // Decodes are spread over the batches: none takes all twelve sequences.
    EXPECT_LE(*std::max_element(f.fake->batch_sizes.begin(), f.fake->batch_sizes.end()),
              (12 + n - 1) / n + 1);
  }
}

TEST(PipelineBatches, PrefixCacheHitsWithBatchesInFlight) {
  std::map<std::string, RequestOutput> outs[2];
  for (int k = 0; k < 2; ++k) {
    Fixture f(k == 0 ? 1 : 2);
    const std::string shared(70, 'p');
    f.core->add_request("first", PromptInput::from_text(shared + "0"), greedy(6), {}, false);
    f.run();
    for (int i = 0; i < 6; ++i) {
      const std::string id = std::to_string(i);
      f.core->add_request(id, PromptInput::from_text(shared + id), greedy(6), {}, false);
    }
    outs[k] = f.run();
    EXPECT_EQ(outs[k]["3"].num_cached_tokens, 64) << "four full blocks of the shared prefix";
    f.expect_clean();
  }
  expect_same_outputs(outs[0], outs[1], "prefix hits");
}

TEST(PipelineBatches, OneSequenceKeepsOneBatchInFlight) {
  Fixture f(4);
  f.core->add_request("solo", PromptInput::from_text("just one"), greedy(12), {}, false);
  auto done = f.run();
  EXPECT_EQ(done["solo"].outputs[0].token_ids.size(), 12u);
  EXPECT_EQ(f.fake->max_seen, 1);
  f.expect_clean();
}

TEST(PipelineBatches, AbortOfARequestInFlight) {
  Fixture ref(1);
  Fixture f(2);
  for (Fixture* x : {&ref, &f}) {
    x->core->add_request("a", PromptInput::from_text("first"), greedy(30), {}, true);
    x->core->add_request("b", PromptInput::from_text("second"), greedy(30), {}, false);
  }
  // "a" goes into the first batch; the engine returns without waiting while there is room.
  EXPECT_TRUE(f.core->step().empty());
  EXPECT_GE(f.core->scheduler().num_batches_in_flight(), 1);
  const int free_before = f.core->kv_cache().num_free_blocks();
  EXPECT_TRUE(f.core->abort_request("a"));
  // Its blocks stay allocated while its batch is in flight.
  EXPECT_EQ(f.core->kv_cache().num_free_blocks(), free_before);
  bool saw_abort = false;
  for (const RequestOutput& o : f.core->step())
    if (o.request_id == "a") {
      saw_abort = o.finished && o.outputs.at(0).finish_reason == FinishReason::kAbort;
    }
  EXPECT_TRUE(saw_abort);
  ref.core->abort_request("a");
  const auto want = ref.run();
  const auto got = f.run();
  EXPECT_EQ(got.at("b").outputs[0].token_ids, want.at("b").outputs[0].token_ids);
  EXPECT_EQ(f.core->take_stats().requests_finished_abort, 1u);
  f.expect_clean();
}

TEST(PipelineBatches, AbortEverythingInFlightThenDrains) {
  Fixture f(2);
  add_mixed(*f.core, 6);
  f.core->step();
  f.core->step();
  f.core->abort_all();
  EXPECT_EQ(f.core->num_unfinished(), 0);
  EXPECT_TRUE(f.core->has_unfinished()) << "batches in flight still have to come back";
  f.run();
  f.expect_clean();
}

TEST(PipelineBatches, PreemptionWhileInFlightKeepsOutputs) {
  // Few blocks: sequences are preempted (recomputed, or swapped) while others are in flight.
  const auto ref = mixed_outputs(1, 256, 0);
  for (int swap : {0, 32}) {
    EngineArgs args;
    args.max_num_batched_tokens = 48;
    Fixture f(2, 14, args, swap);
    add_mixed(*f.core, 24);
    const auto got = f.run();
    f.expect_clean();
    EXPECT_GT(f.core->counters().num_preemptions, 0u) << "swap " << swap;
    expect_same_outputs(ref, got, "preempted, swap " + std::to_string(swap));
  }
}

TEST(PipelineBatches, DestroyingTheEngineWithBatchesInFlight) {
  Fixture f(3);
  add_mixed(*f.core, 6);
  f.core->step();
  f.core->step();
  EXPECT_GE(f.core->scheduler().num_batches_in_flight(), 2);
  int errors = -1;
  f.fake->report = &errors;
  f.core.reset();  // collects them first: the fake reads every batch's memory then
  EXPECT_EQ(errors, 0);
}

// The scheduler alone: the limit, disjoint batches, and deferred frees.
TEST(PipelineBatches, SchedulerSkipsSequencesInFlight) {
  kv::KVCacheManager kv({64, 16, true, 0});
  engine::SchedulerConfig cfg;
  cfg.max_batches_in_flight = 2;
  engine::Scheduler sched(cfg, kv);
  std::vector<std::unique_ptr<engine::Request>> reqs;
  for (int i = 0; i < 4; ++i) {
    auto r = std::make_unique<engine::Request>();
    r->request_id = "r" + std::to_string(i);
    r->arrival_index = uint64_t(i);
    r->params = greedy(4);
    r->prompt_token_ids = {5, 6, 7, int32_t(8 + i)};
    sched.add_request(*r);
    reqs.push_back(std::move(r));
  }
  auto ids = [](const engine::SchedulerOutput& o) {
    std::set<int64_t> s;
    for (const auto& q : o.seqs) s.insert(q.seq_id);
    return s;
  };
  const std::set<int64_t> a = ids(sched.schedule());
  const std::set<int64_t> b = ids(sched.schedule());
  EXPECT_EQ(a.size(), 2u);  // four ready over two free slots
  EXPECT_EQ(b.size(), 2u);
  for (int64_t id : a) EXPECT_EQ(b.count(id), 0u);
  EXPECT_THROW(sched.schedule(), Error);  // the limit
  // Aborting a sequence in flight keeps its blocks until its batch is applied.
  engine::Sequence& victim = *reqs[0]->seqs[0];
  ASSERT_TRUE(victim.in_flight);
  const int free_before = kv.num_free_blocks();
  sched.abort_request(*reqs[0]);
  EXPECT_EQ(kv.num_free_blocks(), free_before);
  engine::ModelRunnerOutput out;
  out.sampled_token_ids.assign(2, 42);
  out.sampled_logprobs.resize(2);
  std::vector<engine::NewToken> tokens;
  sched.update_from_output(out, tokens);
  EXPECT_EQ(tokens.size(), 1u);  // the aborted one gets none
  EXPECT_GT(kv.num_free_blocks(), free_before);
  // Only the first batch's live sequence is ready again: the second is still in flight.
  const std::set<int64_t> c = ids(sched.schedule());
  EXPECT_EQ(c.size(), 1u);
  for (int64_t id : c) EXPECT_EQ(a.count(id), 1u);
}

}  // namespace
}  // namespace pagellm
