#include "parallel/thread_group.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace pagellm::parallel {

namespace {

[[noreturn]] void comm_error(const std::string& message) {
  throw_error(ErrorKind::kInternal, "parallel group: " + message);
}

}  // namespace

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size_; }

  void all_reduce_sum(void* data, size_t count, DType dtype, void* stream) override {
    host_only(stream);
    if (dtype != DType::kF32) comm_error("in-process all-reduce takes fp32 buffers");
    ThreadGroup& g = *group_;
    if (g.size_ == 1) return;
    auto* x = static_cast<float*>(data);
    {
      std::lock_guard lock(g.mutex_);
      g.check_ok_locked();
      g.posted_[size_t(rank_)] = x;
      if (rank_ == 0) g.reduced_.resize(count);
    }
    g.barrier();
    // Each rank reduces its share of the elements, always in rank order.
    const size_t begin = count * size_t(rank_) / size_t(g.size_);
    const size_t end = count * size_t(rank_ + 1) / size_t(g.size_);
    for (size_t i = begin; i < end; ++i) {
      float s = 0.0f;
      for (int r = 0; r < g.size_; ++r) s += static_cast<const float*>(g.posted_[size_t(r)])[i];
      g.reduced_[i] = s;
    }
    g.barrier();
    std::memcpy(x, g.reduced_.data(), count * sizeof(float));
    g.barrier();  // nobody posts the next collective's buffers while others still copy
  }

  void all_gather(const void* in, void* out, size_t count, DType dtype, void* stream) override {
    host_only(stream);
    ThreadGroup& g = *group_;
    const size_t bytes = count * dtype_size(dtype);
    {
      std::lock_guard lock(g.mutex_);
      g.check_ok_locked();
      g.posted_[size_t(rank_)] = in;
    }
    g.barrier();
    for (int r = 0; r < g.size_; ++r)
      std::memcpy(static_cast<unsigned char*>(out) + size_t(r) * bytes, g.posted_[size_t(r)], bytes);
    g.barrier();
  }

  int64_t all_reduce_min(int64_t value) override {
    std::vector<int64_t> all(size_t(group_->size_));
    all_gather(&value, all.data(), 2, DType::kF32, nullptr);  // 8 bytes each: two 4-byte elements
    int64_t m = all[0];
    for (int64_t v : all) m = std::min(m, v);
    return m;
  }

  void send(const void* data, size_t count, DType dtype, int peer, void* stream) override {
    host_only(stream);
    check_peer(peer);
    ThreadGroup& g = *group_;
    const auto* p = static_cast<const unsigned char*>(data);
    std::vector<unsigned char> message(p, p + count * dtype_size(dtype));
    {
      std::lock_guard lock(g.mutex_);
      g.check_ok_locked();
      g.mail_[{rank_, peer}].push_back(std::move(message));
    }
    g.cv_.notify_all();
  }

  void recv(void* data, size_t count, DType dtype, int peer, void* stream) override {
    host_only(stream);
    check_peer(peer);
    ThreadGroup& g = *group_;
    std::unique_lock lock(g.mutex_);
    auto& box = g.mail_[{peer, rank_}];
    const bool ready = g.cv_.wait_for(lock, g.timeout_, [&] { return !box.empty() || !g.failure_.empty(); });
    g.check_ok_locked();
    if (!ready)
      g.fail_locked("rank " + std::to_string(rank_) + " waited " +
                    std::to_string(g.timeout_.count()) + " ms for rank " + std::to_string(peer));
    std::vector<unsigned char> message = std::move(box.front());
    box.pop_front();
    if (message.size() != count * dtype_size(dtype))
      g.fail_locked("rank " + std::to_string(rank_) + " expected " +
                    std::to_string(count * dtype_size(dtype)) + " bytes from rank " +
                    std::to_string(peer) + ", got " + std::to_string(message.size()));
    std::memcpy(data, message.data(), message.size());
  }

  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  static void host_only(void* stream) {
    if (stream != nullptr) comm_error("in-process communicator given a device stream");
  }
  void check_peer(int peer) const {
    if (peer < 0 || peer >= group_->size_ || peer == rank_)
      comm_error("rank " + std::to_string(rank_) + " has no peer " + std::to_string(peer));
  }

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

std::shared_ptr<ThreadGroup> ThreadGroup::create(int size, std::chrono::milliseconds timeout) {
  if (size < 1) comm_error("a group needs at least one rank");
  return std::shared_ptr<ThreadGroup>(new ThreadGroup(size, timeout));
}

ThreadGroup::ThreadGroup(int size, std::chrono::milliseconds timeout)
    : size_(size), timeout_(timeout), posted_(size_t(size), nullptr) {}

std::shared_ptr<Communicator> ThreadGroup::communicator(int rank) {
  if (rank < 0 || rank >= size_) comm_error("no rank " + std::to_string(rank));
  return std::make_shared<ThreadCommunicator>(shared_from_this(), rank);
}

std::shared_ptr<ThreadGroup> ThreadGroup::subgroup(int size) {
  auto child = create(size, timeout_);
  std::lock_guard lock(mutex_);
  subgroups_.push_back(child);
  return child;
}

void ThreadGroup::abort(const std::string& reason) {
  std::vector<std::shared_ptr<ThreadGroup>> children;
  {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = reason.empty() ? "aborted" : reason;
    children = subgroups_;
  }
  cv_.notify_all();
  for (const auto& child : children) child->abort(reason);
}

void ThreadGroup::check_ok_locked() const {
  if (!failure_.empty()) comm_error(failure_);
}

void ThreadGroup::fail_locked(const std::string& reason) {
  if (failure_.empty()) failure_ = reason;
  cv_.notify_all();
  comm_error(failure_);
}

void ThreadGroup::barrier() {
  std::unique_lock lock(mutex_);
  check_ok_locked();
  const uint64_t gen = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  const bool done = cv_.wait_for(lock, timeout_, [&] { return generation_ != gen || !failure_.empty(); });
  if (generation_ != gen) return;  // completed, even if the group failed right after
  check_ok_locked();
  if (!done)
    fail_locked("a collective waited " + std::to_string(timeout_.count()) +
                " ms for its peers (a rank stopped answering)");
}

}  // namespace pagellm::parallel
