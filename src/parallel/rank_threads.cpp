#include "parallel/rank_threads.h"

namespace pagellm::parallel {

RankThreads::RankThreads(int num_ranks) : errors_(size_t(num_ranks)) {
  for (int r = 0; r < num_ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankThreads::run(const std::function<void(int)>& fn,
                      const std::function<void(const std::string&)>& on_failure) {
  std::unique_lock lock(mutex_);
  job_ = &fn;
  on_failure_ = &on_failure;
  pending_ = size();
  failed_ = false;
  for (auto& e : errors_) e = nullptr;
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  on_failure_ = nullptr;
  for (const auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

void RankThreads::loop(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
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
    bool first_failure = false;
    const std::function<void(const std::string&)>* on_failure = nullptr;
    {
      std::lock_guard lock(mutex_);
      errors_[size_t(rank)] = error;
      if (error && !failed_) {
        failed_ = first_failure = true;
        on_failure = on_failure_;
      }
    }
    // Outside the lock: the hook unblocks ranks that are still inside the job.
    if (first_failure && on_failure != nullptr) (*on_failure)(message);
    {
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace pagellm::parallel
