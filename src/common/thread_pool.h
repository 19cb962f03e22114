// A fixed pool of worker threads for data-parallel CPU kernels. parallel_for splits [0, n) into
// contiguous chunks; every index is processed by exactly one thread, so a kernel that reduces each
// output row inside one call keeps a fixed reduction order whatever the split (batch invariance).
// Chunks are claimed dynamically (a few per thread) and the caller never waits for a worker that
// has not started: on a busy machine a descheduled worker just leaves its share to the others.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagellm {

class ThreadPool {
 public:
  // num_threads <= 0 means one per hardware thread.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n); blocks until all are done. Chunks are
  // at least `min_chunk` long so tiny loops stay on the calling thread. Safe to call from several
  // threads at once (the ranks of an in-process parallel group): their jobs take the pool in turn.
  // fn must not call parallel_for itself.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);

  // The process-wide pool used by the CPU backend.
  static ThreadPool& global();
  // Sets the global pool's size (<= 0: one thread per hardware thread). Only the first use of the
  // pool fixes its size; returns false when it already runs with another count.
  static bool configure_global(int num_threads);

 private:
  void worker_loop(int index);
  // Claims and runs chunks of the current job until none is left.
  void run_chunks(const std::function<void(size_t, size_t)>& fn, size_t n, size_t chunk,
                  size_t num_chunks);

  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;  // one job at a time, whichever thread submits it
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_chunk_ = 0;
  size_t job_num_chunks_ = 0;
  std::atomic<size_t> next_chunk_{0};  // next unclaimed chunk of the current job
  size_t generation_ = 0;
  bool active_ = false;  // a job is open for workers to join
  int users_ = 0;        // workers that joined the current job and have not left it
  std::exception_ptr worker_error_;  // first exception thrown in a worker during the job
  bool stop_ = false;
};

}  // namespace pagellm
