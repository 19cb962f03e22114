// How parallel groups fail: a rank that throws takes the whole group down (RankThreads' failure
// hook aborts the communicators), a rank that never returns is abandoned after the grace period
// instead of hanging the caller, and the PAGELLM_INJECT_FAULT test hook that the GPU runs use.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "common/error.h"
#include "pagellm/llm.h"
#include "parallel/detachable_tasks.h"
#include "parallel/fault_injection.h"
#include "parallel/rank_threads.h"
#include "parallel/thread_group.h"

namespace pagellm {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kModels = std::filesystem::path(PAGELLM_SHARED_DIR) / "models";

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(RankThreads, AFailingRankAbortsTheOthersAndItsErrorIsRethrown) {
  auto group = parallel::ThreadGroup::create(3, 60s);
  parallel::RankThreads threads(3);
  std::atomic<int> hooks{0};
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] {
    threads.run(
        [&](int r) {
          float x = 1;
          if (r == 2) throw_error(ErrorKind::kInternal, "rank two broke");
          group->communicator(r)->all_reduce_sum(&x, 1, DType::kF32, nullptr);  // blocks until aborted
        },
        [&](const std::string& why) {
          ++hooks;
          group->abort(why);
        });
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_NE(e.find("rank two broke"), std::string::npos) << e;
  EXPECT_EQ(hooks.load(), 1);
  EXPECT_FALSE(threads.abandoned());
  // The threads stay usable for the next step.
  std::atomic<int> ran{0};
  threads.run([&](int) { ++ran; }, [](const std::string&) {});
  EXPECT_EQ(ran.load(), 3);
}

TEST(RankThreads, ARankThatNeverReturnsIsAbandonedAfterTheGracePeriod) {
  // The job outlives this test's frame: the abandoned thread is still inside it when run() returns.
  static std::atomic<bool> release{false};
  static const std::function<void(int)> job = [](int r) {
    if (r == 0) throw_error(ErrorKind::kInternal, "rank zero broke");
    while (!release) std::this_thread::sleep_for(5ms);  // ignores the abort, as a stuck GPU would
  };
  static const std::function<void(const std::string&)> hook = [](const std::string&) {};
  auto threads = std::make_unique<parallel::RankThreads>(2, 200ms);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(error_of([&] { threads->run(job, hook); }).find("rank zero broke"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(threads->abandoned());
  EXPECT_TRUE(parallel::any_ranks_abandoned());
  // Later steps fail at once; destroying the group does not wait for the stuck rank.
  EXPECT_NE(error_of([&] { threads->run(job, hook); }).find("rank zero broke"), std::string::npos);
  threads.reset();
  release = true;  // the detached thread returns and finds the group gone
  std::this_thread::sleep_for(50ms);
}

TEST(RankThreads, FailFromOutsideEndsTheStepInFlightAndEveryLaterOne) {
  auto group = parallel::ThreadGroup::create(2, 60s);
  parallel::RankThreads threads(2);
  std::thread outside([&] {
    std::this_thread::sleep_for(100ms);
    threads.fail("a worker process has gone");
    group->abort("a worker process has gone");
  });
  const auto body = [&](int r) {
    float x = 1;
    group->communicator(r)->all_reduce_sum(&x, 1, DType::kF32, nullptr);
    if (r == 0) group->communicator(r)->all_reduce_sum(&x, 1, DType::kF32, nullptr);  // rank 1 never joins
  };
  const std::string e = error_of([&] { threads.run(body, [](const std::string&) {}); });
  outside.join();
  EXPECT_NE(e.find("a worker process has gone"), std::string::npos) << e;
  EXPECT_FALSE(threads.abandoned());
  std::atomic<int> ran{0};
  EXPECT_NE(error_of([&] { threads.run([&](int) { ++ran; }, [](const std::string&) {}); })
                .find("a worker process has gone"),
            std::string::npos);
  EXPECT_EQ(ran.load(), 0);
}

// Per-rank queues: rank 0 runs job 2 while rank 1 is still inside job 1 (a lock-step group would
// never let job 1 end here).
TEST(RankThreads, EachRankRunsItsOwnQueueAhead) {
  parallel::RankThreads threads(2);
  std::atomic<bool> rank0_in_job2{false};
  std::atomic<bool> rank1_waited{false};
  std::vector<int> order0;
  const auto t1 = threads.submit(
      [&](int r) {
        if (r == 0) order0.push_back(1);
        if (r != 1) return;
        for (int i = 0; i < 500 && !rank0_in_job2; ++i) std::this_thread::sleep_for(10ms);
        rank1_waited = rank0_in_job2.load();
      },
      {});
  const auto t2 = threads.submit(
      [&](int r) {
        if (r == 0) {
          order0.push_back(2);
          rank0_in_job2 = true;
        }
      },
      {});
  threads.wait(t1);
  threads.wait(t2);
  EXPECT_TRUE(rank1_waited.load());
  EXPECT_EQ(order0, (std::vector<int>{1, 2}));
}

// Spinning waiters (the GPU runner's setting): many short jobs back to back, each seen by every
// rank exactly once and in order, a failure still ends its job, and once the spin window has passed
// the waiters sleep and are still woken by the next job.
TEST(RankThreads, SpinningWaitersRunEveryJobInOrderAndStillSleepWhenIdle) {
  parallel::RankThreads threads(2, 5s, 2ms);
  std::vector<int> seen[2];
  for (int j = 0; j < 300; ++j) threads.run([&](int r) { seen[r].push_back(j); }, {});
  std::vector<int> want(300);
  for (int j = 0; j < 300; ++j) want[size_t(j)] = j;
  EXPECT_EQ(seen[0], want);
  EXPECT_EQ(seen[1], want);
  std::this_thread::sleep_for(20ms);  // past the spin window: every thread is asleep
  std::atomic<int> ran{0};
  threads.run([&](int) { ++ran; }, {});
  EXPECT_EQ(ran.load(), 2);
  const std::string e = error_of([&] {
    threads.run(
        [&](int r) {
          if (r == 1) throw_error(ErrorKind::kInternal, "rank one broke");
        },
        {});
  });
  EXPECT_NE(e.find("rank one broke"), std::string::npos) << e;
  threads.run([&](int) { ++ran; }, {});
  EXPECT_EQ(ran.load(), 4);
}

TEST(RankThreads, JobsQueuedBehindAFailureFailWithIt) {
  auto group = parallel::ThreadGroup::create(2, 60s);
  parallel::RankThreads threads(2);
  auto hook = [&](const std::string& why) { group->abort(why); };
  const auto first = threads.submit(
      [&](int r) {
        float x = 1;
        if (r == 0) throw_error(ErrorKind::kInternal, "stage zero broke");
        group->communicator(r)->recv(&x, 1, DType::kF32, 0, nullptr);  // never sent: aborted
      },
      hook);
  const auto second = threads.submit(
      [&](int r) {
        float x = 1;
        if (r == 0) group->communicator(r)->send(&x, 1, DType::kF32, 1, nullptr);
        if (r == 1) group->communicator(r)->recv(&x, 1, DType::kF32, 0, nullptr);
      },
      hook);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(error_of([&] { threads.wait(first); }).find("stage zero broke"), std::string::npos);
  EXPECT_NE(error_of([&] { threads.wait(second); }), "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  // After fail(), what is queued is skipped.
  threads.fail("the group is gone");
  std::atomic<int> ran{0};
  const auto third = threads.submit([&](int) { ++ran; }, {});
  EXPECT_NE(error_of([&] { threads.wait(third); }).find("the group is gone"), std::string::npos);
  EXPECT_EQ(ran.load(), 0);
}

TEST(DetachableTasks, FinishedTasksAreJoinedAndStuckOnesLeftToTheExit) {
  {
    parallel::DetachableTasks tasks;
    std::atomic<int> done{0};
    for (int i = 0; i < 3; ++i) tasks.start([&] { ++done; });
    EXPECT_TRUE(tasks.wait_for(5s));
    EXPECT_EQ(done.load(), 3);
  }
  static std::atomic<bool> release{false};
  {
    parallel::DetachableTasks tasks;
    tasks.start([] {
      while (!release) std::this_thread::sleep_for(5ms);
    });
    tasks.start([] { throw std::runtime_error("ignored"); });
    EXPECT_FALSE(tasks.wait_for(50ms));
  }  // detached, not joined
  EXPECT_TRUE(parallel::any_ranks_abandoned());
  release = true;
  std::this_thread::sleep_for(50ms);
}

TEST(FaultInjection, ParsesRankStepAndHang) {
  const auto f = parallel::parse_injected_fault("3:17");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.step, 17);
  EXPECT_FALSE(f.hang);
  EXPECT_TRUE(parallel::parse_injected_fault("0:0:hang").hang);
  for (const char* bad : {"", "3", "a:1", "1:b", "-1:2", "1:2:sleep", "1:2:hang:x", "1 :2"}) {
    const std::string e = error_of([&] { parallel::parse_injected_fault(bad); });
    EXPECT_NE(e.find("PAGELLM_INJECT_FAULT must be RANK:STEP"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_NO_THROW(parallel::maybe_inject_fault(std::nullopt, 0, 0));
  EXPECT_NO_THROW(parallel::maybe_inject_fault(parallel::InjectedFault{1, 2, false}, 0, 2));
  EXPECT_THROW(parallel::maybe_inject_fault(parallel::InjectedFault{1, 2, false}, 1, 2), Error);
}

TEST(FaultInjection, ARankFailingMidRunEndsTheGenerationWithItsError) {
  const auto model = kModels / "stories260K";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP();
  EngineArgs args;
  args.model = model.string();
  args.tensor_parallel_size = 2;
  args.pipeline_parallel_size = 2;
  args.kv_cache_memory_gib = 0.05;
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  ::setenv("PAGELLM_INJECT_FAULT", "3:4", 1);
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] {
    LLM llm(args);
    llm.generate({PromptInput::from_text("Once upon a time")}, p);
  });
  ::unsetenv("PAGELLM_INJECT_FAULT");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  EXPECT_NE(e.find("injected fault on rank 3 at step 4"), std::string::npos) << e;
  // Without the hook the same configuration runs to the end.
  LLM llm(args);
  EXPECT_EQ(llm.generate({PromptInput::from_text("Once upon a time")}, p).at(0).outputs.at(0).token_ids.size(),
            16u);
}

// The same with two batches in flight (pipeline parallelism): a failing stage-0 rank, or a failing
// last-stage rank, ends generate() with its error, and the batch queued behind it does not hang
// the engine's teardown.
TEST(FaultInjection, ARankFailingWithBatchesInFlightEndsTheGeneration) {
  const auto model = kModels / "stories260K";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP();
  EngineArgs args;
  args.model = model.string();
  args.pipeline_parallel_size = 2;
  args.kv_cache_memory_gib = 0.05;
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 16;
  p.ignore_eos = true;
  std::vector<PromptInput> prompts;
  for (const char* t : {"Once upon a time", "The little dog", "Lily and Tom went", "One day, a"})
    prompts.push_back(PromptInput::from_text(t));
  for (const char* fault : {"0:5", "1:6"}) {
    ::setenv("PAGELLM_INJECT_FAULT", fault, 1);
    const auto start = std::chrono::steady_clock::now();
    const std::string e = error_of([&] {
      LLM llm(args);
      llm.generate(prompts, p);
    });
    ::unsetenv("PAGELLM_INJECT_FAULT");
    EXPECT_LT(std::chrono::steady_clock::now() - start, 60s) << fault;
    const std::string want = std::string("injected fault on rank ") + fault[0] + " at step " + (fault + 2);
    EXPECT_NE(e.find(want), std::string::npos) << fault << ": " << e;
  }
  LLM llm(args);
  for (const auto& out : llm.generate(prompts, p)) EXPECT_EQ(out.outputs.at(0).token_ids.size(), 16u);
}

}  // namespace
}  // namespace pagellm
