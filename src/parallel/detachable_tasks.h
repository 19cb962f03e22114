// Work that may never return: tearing down or aborting an NCCL communicator can wait on a peer that
// has died or on a kernel the driver never finishes. Each task runs on its own thread (so tasks that
// wait on each other, as the communicators of one process can, still all run); the owner waits a
// bounded time, and whatever is still running then is detached and the process is marked abandoned
// (parallel::any_ranks_abandoned), so it ends with std::_Exit instead of hanging in exit handlers.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace pagellm::parallel {

class DetachableTasks {
 public:
  DetachableTasks();
  // Detaches (and marks the process abandoned) if tasks are still running; joins them otherwise.
  ~DetachableTasks();
  DetachableTasks(const DetachableTasks&) = delete;
  DetachableTasks& operator=(const DetachableTasks&) = delete;

  // Not thread-safe against itself or wait_for: one owner starts tasks.
  void start(std::function<void()> fn);
  // True when every task finished within `limit` (exceptions from tasks are swallowed: they are
  // teardown work whose failure changes nothing for the caller).
  bool wait_for(std::chrono::milliseconds limit);

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::vector<std::thread> threads_;
};

// Marks this process abandoned: some thread may hold a device forever (see RankThreads).
void mark_process_abandoned();

}  // namespace pagellm::parallel
