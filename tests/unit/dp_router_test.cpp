// Data parallelism: the routing decision (pure), the stateful router (loads, owners, affinity), the
// router in front of fake engines (abort routing, a failed replica, per-replica metrics), and
// greedy outputs of two stories260K replicas equal to one engine's.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/error.h"
#include "engine/dp_router.h"
#include "engine/stats.h"
#include "pagellm/llm.h"
#include "server/dp_engine_client.h"
#include "server/metrics.h"
#include "server_fake_engine.h"

namespace pagellm {
namespace {

using engine::DpRouter;
using engine::ReplicaLoad;
using engine::RouterConfig;

std::vector<int32_t> tokens(int num, int32_t first) {
  std::vector<int32_t> ids;
  for (int i = 0; i < num; ++i) ids.push_back(first + i);
  return ids;
}

TEST(DpRouterPolicy, LeastOutstandingTokensWins) {
  const std::vector<ReplicaLoad> loads = {{100, 0, true}, {50, 5, true}, {70, 0, true}};
  EXPECT_EQ(engine::least_loaded_replica(loads), 1);
  EXPECT_EQ(engine::choose_replica(loads, -1, 2048), 1);
}

TEST(DpRouterPolicy, TiesGoToTheLessUsedThenLowestReplica) {
  EXPECT_EQ(engine::least_loaded_replica(
                std::vector<ReplicaLoad>{{0, 3, true}, {0, 2, true}, {0, 2, true}}),
            1);
  EXPECT_EQ(engine::least_loaded_replica(std::vector<ReplicaLoad>{{0, 0, true}, {0, 0, true}}), 0);
}

TEST(DpRouterPolicy, DeadReplicasAreSkipped) {
  EXPECT_EQ(engine::least_loaded_replica(std::vector<ReplicaLoad>{{0, 0, false}, {900, 0, true}}),
            1);
  EXPECT_EQ(engine::least_loaded_replica(std::vector<ReplicaLoad>{{0, 0, false}, {0, 0, false}}),
            -1);
  // Affinity to a dead replica is ignored.
  EXPECT_EQ(
      engine::choose_replica(std::vector<ReplicaLoad>{{0, 0, false}, {900, 0, true}}, 0, 1 << 20),
      1);
}

TEST(DpRouterPolicy, AffinityHoldsOnlyWithinTheSlack) {
  const std::vector<ReplicaLoad> loads = {{100, 0, true}, {1100, 0, true}};
  EXPECT_EQ(engine::choose_replica(loads, 1, 1000), 1);  // exactly at the bound
  EXPECT_EQ(engine::choose_replica(loads, 1, 999), 0);
  EXPECT_EQ(engine::choose_replica(loads, 0, 0), 0);
  EXPECT_EQ(engine::choose_replica(loads, 7, 1 << 20), 0);  // out of range: no affinity
}

TEST(DpRouterPolicy, PrefixHashesCoverWholeBlocksOnly) {
  const auto ids = tokens(40, 3);
  EXPECT_EQ(engine::prefix_block_hashes(ids, 16, 8, "").size(), 2u);
  EXPECT_EQ(engine::prefix_block_hashes(ids, 16, 1, "").size(), 1u);
  EXPECT_TRUE(engine::prefix_block_hashes(tokens(15, 3), 16, 8, "").empty());
  // A chain: equal first blocks hash equally, the salt separates them.
  const auto a = engine::prefix_block_hashes(ids, 16, 8, "");
  auto other = ids;
  other[20] = 999;
  const auto b = engine::prefix_block_hashes(other, 16, 8, "");
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
  EXPECT_NE(engine::prefix_block_hashes(ids, 16, 8, "salt")[0], a[0]);
}

TEST(DpRouterPolicy, RequestCost) {
  SamplingParams p;
  p.max_tokens = 16;
  EXPECT_EQ(engine::request_cost(10, p, 0), 26);
  p.n = 2;
  EXPECT_EQ(engine::request_cost(10, p, 0), 42);
  p.best_of = 3;
  EXPECT_EQ(engine::request_cost(10, p, 0), 58);
  p.best_of.reset();
  p.n = 1;
  EXPECT_EQ(engine::request_cost(10, p, 20), 20);  // generation capped by the context left
  EXPECT_EQ(engine::request_cost(30, p, 20), 30);
}

TEST(DpRouter, SpreadsByOutstandingTokensAndReleasesThem) {
  DpRouter router(2, RouterConfig{});
  EXPECT_EQ(router.route("a", tokens(4, 3), "", 100), 0);
  EXPECT_EQ(router.route("b", tokens(4, 50), "", 30), 1);
  EXPECT_EQ(router.route("c", tokens(4, 90), "", 30), 1);   // 30 < 100
  EXPECT_EQ(router.route("d", tokens(4, 130), "", 10), 1);  // 60 < 100
  EXPECT_EQ(router.loads()[0].outstanding_tokens, 100);
  EXPECT_EQ(router.loads()[1].outstanding_tokens, 70);
  router.on_progress("a", 60);
  EXPECT_EQ(router.loads()[0].outstanding_tokens, 40);
  router.on_progress("a", 1000);  // clamped at what it was charged
  EXPECT_EQ(router.loads()[0].outstanding_tokens, 0);
  router.finish("b");
  router.finish("b");  // twice: ignored
  EXPECT_EQ(router.loads()[1].outstanding_tokens, 40);
  EXPECT_EQ(router.num_in_flight(), 3);
}

TEST(DpRouter, OwnerRoutesAborts) {
  DpRouter router(3, RouterConfig{});
  router.route("x", tokens(4, 3), "", 10);
  router.route("y", tokens(4, 3), "", 10);
  router.route("z", tokens(4, 3), "", 10);
  EXPECT_EQ(router.owner("x"), 0);
  EXPECT_EQ(router.owner("y"), 1);
  EXPECT_EQ(router.owner("z"), 2);
  EXPECT_EQ(router.owner("nope"), -1);
  router.finish("y");
  EXPECT_EQ(router.owner("y"), -1);
  EXPECT_THROW(router.route("x", tokens(4, 3), "", 10), Error);  // still in flight
  EXPECT_EQ(router.route("y", tokens(4, 3), "", 10), 1);         // finished ids may come back
}

TEST(DpRouter, PrefixAffinityWithinSlack) {
  RouterConfig config;
  config.block_size = 16;
  config.affinity_slack_tokens = 500;
  DpRouter router(2, config);
  const auto shared = tokens(32, 3);
  auto follow_up = shared;
  follow_up.push_back(7);
  EXPECT_EQ(router.route("a", shared, "", 300), 0);
  // Replica 1 is idle, but replica 0 holds the prefix and is only 300 tokens busier.
  EXPECT_EQ(router.route("b", follow_up, "", 150), 0);
  // Now 450 over the idle replica... still within 500.
  EXPECT_EQ(router.route("c", shared, "", 100), 0);
  // 550 over: the slack bound sends it to the least loaded replica, which now remembers it.
  EXPECT_EQ(router.route("d", shared, "", 10), 1);
  EXPECT_EQ(router.affinity_replica(engine::prefix_block_hashes(shared, 16, 8, "")), 1);
  // A different salt never shares cache entries, so it has no affinity.
  EXPECT_EQ(router.route("e", shared, "tenant", 10), 1);  // 560 vs 20: least loaded
  // Short prompts (no full block) carry no affinity.
  EXPECT_EQ(router.route("f", tokens(8, 3), "", 1), 1);
}

TEST(DpRouter, LongestRememberedPrefixWins) {
  RouterConfig config;
  config.affinity_slack_tokens = 0;
  DpRouter router(2, config);
  const auto base = tokens(16, 3);                 // block h0
  const auto longer = tokens(48, 3);               // blocks h0 h1 h2
  EXPECT_EQ(router.route("a", base, "", 10), 0);   // h0 → 0
  EXPECT_EQ(router.route("c", longer, "", 0), 1);  // 0 is busier than the slack: h0 h1 h2 → 1
  router.finish("a");
  EXPECT_EQ(router.route("d", base, "", 5), 1);  // h0 → 1, loads equal
  EXPECT_EQ(router.route("e", base, "", 0), 0);  // 1 is busier: h0 → 0
  EXPECT_EQ(router.affinity_replica(engine::prefix_block_hashes(base, 16, 8, "")), 0);
  // h2 (the longest match) still points at 1, whatever h0 says.
  EXPECT_EQ(router.affinity_replica(engine::prefix_block_hashes(longer, 16, 8, "")), 1);
}

TEST(DpRouter, FailedReplicaGetsNothingAndLosesAffinity) {
  DpRouter router(2, RouterConfig{});
  const auto shared = tokens(32, 3);
  EXPECT_EQ(router.route("a", shared, "", 10), 0);
  router.set_healthy(0, false);
  EXPECT_EQ(router.affinity_replica(engine::prefix_block_hashes(shared, 16, 8, "")), -1);
  EXPECT_EQ(router.route("b", shared, "", 10), 1);
  EXPECT_EQ(router.route("c", tokens(4, 3), "", 10), 1);
  router.set_healthy(1, false);
  EXPECT_EQ(router.route("d", tokens(4, 3), "", 10), -1);
  EXPECT_EQ(router.owner("d"), -1);
  EXPECT_EQ(router.num_in_flight(), 3);
}

TEST(DpRouter, AffinityMapIsBounded) {
  RouterConfig config;
  config.max_affinity_entries = 4;
  DpRouter router(1, config);
  for (int i = 0; i < 10; ++i) router.route(std::to_string(i), tokens(16, 3 + 100 * i), "", 1);
  EXPECT_EQ(router.affinity_replica(engine::prefix_block_hashes(tokens(16, 3), 16, 8, "")), -1);
  EXPECT_EQ(router.affinity_replica(engine::prefix_block_hashes(tokens(16, 903), 16, 8, "")), 0);
}

TEST(DpRouter, NeedsAReplica) { EXPECT_THROW(DpRouter(0, RouterConfig{}), Error); }

// ---- The router in front of fake engines ----

struct FakeReplicas {
  std::vector<server::testing::FakeEngine*> fakes;
  std::unique_ptr<server::DataParallelClient> client;
  explicit FakeReplicas(int n) {
    std::vector<std::unique_ptr<server::EngineClient>> replicas;
    for (int i = 0; i < n; ++i) {
      auto f = std::make_unique<server::testing::FakeEngine>(256, std::chrono::milliseconds(2));
      fakes.push_back(f.get());
      replicas.push_back(std::move(f));
    }
    client = std::make_unique<server::DataParallelClient>(std::move(replicas), RouterConfig{});
  }
};

struct Collector {
  std::mutex mutex;
  std::condition_variable cv;
  std::map<std::string, RequestOutput> finished;
  OutputCallback callback() {
    return [this](RequestOutput&& out) {
      if (!out.finished) return;
      std::lock_guard lock(mutex);
      finished[out.request_id] = std::move(out);
      cv.notify_all();
    };
  }
  bool wait_for(size_t n) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return finished.size() >= n; });
  }
};

