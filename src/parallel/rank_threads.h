// One long-lived thread per rank of an in-process parallel group: each step runs one function on
// every rank at once (the ranks meet in collectives, so they must run concurrently) and waits for
// all of them. A rank that throws calls the failure hook (which aborts the group's collectives, so
// no other rank waits forever) and its error is rethrown to the caller.
//
// If a rank still has not returned `grace` after the first failure (a GPU kernel that ignored the
// abort, a driver call that never comes back), the group is abandoned: the error is rethrown anyway,
// every later run() fails at once, the threads are detached instead of joined, and
// `any_ranks_abandoned()` turns true so the process can leave without waiting on them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace pagellm::parallel {

class RankThreads {
 public:
  static constexpr std::chrono::milliseconds kDefaultGrace{15000};

  explicit RankThreads(int num_ranks, std::chrono::milliseconds grace = kDefaultGrace);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return int(threads_.size()); }
  // Runs fn(rank) on every rank's thread and waits for all. on_failure(message) is called once,
  // from the first failing rank's thread, before the others are waited for; then the first error
  // (in rank order) is rethrown. fn and on_failure must stay alive until run() returns (an
  // abandoned rank may touch them later: the process must then exit; see the file comment).
  void run(const std::function<void(int)>& fn,
           const std::function<void(const std::string&)>& on_failure);
  // Fails the group from outside (a peer process has gone, a step timed out): a step in flight gets
  // the grace period to return and then throws `why`, as does every later step. Any thread.
  void fail(const std::string& why);
  // True once a rank failed to return within the grace period after a failure.
  bool abandoned() const;

 private:
  struct State;
  static void loop(const std::shared_ptr<State>& state, int rank);

  std::shared_ptr<State> state_;  // shared with the threads: an abandoned one may outlive this
  std::vector<std::thread> threads_;
};

// True once any RankThreads in this process abandoned a rank (or other work was abandoned, see
// DetachableTasks): the process should end with std::_Exit after its last message, since exit
// handlers could wait on that rank's device.
bool any_ranks_abandoned();

}  // namespace pagellm::parallel
