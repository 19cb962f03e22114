// A fixed pool of worker threads for data-parallel CPU kernels. parallel_for splits [0, n) into
// contiguous chunks; every index is processed by exactly one thread, so a kernel that reduces each
// output row inside one call keeps a fixed reduction order whatever the split (batch invariance).
#pragma once

#include <condition_variable>
#include <cstddef>
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
  // at least `min_chunk` long so tiny loops stay on the calling thread.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk = 1);

  // The process-wide pool used by the CPU backend.
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_chunk_ = 0;
  size_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace pagellm