SamplingParams long_params() {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 200;
  return p;
}

TEST(DataParallelClient, SpreadsRequestsAndRoutesAbortsToTheOwner) {
  FakeReplicas r(2);
  Collector c;
  r.client->add_request("a", PromptInput::from_ids(tokens(5, 3)), long_params(), c.callback(), {});
  r.client->add_request("b", PromptInput::from_ids(tokens(5, 40)), long_params(), c.callback(), {});
  EXPECT_EQ(r.fakes[0]->num_added(), 1);
  EXPECT_EQ(r.fakes[1]->num_added(), 1);
  EXPECT_THROW(
      r.client->add_request("a", PromptInput::from_text("x"), long_params(), c.callback(), {}),
      Error);
  r.client->abort_request("b");
  r.client->abort_request("unknown");
  EXPECT_EQ(r.fakes[0]->num_abort_calls(), 0);
  EXPECT_EQ(r.fakes[1]->num_abort_calls(), 1);
  r.client->abort_request("a");
  ASSERT_TRUE(c.wait_for(2));
  EXPECT_EQ(c.finished["b"].outputs[0].finish_reason, FinishReason::kAbort);
  for (const ReplicaLoad& l : r.client->loads()) EXPECT_EQ(l.outstanding_tokens, 0);
}

TEST(DataParallelClient, FailedReplicaMakesItUnhealthyAndGetsNoRequests) {
  FakeReplicas r(2);
  Collector c;
  EXPECT_TRUE(r.client->healthy());
  r.fakes[0]->set_healthy(false);
  EXPECT_FALSE(r.client->healthy());
  SamplingParams p;
  p.max_tokens = 2;
  for (int i = 0; i < 3; ++i)
    r.client->add_request(std::to_string(i), PromptInput::from_ids(tokens(3, 3 + i)), p,
                          c.callback(), {});
  EXPECT_EQ(r.fakes[0]->num_added(), 0);
  EXPECT_EQ(r.fakes[1]->num_added(), 3);
  ASSERT_TRUE(c.wait_for(3));
  r.fakes[1]->set_healthy(false);
  EXPECT_THROW(r.client->add_request("late", PromptInput::from_text("hi"), p, c.callback(), {}),
               Error);
}

