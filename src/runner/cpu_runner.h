// The CPU model runner: flattens a step's scheduled tokens, runs the Llama-family forward pass once
// for the whole batch over the paged KV cache, computes LM-head logits only for the rows that need
// them, and samples with the shared CPU sampler. Batch-invariant by construction (see
// backends/cpu/kernels.h). With tensor / pipeline parallelism the runner holds one shard per rank
// (its model slice and its KV pool, all driven by the same block tables) and runs every rank's
// forward pass on its own thread over an in-process communicator group; the last stage's first
// rank provides the logits. Each rank takes batches from its own queue, so with pipeline
// parallelism up to max_batches_in_flight batches are in the pipeline at once (submit() /
// wait_next()): stage 0 runs batch k+1 while stage 1 runs batch k. Block operations (swaps,
// copy-on-write) run on each rank in its queue's order, so they never overtake an earlier batch.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "models/llama.h"
#include "parallel/fault_injection.h"
#include "parallel/rank_threads.h"
#include "parallel/thread_group.h"
#include "runner/model_runner.h"

namespace pagellm::runner {

class CpuRunner : public ModelRunner {
 public:
  // Owns the model, a KV pool of num_kv_blocks blocks of block_size tokens, and a host swap pool of
  // num_swap_blocks blocks of the same geometry (0 = no swapping); kv_quant: an FP8 cache.
  CpuRunner(std::unique_ptr<models::LlamaModel> model, int num_kv_blocks, int block_size,
            int num_swap_blocks = 0, const models::KvCacheQuant& kv_quant = {});
  // One model per rank of `group` (world rank order: pp_rank * tp_size + tp_rank), each built with
  // ModelParallel communicators of that group; every rank gets a pool of num_kv_blocks blocks.
  // max_batches_in_flight: how many batches submit() may start before the oldest is collected
  // (capped at the number of pipeline stages; 1 runs one batch at a time).
  CpuRunner(std::vector<std::unique_ptr<models::LlamaModel>> models,
            std::shared_ptr<parallel::ThreadGroup> group, int num_kv_blocks, int block_size,
            int num_swap_blocks = 0, const models::KvCacheQuant& kv_quant = {},
            int max_batches_in_flight = 1);
  ~CpuRunner() override;

  int num_kv_blocks() const override { return static_cast<int>(shards_[0].cache.num_blocks()); }
  int num_swap_blocks() const override { return num_swap_blocks_; }
  int block_size() const override { return static_cast<int>(shards_[0].cache.block_size()); }
  const io::ModelConfig& config() const override { return shards_[0].model->config(); }
  int num_ranks() const { return static_cast<int>(shards_.size()); }

  // Applies swap-out, swap-in and copy lists (in that order) before computing; block ids outside
  // the device or swap pool are an internal error. execute() needs no batch in flight.
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override;
  int max_batches_in_flight() const override { return max_in_flight_; }
  void submit(const engine::SchedulerOutput& batch) override;
  engine::ModelRunnerOutput wait_next() override;

  // The forward pass of execute() without sampling: per scheduled seq, the logits [vocab] of its
  // last scheduled token when needs_sample is set (empty otherwise).
  std::vector<std::vector<float>> execute_logits(const engine::SchedulerOutput& batch) override;

  // EAGLE: the target returns every token's final-normed hidden state; a head runs with features.
  void set_return_hidden() override;
  FeatureStep execute_features(const engine::SchedulerOutput& batch,
                               std::span<const float> features) override;

  // Bytes of KV cache per block (all layers, K and V) of one rank with this local config (the
  // whole model without parallelism): for sizing the pool.
  static int64_t kv_bytes_per_block(const io::ModelConfig& config, int block_size);

  // Rank `rank`'s KV pool, for tests that inspect block contents.
  models::KvCache& kv_cache(int rank = 0) { return shards_.at(size_t(rank)).cache; }
  // One swap block's K/V of rank `rank`, laid out [num_layers, 2, block_size, num_kv_heads,
  // head_dim] (the rank's layers and KV heads).
  std::span<const float> swap_block(int host_block, int rank = 0) const;

 private:
  // A row of the flattened batch whose logits are needed.
  struct LogitsRow {
    int64_t row = 0;       // index into the flattened tokens
    size_t seq = 0;        // index into batch.seqs
    int32_t position = 0;  // the row's position in its sequence
    bool sample = false;   // the seq's sampling row (else a prompt-logprobs row)
  };

