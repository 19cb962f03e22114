// One long-lived thread per rank of an in-process parallel group, each with its own job queue: a
// job is one function run on every rank (the ranks meet in collectives, so each job runs on all of
// them concurrently), and every rank runs its queue in submission order. So a pipeline's first
// stage can start batch k+1 while its last stage still runs batch k (submit() does not wait), and
// run() is submit() + wait() for lock-step callers. A rank that throws calls the job's failure hook
// (which aborts the group's collectives, so no other rank waits forever) and its error is rethrown
// by wait().
//
// If a rank still has not returned `grace` after the first failure of a job (a GPU kernel that
// ignored the abort, a driver call that never comes back), the group is abandoned: the error is
// rethrown anyway, every later wait() fails at once, the threads are detached instead of joined,
// and `any_ranks_abandoned()` turns true so the process can leave without waiting on them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagellm::parallel {

class RankThreads {
 public:
  static constexpr std::chrono::milliseconds kDefaultGrace{15000};
  using Ticket = uint64_t;

  // spin > 0: a thread about to wait (a rank for its next job, wait() for the ranks) first polls
  // for up to `spin`, yielding, before it sleeps: a decode step of a few milliseconds then pays no
  // sleep and wake-up (tens of microseconds each) at either end, at the price of busy cores.
  explicit RankThreads(int num_ranks, std::chrono::milliseconds grace = kDefaultGrace,
                       std::chrono::microseconds spin = {});
  // Runs the jobs still queued (their ranks meet in collectives, so all or none must run), then
  // joins; detaches when the group was abandoned.
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return int(threads_.size()); }
  // Queues fn(rank) on every rank's queue and returns at once. on_failure(message) is called once
  // per job, from its first failing rank's thread. Both are copied into the job; what they
  // reference must stay alive until wait(ticket) has returned (or, once abandoned, until the
  // process exits; see the file comment). After fail(), queued jobs are skipped, not run.
  Ticket submit(std::function<void(int)> fn, std::function<void(const std::string&)> on_failure);
  // Waits until every rank has finished the job (or a rank failed and the others returned within
  // the grace period), then rethrows fail()'s error, else the job's first error in rank order.
  // Each ticket is waited for once.
  void wait(Ticket ticket);
  // submit + wait.
  void run(const std::function<void(int)>& fn,
           const std::function<void(const std::string&)>& on_failure);
  // Fails the group from outside (a peer process has gone, a step timed out): jobs in flight get
  // the grace period to return and then throw `why`, as does every later job. Any thread.
  void fail(const std::string& why);
  // True once a rank failed to return within the grace period after a failure.
  bool abandoned() const;

 private:
  struct Job;
  struct State;
  static void loop(const std::shared_ptr<State>& state, int rank);
  template <class Pred>
  static void wait_on(State& s, std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                      Pred pred);

  std::shared_ptr<State> state_;  // shared with the threads: an abandoned one may outlive this
  std::vector<std::thread> threads_;
};

// True once any RankThreads in this process abandoned a rank (or other work was abandoned, see
// DetachableTasks): the process should end with std::_Exit after its last message, since exit
// handlers could wait on that rank's device.
bool any_ranks_abandoned();

}  // namespace pagellm::parallel
