#include "parallel/rank_threads.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>

#include "common/error.h"
#include "parallel/detachable_tasks.h"

namespace pagellm::parallel {

namespace {
std::atomic<bool> g_abandoned{false};
}  // namespace

bool any_ranks_abandoned() { return g_abandoned.load(); }

void mark_process_abandoned() { g_abandoned = true; }

struct RankThreads::Job {
  Job(int n, std::function<void(int)> f, std::function<void(const std::string&)> hook)
      : fn(std::move(f)), on_failure(std::move(hook)), pending(n), errors(size_t(n)) {}
  const std::function<void(int)> fn;
  const std::function<void(const std::string&)> on_failure;
  int pending;          // ranks that have not finished it
  bool hooked = false;  // the failure hook has been claimed by a failing rank
  bool failed = false;  // a failing rank has run the hook: the grace period starts
  std::vector<std::exception_ptr> errors;  // [num_ranks]
};

struct RankThreads::State {
  State(int n, std::chrono::milliseconds g, std::chrono::microseconds sp)
      : grace(g), spin(sp), next(size_t(n), 1) {}
  const std::chrono::milliseconds grace;
  const std::chrono::microseconds spin;
  std::mutex mutex;
  std::condition_variable start_cv, done_cv;
  std::atomic<uint64_t> events{0};  // bumped by every notify: what a spinning waiter watches
  // Queued and running jobs by ticket; each rank takes them in ticket order.
  std::map<Ticket, std::shared_ptr<Job>> jobs;
  Ticket last = 0;           // the newest ticket
  std::vector<Ticket> next;  // [num_ranks] the ticket each rank runs next
  bool stop = false;
  bool abandoned = false;
  std::exception_ptr abandon_error;  // the failure that led to abandoning the group
  std::exception_ptr external;       // fail()'s error: the group's cause, ahead of the ranks' own
};

namespace {

// Every change a waiter may be waiting for is made under the mutex and then announced here.
void notify(std::atomic<uint64_t>& events, std::condition_variable& cv) {
  events.fetch_add(1, std::memory_order_release);
  cv.notify_all();
}

}  // namespace

// cv.wait(lock, pred), first polling (with yields) for up to s.spin for an announced change, so
// that a short wait costs no sleep and wake-up.
template <class Pred>
void RankThreads::wait_on(State& s, std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                          Pred pred) {
  if (s.spin.count() > 0) {
    const auto until = std::chrono::steady_clock::now() + s.spin;
    while (!pred()) {
      const uint64_t seen = s.events.load(std::memory_order_acquire);
      lock.unlock();
      bool changed = false;
      while (!changed && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
        changed = s.events.load(std::memory_order_acquire) != seen;
      }
      lock.lock();
      if (!changed) break;
    }
  }
  cv.wait(lock, pred);
}

RankThreads::RankThreads(int num_ranks, std::chrono::milliseconds grace,
                         std::chrono::microseconds spin)
    : state_(std::make_shared<State>(num_ranks, grace, spin)) {
  for (int r = 0; r < num_ranks; ++r) threads_.emplace_back([s = state_, r] { loop(s, r); });
}

RankThreads::~RankThreads() {
  bool abandoned;
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
    abandoned = state_->abandoned;
  }
  notify(state_->events, state_->start_cv);
  // A rank stuck in a device call may never return: joining it would hang the caller.
  for (std::thread& t : threads_) abandoned ? t.detach() : t.join();
}

void RankThreads::fail(const std::string& why) {
  std::lock_guard lock(state_->mutex);
  if (!state_->external)
    state_->external = std::make_exception_ptr(Error(ErrorKind::kInternal, why));
  notify(state_->events, state_->done_cv);
}

bool RankThreads::abandoned() const {
  std::lock_guard lock(state_->mutex);
  return state_->abandoned;
}

RankThreads::Ticket RankThreads::submit(std::function<void(int)> fn,
                                        std::function<void(const std::string&)> on_failure) {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  const Ticket t = ++s.last;
  s.jobs.emplace(t, std::make_shared<Job>(size(), std::move(fn), std::move(on_failure)));
  notify(s.events, s.start_cv);
  return t;
}

void RankThreads::wait(Ticket ticket) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.abandoned) {
    s.jobs.erase(ticket);
    if (s.abandon_error) std::rethrow_exception(s.abandon_error);
    throw_error(ErrorKind::kInternal, "the parallel group was abandoned after a failure");
  }
  const auto it = s.jobs.find(ticket);
  if (it == s.jobs.end()) throw_error(ErrorKind::kInternal, "rank threads: unknown job");
  const std::shared_ptr<Job> job = it->second;
  wait_on(s, lock, s.done_cv, [&] { return job->pending == 0 || job->failed || s.external; });
  // A rank failed: the others get the grace period to notice the abort and return.
  if (job->pending != 0 && !s.done_cv.wait_for(lock, s.grace, [&] { return job->pending == 0; })) {
    s.abandoned = true;
    mark_process_abandoned();
    s.abandon_error = s.external;
    for (const auto& e : job->errors)
      if (!s.abandon_error && e) s.abandon_error = e;
  }
  s.jobs.erase(ticket);  // a rank still inside it holds its own reference
  if (s.external) std::rethrow_exception(s.external);
  for (const auto& e : job->errors)
    if (e) std::rethrow_exception(e);
}

void RankThreads::run(const std::function<void(int)>& fn,
                      const std::function<void(const std::string&)>& on_failure) {
  wait(submit(fn, on_failure));
}

void RankThreads::loop(const std::shared_ptr<State>& state, int rank) {
  State& s = *state;
  for (;;) {
    std::shared_ptr<Job> job;
    std::exception_ptr group_error;  // fail()'s error when the job is skipped
    {
      std::unique_lock lock(s.mutex);
      Ticket& next = s.next[size_t(rank)];
      // Queued jobs run even when stopping: the other ranks run them too.
      wait_on(s, lock, s.start_cv, [&] { return s.abandoned || s.stop || next <= s.last; });
      if (s.abandoned || next > s.last) return;
      const auto it = s.jobs.find(next++);
      if (it == s.jobs.end()) continue;  // already given up by its waiter (abandoned group)
      job = it->second;
      group_error = s.external;  // the group has failed: its collectives cannot complete
    }
    const bool skip = group_error != nullptr;
    std::exception_ptr error;
    std::string message;
    if (skip) {
      error = group_error;
    } else {
      try {
        job->fn(rank);
      } catch (const std::exception& e) {
        error = std::current_exception();
        message = "rank " + std::to_string(rank) + " failed: " + e.what();
      } catch (...) {
        error = std::current_exception();
        message = "rank " + std::to_string(rank) + " failed";
      }
    }
    bool hook = false;
    {
      std::lock_guard lock(s.mutex);
      if (s.abandoned) return;  // the caller has moved on; nothing here is valid any more
      job->errors[size_t(rank)] = error;
      if (error && !skip && !job->hooked) {
        job->hooked = job->failed = true;  // the grace period starts now, even if the hook blocks
        hook = true;
        notify(s.events, s.done_cv);
      }
    }
    // Outside the lock: the hook unblocks ranks that are still inside the job.
    if (hook && job->on_failure) job->on_failure(message);
    {
      std::lock_guard lock(s.mutex);
      if (s.abandoned) return;
      if (--job->pending == 0) notify(s.events, s.done_cv);
    }
  }
}

}  // namespace pagellm::parallel
