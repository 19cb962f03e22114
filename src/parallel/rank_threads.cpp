#include "parallel/rank_threads.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>

#include "common/error.h"
#include "parallel/detachable_tasks.h"

namespace pagellm::parallel {

namespace {
std::atomic<bool> g_abandoned{false};
}  // namespace

bool any_ranks_abandoned() { return g_abandoned.load(); }

void mark_process_abandoned() { g_abandoned = true; }

struct RankThreads::State {
  explicit State(int n, std::chrono::milliseconds g) : grace(g), errors(size_t(n)) {}
  const std::chrono::milliseconds grace;
  std::mutex mutex;
  std::condition_variable start_cv, done_cv;
  const std::function<void(int)>* job = nullptr;
  const std::function<void(const std::string&)>* on_failure = nullptr;
  uint64_t generation = 0;
  int pending = 0;
  bool hooked = false;  // the failure hook has been claimed by a failing rank
  bool failed = false;  // a failing rank has run the hook: the grace period starts
  bool stop = false;
  bool abandoned = false;
  std::vector<std::exception_ptr> errors;
  std::exception_ptr external;  // fail()'s error: the group's cause, ahead of the ranks' own
};

RankThreads::RankThreads(int num_ranks, std::chrono::milliseconds grace)
    : state_(std::make_shared<State>(num_ranks, grace)) {
  for (int r = 0; r < num_ranks; ++r) threads_.emplace_back([s = state_, r] { loop(s, r); });
}

RankThreads::~RankThreads() {
  bool abandoned;
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
    abandoned = state_->abandoned;
  }
  state_->start_cv.notify_all();
  // A rank stuck in a device call may never return: joining it would hang the caller.
  for (std::thread& t : threads_) abandoned ? t.detach() : t.join();
}

void RankThreads::fail(const std::string& why) {
  std::lock_guard lock(state_->mutex);
  if (!state_->external)
    state_->external = std::make_exception_ptr(Error(ErrorKind::kInternal, why));
  state_->failed = true;
  state_->done_cv.notify_all();
}

bool RankThreads::abandoned() const {
  std::lock_guard lock(state_->mutex);
  return state_->abandoned;
}

void RankThreads::run(const std::function<void(int)>& fn,
                      const std::function<void(const std::string&)>& on_failure) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.external) std::rethrow_exception(s.external);  // the group has failed for good
  if (s.abandoned) {
    for (const auto& e : s.errors)
      if (e) std::rethrow_exception(e);
    throw_error(ErrorKind::kInternal, "the parallel group was abandoned after a failure");
  }
  s.job = &fn;
  s.on_failure = &on_failure;
  s.pending = size();
  s.failed = s.hooked = false;
  for (auto& e : s.errors) e = nullptr;
  ++s.generation;
  s.start_cv.notify_all();
  s.done_cv.wait(lock, [&] { return s.pending == 0 || s.failed; });
  // A rank failed: the others get the grace period to notice the abort and return.
  if (s.pending != 0 && !s.done_cv.wait_for(lock, s.grace, [&] { return s.pending == 0; })) {
    s.abandoned = true;
    mark_process_abandoned();
  }
  if (!s.abandoned) {
    s.job = nullptr;
    s.on_failure = nullptr;
  }
  if (s.external) std::rethrow_exception(s.external);
  for (const auto& e : s.errors)
    if (e) std::rethrow_exception(e);
}

void RankThreads::loop(const std::shared_ptr<State>& state, int rank) {
  State& s = *state;
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock lock(s.mutex);
      s.start_cv.wait(lock, [&] { return s.stop || s.generation != seen; });
      if (s.stop) return;
      seen = s.generation;
      job = s.job;
    }
    std::exception_ptr error;
    std::string message;
    try {
      (*job)(rank);
    } catch (const std::exception& e) {
      error = std::current_exception();
      message = "rank " + std::to_string(rank) + " failed: " + e.what();
    } catch (...) {
      error = std::current_exception();
      message = "rank " + std::to_string(rank) + " failed";
    }
    const std::function<void(const std::string&)>* on_failure = nullptr;
    {
      std::lock_guard lock(s.mutex);
      if (s.abandoned) return;  // the caller has moved on; nothing here is valid any more
      s.errors[size_t(rank)] = error;
      if (error && !s.hooked) {
        s.hooked = s.failed = true;  // the grace period starts now, even if the hook blocks
        on_failure = s.on_failure;
        s.done_cv.notify_all();
      }
    }
    // Outside the lock: the hook unblocks ranks that are still inside the job.
    if (on_failure != nullptr) (*on_failure)(message);
    {
      std::lock_guard lock(s.mutex);
      if (s.abandoned) return;
      if (--s.pending == 0) s.done_cv.notify_all();
    }
  }
}

}  // namespace pagellm::parallel
