// Builds the allowed-token masks of a step (structured outputs, allowed_token_ids) on a thread
// pool, in the background: start() hands the jobs to a driver thread and returns at once, so the
// engine launches the forward pass meanwhile; the runner waits (MaskFence) just before sampling.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "engine/scheduler_output.h"
#include "structured/matcher.h"

namespace pagellm::engine {

// One sequence's mask: the grammar's (when matcher is set, after it settles its deferred token)
// ANDed with `allowed`.
struct MaskJob {
  structured::Matcher* matcher = nullptr;  // null: the mask is `allowed` alone
  std::span<uint32_t> words;               // [ceil(vocab / 32)] written
  std::span<const uint32_t> allowed;       // allowed_token_ids' mask; empty: no such limit
};

// Writes one job's mask (what the builder runs per job; the serial reference).
void build_mask(const MaskJob& job);

class MaskBuilder : public MaskFence {
 public:
  // num_threads >= 1 threads build masks (the driver thread and num_threads - 1 pool workers).
  explicit MaskBuilder(int num_threads);
  ~MaskBuilder() override;
  MaskBuilder(const MaskBuilder&) = delete;
  MaskBuilder& operator=(const MaskBuilder&) = delete;

  // Starts building every job's mask and returns. The jobs (and what they point at) must stay
  // untouched until wait() returns; the previous batch must have been waited for.
  void start(std::span<const MaskJob> jobs);
  // Returns once the started jobs are done; rethrows the first error of a job.
  void wait() const override;
  int num_threads() const { return pool_.num_threads(); }

 private:
  void drive();

  ThreadPool pool_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  std::span<const MaskJob> jobs_;
  bool pending_ = false;  // jobs_ started and not finished
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread driver_;  // last: starts once the members above exist
};

}  // namespace pagellm::engine