  // One batch from submit() to its collection: its flattened inputs and, from the logits rank, its
  // logits and pooled hidden states.
  struct Job {
    const engine::SchedulerOutput* batch = nullptr;  // the caller's, valid until collected
    std::vector<int32_t> token_ids;     // [num_tokens]
    std::vector<int32_t> positions;     // [num_tokens]
    std::vector<std::vector<int64_t>> slot_mappings;   // [num_kv_groups][num_tokens]
    std::vector<std::vector<cpu::AttentionSeq>> seqs;  // [num_kv_groups][num scheduled seqs]
    std::vector<LogitsRow> rows;        // logits rows (collected per seq as on execute_logits/execute)
    std::vector<int64_t> logits_rows;   // [num_rows]: flattened row of each logits row
    // Pooling seqs: flattened rows whose final-normed hidden states are needed, and per scheduled
    // seq the range [begin, end) of them it sums (empty for the others).
    std::vector<int64_t> pool_rows;
    std::vector<std::pair<size_t, size_t>> pool_ranges;
    std::vector<float> logits;  // [num_rows, vocab]
    std::vector<float> pooled;  // [pool_rows, hidden] final-normed hidden states
    // EAGLE: the head's input features (execute_features; empty otherwise), and from the logits
    // rank the final-normed hidden states of every token (a target with return_hidden_) or the
    // head's output rows of the logits rows (with features).
    std::span<const float> features;
    std::vector<float> hidden;
    parallel::RankThreads::Ticket ticket = 0;  // 0: ran inline (one rank)
  };

  // Validates (block ids included) and flattens the batch into a job, and starts it on every rank.
  void start_job(const engine::SchedulerOutput& batch, bool with_prompt_rows);
  void flatten(Job& job, bool with_prompt_rows) const;
  // Waits for the oldest job (rethrowing its error); it leaves jobs_ either way.
  std::unique_ptr<Job> finish_job();
  // One rank's share of a job: its block operations (swap out, swap in, copy), its forward pass,
  // and on the last stage the logits and pooled rows.
  void run_rank(size_t rank, Job& job);
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  // One rank: its model slice, KV pool and swap pool.
  struct Shard {
    std::unique_ptr<models::LlamaModel> model;
    models::KvCache cache;
    int64_t block_floats = 0;  // one layer's K (or V) of one block: block_size * kv_heads * head_dim
    // Host swap pool [num_swap_blocks, slots, 2, block_size, kv_heads, head_dim]; calloc'd so
    // untouched swap space costs no resident memory.
    std::unique_ptr<float[], FreeDeleter> swap;
    std::vector<float> logits;  // [num_rows, vocab] scratch of a last-stage rank but the logits one
    std::vector<float> pooled;  // [pool_rows, hidden] likewise
  };

  // The logits rank's Job::hidden from the forward pass's output `hidden` (see Job::hidden).
  void copy_hidden_rows(Job& job, std::span<const float> hidden, const models::LlamaModel& model);
  // The pooled pieces of the step's pooling seqs (ModelRunnerOutput::pooled).
  void collect_pooled(const Job& job, engine::ModelRunnerOutput& out) const;
  // Samples every seq of a finished job (execute's output).
  engine::ModelRunnerOutput sample(Job& job);
  // Copies all layers' K/V of device block `device` to (to_host) or from host block `host`.
  void swap_block_copy(Shard& shard, int32_t device, int32_t host, bool to_host);
  // The rank whose logits the runner returns: the last stage's first tensor-parallel rank.
  size_t logits_rank() const { return shards_.size() - size_t(shards_[0].model->shard().tp_size); }

  std::vector<Shard> shards_;  // [num_ranks]
  std::shared_ptr<parallel::ThreadGroup> group_;  // null without parallelism
  const std::optional<parallel::InjectedFault> fault_ = parallel::injected_fault_from_env();
  int64_t parallel_steps_ = 0;  // forward passes of the group so far (the fault hook counts them)
  int num_swap_blocks_ = 0;
  int max_in_flight_ = 1;
  bool return_hidden_ = false;                   // set_return_hidden()
  std::span<const float> pending_features_;      // execute_features(): for start_job's job
  std::vector<int64_t> all_rows_;                // 0 .. num_tokens - 1 (copy_hidden_rows)
  std::deque<std::unique_ptr<Job>> jobs_;        // started, not collected; oldest first
  std::vector<std::unique_ptr<Job>> spare_jobs_;  // collected, kept for their buffers
  // Last: its threads run jobs that use everything above, so it goes (draining them) first.
  std::unique_ptr<parallel::RankThreads> threads_;  // one per rank (parallel runners only)
};

}  // namespace pagellm::runner
