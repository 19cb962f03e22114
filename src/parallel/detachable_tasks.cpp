#include "parallel/detachable_tasks.h"

#include <condition_variable>
#include <mutex>

namespace pagellm::parallel {

struct DetachableTasks::State {
  std::mutex mutex;
  std::condition_variable cv;
  int running = 0;
};

DetachableTasks::DetachableTasks() : state_(std::make_shared<State>()) {}

DetachableTasks::~DetachableTasks() {
  bool done;
  {
    std::lock_guard lock(state_->mutex);
    done = state_->running == 0;
  }
  if (!done) mark_process_abandoned();
  for (std::thread& t : threads_) done ? t.join() : t.detach();
}

void DetachableTasks::start(std::function<void()> fn) {
  {
    std::lock_guard lock(state_->mutex);
    ++state_->running;
  }
  threads_.emplace_back([s = state_, fn = std::move(fn)] {
    try {
      fn();
    } catch (...) {
      // Teardown work: nothing to report to anyone.
    }
    std::lock_guard lock(s->mutex);
    if (--s->running == 0) s->cv.notify_all();
  });
}

bool DetachableTasks::wait_for(std::chrono::milliseconds limit) {
  std::unique_lock lock(state_->mutex);
  return state_->cv.wait_for(lock, limit, [&] { return state_->running == 0; });
}

}  // namespace pagellm::parallel
