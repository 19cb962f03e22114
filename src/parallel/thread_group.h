// An in-process communicator group: `size` ranks that are threads of this process (the CPU
// backend's tensor and pipeline parallelism). Collectives synchronize on a barrier with a timeout;
// all-reduce sums ranks in rank order 0, 1, ..., so every rank gets identical bits and the result
// does not depend on thread timing. Host buffers only (the stream argument must be null).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "parallel/communicator.h"

namespace pagellm::parallel {

class ThreadGroup : public std::enable_shared_from_this<ThreadGroup> {
 public:
  // A collective waiting longer than `timeout` for its peers fails the whole group.
  static std::shared_ptr<ThreadGroup> create(int size,
                                             std::chrono::milliseconds timeout = std::chrono::seconds(60));
  int size() const { return size_; }
  // The communicator of one rank (each rank's thread uses its own).
  std::shared_ptr<Communicator> communicator(int rank);
  // A group of `size` other ranks (a pipeline stage's tensor-parallel ranks) that fails with this
  // one: aborting this group aborts it too.
  std::shared_ptr<ThreadGroup> subgroup(int size);
  // Fails this group and its subgroups.
  void abort(const std::string& reason);

 private:
  friend class ThreadCommunicator;
  ThreadGroup(int size, std::chrono::milliseconds timeout);
  // Blocks until every rank arrived at this barrier; throws when the group fails.
  void barrier();
  [[noreturn]] void fail_locked(const std::string& reason);
  void check_ok_locked() const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string failure_;  // non-empty once the group failed
  std::vector<const void*> posted_;  // [size] each rank's buffer in the current collective
  std::vector<float> reduced_;       // [count] the all-reduce result
  std::vector<std::shared_ptr<ThreadGroup>> subgroups_;
  // Pending point-to-point messages per (source, destination).
  std::map<std::pair<int, int>, std::deque<std::vector<unsigned char>>> mail_;
};

}  // namespace pagellm::parallel
