#include "engine/mask_builder.h"

#include <algorithm>

#include "common/phase_times.h"

namespace pagellm::engine {

void build_mask(const MaskJob& job) {
  if (job.matcher == nullptr) {
    std::copy(job.allowed.begin(), job.allowed.end(), job.words.begin());
    return;
  }
  job.matcher->settle();  // the token sampled last step (EngineCore defers it)
  job.matcher->fill_mask(job.words);
  const size_t n = std::min(job.allowed.size(), job.words.size());
  for (size_t w = 0; w < n; ++w) job.words[w] &= job.allowed[w];
}

MaskBuilder::MaskBuilder(int num_threads)
    : pool_(std::max(num_threads, 1)), driver_([this] { drive(); }) {}

MaskBuilder::~MaskBuilder() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [this] { return !pending_; });
    stop_ = true;
  }
  cv_.notify_all();
  driver_.join();
}

void MaskBuilder::start(std::span<const MaskJob> jobs) {
  std::lock_guard lock(mutex_);
  error_ = nullptr;
  if (jobs.empty()) return;
  jobs_ = jobs;
  pending_ = true;
  cv_.notify_all();
}

void MaskBuilder::wait() const {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [this] { return !pending_; });
  if (error_) std::rethrow_exception(error_);
}

void MaskBuilder::drive() {
  for (;;) {
    std::span<const MaskJob> jobs;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [this] { return pending_ || stop_; });
      if (!pending_) return;  // stopping
      jobs = jobs_;
    }
    std::exception_ptr error;
    try {
      phase::Scope timed(phase::kMaskBuild);
      // A job is a copy of a cached mask (microseconds) or, for a state not met before, a walk
      // of the vocabulary trie (milliseconds): the pool's dynamic chunk claiming balances both.
      pool_.parallel_for(jobs.size(), [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) build_mask(jobs[i]);
      });
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      error_ = error;
      pending_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace pagellm::engine
