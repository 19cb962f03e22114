// Tensor- and pipeline-parallel execution on the GPUs of one process: one CudaRunner per rank
// (rank w on GPU w), each holding its slices of the weights and its KV pool, joined by NCCL
// communicators (one per stage's tensor-parallel ranks, one over all ranks for stage-to-stage
// sends). The scheduler and KV manager run once: every step's SchedulerOutput goes to all ranks,
// which run concurrently on their own threads; the leader (last stage, first tensor-parallel rank)
// samples. A rank that fails aborts the communicators so no other rank waits forever.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/rank_threads.h"
#include "runner/cuda_runner.h"

namespace pagellm::runner {

class ParallelCudaRunner : public ModelRunner {
 public:
  // base: the options every rank shares (its shard, device and communicators are filled in here).
  // Throws pagellm::Error when there are fewer visible GPUs than tp * pp ranks, or when any rank
  // fails to start.
  ParallelCudaRunner(const io::ModelConfig& config, const io::WeightStore* checkpoint,
                     const CudaRunnerOptions& base, int tp_size, int pp_size);
  ~ParallelCudaRunner() override;

  int num_kv_blocks() const override { return ranks_[leader_]->num_kv_blocks(); }
  int num_swap_blocks() const override { return ranks_[leader_]->num_swap_blocks(); }
  int block_size() const override { return ranks_[leader_]->block_size(); }
  const io::ModelConfig& config() const override { return ranks_[leader_]->config(); }
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override;
  std::vector<std::vector<float>> execute_logits(const engine::SchedulerOutput& batch);
  // Rank 0's startup costs (weights are per rank: its slice).
  const CudaStartupStats& startup_stats() const { return ranks_[0]->startup_stats(); }
  int num_ranks() const { return int(ranks_.size()); }

 private:
  void abort_all(const std::string& why);

  std::unique_ptr<parallel::RankThreads> threads_;
  std::vector<std::unique_ptr<parallel::Communicator>> tp_comms_;     // [num_ranks]
  std::vector<std::unique_ptr<parallel::Communicator>> world_comms_;  // [num_ranks] (pp > 1)
  std::vector<std::unique_ptr<CudaRunner>> ranks_;                    // [num_ranks]
  size_t leader_ = 0;
};

}  // namespace pagellm::runner
