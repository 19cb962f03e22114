#include "common/thread_pool.h"

#include <algorithm>
#include <exception>
#include <utility>

namespace pagellm {

namespace {
// num_threads <= 0 means one per hardware thread.
int resolve_num_threads(int num_threads) {
  return num_threads > 0 ? num_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::atomic<int> g_global_threads{0};  // size the global pool is created with (0 = all cores)
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  num_threads = resolve_num_threads(num_threads);
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(g_global_threads.load());
  return pool;
}

bool ThreadPool::configure_global(int num_threads) {
  g_global_threads.store(num_threads);
  return global().num_threads() == resolve_num_threads(num_threads);
}

void ThreadPool::run_chunks(const std::function<void(size_t, size_t)>& fn, size_t n, size_t chunk,
                            size_t num_chunks) {
  for (;;) {
    const size_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks) return;
    fn(c * chunk, std::min(n, (c + 1) * chunk));
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn,
                              size_t min_chunk) {
  if (n == 0) return;
  const size_t max_parts = std::max<size_t>(1, n / std::max<size_t>(1, min_chunk));
  const size_t parts = std::min<size_t>(static_cast<size_t>(num_threads()), max_parts);
  if (parts <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  // A few chunks per thread so that a late or preempted thread's share is taken by the others.
  const size_t target = std::min(max_parts, parts * 4);
  const size_t chunk = (n + target - 1) / target;
  const size_t num_chunks = (n + chunk - 1) / chunk;
  std::lock_guard submit(submit_mutex_);
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    job_num_chunks_ = num_chunks;
    next_chunk_.store(0, std::memory_order_relaxed);
    active_ = true;
    ++generation_;
  }
  start_cv_.notify_all();
  std::exception_ptr error;
  try {
    run_chunks(fn, n, chunk, num_chunks);
  } catch (...) {
    error = std::current_exception();
    next_chunk_.store(num_chunks, std::memory_order_relaxed);  // nobody starts another chunk
  }
  // Every chunk is claimed; wait only for workers that joined (and so may still run one). Closing
  // the job under the same lock keeps late wakers from touching fn after this returns.
  std::unique_lock lock(mutex_);
  done_cv_.wait(lock, [this] { return users_ == 0; });
  active_ = false;
  job_ = nullptr;
  if (!error) error = std::exchange(worker_error_, nullptr);
  worker_error_ = nullptr;
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int /*index*/) {
  size_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* job;
    size_t n, chunk, num_chunks;
    {
      std::unique_lock lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || (active_ && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      ++users_;
      job = job_;
      n = job_n_;
      chunk = job_chunk_;
      num_chunks = job_num_chunks_;
    }
    try {
      run_chunks(*job, n, chunk, num_chunks);
    } catch (...) {
      // Handed to the caller, which rethrows it once the job is closed.
      next_chunk_.store(num_chunks, std::memory_order_relaxed);
      std::lock_guard lock(mutex_);
      if (!worker_error_) worker_error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      if (--users_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace pagellm