TEST(DataParallelClient, RejectedRequestReleasesItsLoad) {
  FakeReplicas r(2);
  Collector c;
  r.fakes[0]->reject_next();
  EXPECT_THROW(
      r.client->add_request("a", PromptInput::from_text("hello"), long_params(), c.callback(), {}),
      Error);
  for (const ReplicaLoad& l : r.client->loads()) EXPECT_EQ(l.outstanding_tokens, 0);
  r.client->add_request("a", PromptInput::from_text("hello"), long_params(), c.callback(),
                        {});  // id free again
  r.client->abort_request("a");
  ASSERT_TRUE(c.wait_for(1));
}

TEST(DataParallelClient, MetricsShowEveryReplicaAndTheSum) {
  FakeReplicas r(2);
  Collector c;
  SamplingParams p;
  p.max_tokens = 3;
  // In pairs: each pair starts on idle replicas, so one request of it goes to each.
  for (int i = 0; i < 4; ++i) {
    r.client->add_request(std::to_string(i), PromptInput::from_ids(tokens(3, 3 + i)), p,
                          c.callback(), {});
    if (i % 2 == 1) {
      ASSERT_TRUE(c.wait_for(size_t(i) + 1));
    }
  }
  const std::vector<EngineStats> per = r.client->take_engine_stats();
  ASSERT_EQ(per.size(), 2u);
  server::Metrics metrics("m");
  metrics.set_engine_stats(per);
  const std::string text = metrics.render(0, 0);
  EXPECT_NE(
      text.find("pagellm:request_success_total{model_name=\"m\",finished_reason=\"length\"} 4\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("pagellm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason="
                      "\"length\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("pagellm:request_success_total{model_name=\"m\",engine=\"1\",finished_reason="
                      "\"length\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("pagellm:num_requests_running{model_name=\"m\",engine=\"1\"} 0\n"),
            std::string::npos);
}

TEST(DataParallelStats, SumStats) {
  EngineStats a, b;
  a.num_running = 2;
  a.num_kv_blocks = 100;
  a.kv_usage = 0.5;
  a.prompt_tokens = 7;
  b.num_running = 1;
  b.num_kv_blocks = 300;
  b.kv_usage = 0.1;
  b.prompt_tokens = 3;
  b.ttft_samples = {0.25};
  const EngineStats s = engine::sum_stats({a, b});
  EXPECT_EQ(s.num_running, 3);
  EXPECT_EQ(s.num_kv_blocks, 400);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.2);
  EXPECT_EQ(s.prompt_tokens, 10u);
  EXPECT_EQ(s.ttft_samples.size(), 1u);
}

// ---- Two stories260K replicas on the CPU ----

TEST(DataParallelEngine, TwoReplicasGiveTheSameGreedyOutputsAsOne) {
  const std::string model = std::string(PAGELLM_SHARED_DIR) + "/models/stories260K";
  if (!std::filesystem::exists(model + "/config.json")) GTEST_SKIP() << "stories260K not present";
  EngineArgs args;
  args.model = model;
  args.num_threads = 1;
  const char* names[] = {"Lily", "Tom", "Sue", "Max", "Ben", "Anna"};
  std::vector<PromptInput> prompts;
  for (int i = 0; i < 12; ++i)
    prompts.push_back(
        PromptInput::from_text(std::string("Once upon a time, ") + names[i % 6] +
                               (i % 2 ? " went to the park and saw a big dog." : " had a toy")));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 24;
  p.ignore_eos = true;
  const std::vector<RequestOutput> one = LLM(args).generate(prompts, p);
  args.data_parallel_size = 2;
  LLM two(args);
  EXPECT_EQ(two.num_replicas(), 2);
  const std::vector<RequestOutput> both = two.generate(prompts, p);
  ASSERT_EQ(both.size(), one.size());
  // Both replicas took part: the first one prefilled some of the prompts, not all.
  uint64_t num_prompt_tokens = 0;
  for (const RequestOutput& out : one) num_prompt_tokens += out.prompt_token_ids.size();
  const uint64_t first_replica = two.engine().take_stats().prompt_tokens;
  EXPECT_GT(first_replica, 0u);
  EXPECT_LT(first_replica, num_prompt_tokens);
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(both[i].outputs.size(), 1u);
    EXPECT_EQ(both[i].outputs[0].token_ids, one[i].outputs[0].token_ids) << "prompt " << i;
    EXPECT_EQ(both[i].outputs[0].text, one[i].outputs[0].text);
  }
}

TEST(DataParallelEngine, ValidatesTheSize) {
  EngineArgs args;
  args.data_parallel_size = 0;
  EXPECT_THROW(args.validate(), Error);
  args.data_parallel_size = 2;
  args.nnodes = 2;
  EXPECT_THROW(args.validate(), Error);
  args.nnodes = 1;
  EXPECT_NO_THROW(args.validate());
  EXPECT_EQ(args.for_replica(1).data_parallel_rank, 1);
}

}  // namespace
}  // namespace pagellm
