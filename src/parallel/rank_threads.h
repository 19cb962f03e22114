// One long-lived thread per rank of an in-process parallel group: each step runs one function on
// every rank at once (the ranks meet in collectives, so they must run concurrently) and waits for
// all of them. A rank that throws calls the failure hook (which aborts the group's collectives, so
// no other rank waits forever) and its error is rethrown to the caller.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagellm::parallel {

class RankThreads {
 public:
  explicit RankThreads(int num_ranks);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int size() const { return int(threads_.size()); }
  // Runs fn(rank) on every rank's thread and waits for all. on_failure(message) is called once,
  // from the first failing rank's thread, before the others are waited for; then the first error
  // (in rank order) is rethrown.
  void run(const std::function<void(int)>& fn,
           const std::function<void(const std::string&)>& on_failure);

 private:
  void loop(int rank);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  const std::function<void(const std::string&)>* on_failure_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool failed_ = false;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace pagellm::parallel
