#include "runner/cuda_parallel_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "common/error.h"
#include "parallel/nccl_communicator.h"

namespace pagellm::runner {

namespace {

// The minimum of one value per rank, for ranks that call it concurrently in the same order.
class MinAgreement {
 public:
  explicit MinAgreement(int n) : n_(n) {}
  int64_t agree(int64_t value) {
    std::unique_lock lock(mutex_);
    const uint64_t round = round_;
    min_ = arrived_ == 0 ? value : std::min(min_, value);
    if (++arrived_ == n_) {
      result_ = min_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
      return result_;
    }
    cv_.wait(lock, [&] { return round_ != round || aborted_; });
    if (round_ == round) throw_error(ErrorKind::kInternal, "parallel startup aborted");
    return result_;
  }
  void abort() {
    std::lock_guard lock(mutex_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  const int n_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  int64_t min_ = 0, result_ = 0;
  bool aborted_ = false;
};

}  // namespace

ParallelCudaRunner::ParallelCudaRunner(const io::ModelConfig& config,
                                       const io::WeightStore* checkpoint,
                                       const CudaRunnerOptions& base, int tp, int pp) {
  const int n = tp * pp;
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  if (visible < n)
    invalid_argument("--tensor-parallel-size " + std::to_string(tp) +
                     " x --pipeline-parallel-size " + std::to_string(pp) + " needs " +
                     std::to_string(n) + " GPUs but " + std::to_string(visible) +
                     " are visible");
  leader_ = size_t(n - tp);
  tp_comms_.resize(size_t(n));
  world_comms_.resize(size_t(n));
  ranks_.resize(size_t(n));
  // Ids are made here and shared by the rank threads: one per stage's tensor-parallel group, one
  // for the world (only with pipeline stages).
  std::vector<parallel::NcclId> stage_ids;
  for (int p = 0; p < pp && tp > 1; ++p) stage_ids.push_back(parallel::make_nccl_id());
  const parallel::NcclId world_id = pp > 1 ? parallel::make_nccl_id() : parallel::NcclId{};
  MinAgreement agreement(n);
  threads_ = std::make_unique<parallel::RankThreads>(n);
  threads_->run(
      [&](int w) {
        const parallel::ShardSpec shard{w % tp, tp, w / tp, pp};
        if (cudaSetDevice(w) != cudaSuccess)
          throw_error(ErrorKind::kInternal, "cannot select GPU " + std::to_string(w));
        if (tp > 1)
          tp_comms_[size_t(w)] =
              parallel::make_nccl_communicator(stage_ids[size_t(shard.pp_rank)], tp, shard.tp_rank);
        if (pp > 1) world_comms_[size_t(w)] = parallel::make_nccl_communicator(world_id, n, w);
        CudaRunnerOptions o = base;
        o.shard = shard;
        o.device = w;
        o.tp = tp_comms_[size_t(w)].get();
        o.world = world_comms_[size_t(w)].get();
        o.agree_min = [&](int64_t v) { return agreement.agree(v); };
        ranks_[size_t(w)] = std::make_unique<CudaRunner>(config, checkpoint, o);
      },
      [&](const std::string& why) {
        agreement.abort();
        abort_all(why);
      });
}

ParallelCudaRunner::~ParallelCudaRunner() {
  // Runners (their streams, graphs and memory) go before the communicators they use.
  ranks_.clear();
}

void ParallelCudaRunner::abort_all(const std::string& why) {
  for (auto* comms : {&tp_comms_, &world_comms_})
    for (auto& c : *comms)
      if (c) c->abort(why);
}

engine::ModelRunnerOutput ParallelCudaRunner::execute(const engine::SchedulerOutput& batch) {
  engine::ModelRunnerOutput out;
  threads_->run(
      [&](int w) {
        engine::ModelRunnerOutput mine = ranks_[size_t(w)]->execute(batch);
        if (size_t(w) == leader_) out = std::move(mine);
      },
      [&](const std::string& why) { abort_all(why); });
  return out;
}

std::vector<std::vector<float>> ParallelCudaRunner::execute_logits(
    const engine::SchedulerOutput& batch) {
  std::vector<std::vector<float>> out;
  threads_->run(
      [&](int w) {
        auto mine = ranks_[size_t(w)]->execute_logits(batch);
        if (size_t(w) == leader_) out = std::move(mine);
      },
      [&](const std::string& why) { abort_all(why); });
  return out;
}

}  // namespace pagellm::runner
