// Tensor- and pipeline-parallel execution on the GPUs of one process: one CudaRunner per rank
// (rank w on GPU w), each holding its slices of the weights and its KV pool, joined by NCCL
// communicators (one per stage's tensor-parallel ranks, one over all ranks for stage-to-stage
// sends). The scheduler and KV manager run once: every step's SchedulerOutput goes to all ranks,
// which run concurrently on their own threads; the leader (last stage, first tensor-parallel rank)
// samples. A rank that fails aborts the communicators so no other rank waits forever. Each rank
// takes batches from its own queue, so with pipeline parallelism up to max_batches_in_flight
// batches are in the pipeline at once (submit() / wait_next()). Worker processes run the steps
// they are sent one at a time: their stages overlap with the leader's, not with each other.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/detachable_tasks.h"
#include "parallel/fault_injection.h"
#include "parallel/nccl_communicator.h"
#include "parallel/rank_threads.h"
#include "parallel/step_watchdog.h"
#include "parallel/rendezvous.h"
#include "runner/cuda_runner.h"

namespace pagellm::runner {

// Which ranks of the group this process hosts (all of them in a single-process run) and how it
// reaches the others.
struct RankPlacement {
  int first_rank = 0;    // world rank of this process's first rank
  int num_local = 0;     // ranks in this process; 0 = all
  int first_device = 0;  // CUDA device of the first local rank (the others follow)
  // The group's NCCL ids (group_nccl_ids' layout); empty = made here (single process).
  std::vector<parallel::NcclId> ids;
  // Leader process only: the control channels to the worker processes (each step goes to them).
  std::vector<std::unique_ptr<parallel::Channel>> workers;
};

// The NCCL ids a tp x pp group needs: one per stage's tensor-parallel ranks (tp > 1), then one for
// the world (pp > 1).
std::vector<parallel::NcclId> group_nccl_ids(int tp_size, int pp_size);

class ParallelCudaRunner : public ModelRunner {
 public:
  // base: the options every rank shares (its shard, device and communicators are filled in here).
  // Throws pagellm::Error when there are fewer visible GPUs than tp * pp ranks, or when any rank
  // fails to start.
  // max_batches_in_flight: batches submit() may start before the oldest is collected (capped at
  // pp_size; 1 runs one batch at a time).
  ParallelCudaRunner(const io::ModelConfig& config, const io::WeightStore* checkpoint,
                     const CudaRunnerOptions& base, int tp_size, int pp_size,
                     RankPlacement placement = {}, int max_batches_in_flight = 1);
  ~ParallelCudaRunner() override;

  // Block counts and config are the same on every rank (they agree at startup).
  int num_kv_blocks() const override { return ranks_[0]->num_kv_blocks(); }
  int num_swap_blocks() const override { return ranks_[0]->num_swap_blocks(); }
  int block_size() const override { return ranks_[0]->block_size(); }
  const io::ModelConfig& config() const override { return ranks_[0]->config(); }
  // execute() and execute_logits() need no batch in flight.
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override;
  int max_batches_in_flight() const override { return max_in_flight_; }
  void submit(const engine::SchedulerOutput& batch) override;
  engine::ModelRunnerOutput wait_next() override;
  bool healthy() const override { return !aborting_.load(); }
  std::vector<std::vector<float>> execute_logits(const engine::SchedulerOutput& batch) override;
  // A sampled seq's drafts are verified on the host (the rows come back as logits).
  bool verifies_sampled_drafts() const override { return false; }
  // The first local rank's startup costs (weights are per rank: its slice).
  const CudaStartupStats& startup_stats() const { return ranks_[0]->startup_stats(); }
  int num_ranks() const { return int(ranks_.size()); }

  // Fails every collective of the local ranks (a peer process has gone); later steps throw.
  void abort(const std::string& why);

 private:
  // Runs fn on every local rank; a failing rank aborts the communicators.
  void on_ranks(const std::function<void(int)>& fn);
  void load_ranks(const io::ModelConfig& config, const io::WeightStore* checkpoint,
                  const CudaRunnerOptions& base, int tp, int pp, int first_device,
                  const std::vector<parallel::NcclId>& ids);
  // A rank that never returned may still use its device memory and communicators: they are
  // released without being freed (the process exits; see parallel::any_ranks_abandoned).
  void leave_ranks_to_exit();
  // Tells the worker processes to stop and ends the threads that watch them.
  void close_workers();
  void destroy_communicators();
  // One one-shot NVLink all-reduce per stage's tensor-parallel ranks, when every rank is in this
  // process, peer access works and it is not disabled; else empty (NCCL only).
  static std::vector<std::shared_ptr<cuda::PeerAllReduce>> peer_all_reduces(
      const CudaRunnerOptions& base, int tp, int pp, int first_device, bool all_ranks_here);
  // The largest all-reduce the one-shot kernel takes (a decode batch of 64 x 4096 bf16).
  static constexpr size_t kPeerAllReduceBytes = 512 * 1024;
  // How long the engine and rank threads poll for each other before sleeping (RankThreads): longer
  // than a decode step, so that steps in a row never sleep.
  static constexpr std::chrono::microseconds kStepSpin{20000};
  // Everything the destructor does (also when the constructor fails): bounded in time.
  void shut_down();

  // How long teardown (aborts in flight, NCCL's destroy) may take before it is left to the exit.
  static constexpr std::chrono::milliseconds kTeardownLimit{10000};

  // A batch submitted to the ranks: its job and, once done, the leader's output.
  struct InFlight {
    parallel::RankThreads::Ticket ticket = 0;
    engine::ModelRunnerOutput out;
  };

  std::unique_ptr<parallel::RankThreads> threads_;
  std::deque<std::shared_ptr<InFlight>> in_flight_;  // oldest first
  int max_in_flight_ = 1;
  std::vector<std::unique_ptr<parallel::Communicator>> tp_comms_;     // [num_local]
  std::vector<std::unique_ptr<parallel::Communicator>> world_comms_;  // [num_local] (pp > 1)
  std::vector<std::unique_ptr<CudaRunner>> ranks_;                    // [num_local]
  int first_rank_ = 0;
  int leader_ = -1;  // local index of the sampling rank; -1 when another process hosts it
  std::vector<std::unique_ptr<parallel::Channel>> workers_;
  std::vector<std::thread> watchers_;  // one per worker channel: abort when its process goes
  std::atomic<bool> closing_{false};
  std::atomic<bool> aborting_{false};
  parallel::DetachableTasks aborts_;  // the communicators' aborts, once abort() has run
  const std::optional<parallel::InjectedFault> fault_ = parallel::injected_fault_from_env();
  int64_t step_ = 0;  // execute calls so far (the fault hook counts them)
  // Last member: stops (and can no longer abort) before anything it would abort is destroyed.
  std::unique_ptr<parallel::StepWatchdog> watchdog_;
};

}  // namespace pagellm::runner
