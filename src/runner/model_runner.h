// The one interface between the engine and a backend. CPU and CUDA runners implement it; everything
// above (scheduler, KV manager, sampling parameters, server) is shared.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"

#include "engine/scheduler_output.h"
#include "io/hf_config.h"

namespace pagellm::runner {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Number of KV blocks the runner allocated (fixed after construction).
  virtual int num_kv_blocks() const = 0;
  // Host blocks available for swapping (0 = swapping disabled).
  virtual int num_swap_blocks() const { return 0; }
  virtual int block_size() const = 0;
  virtual const io::ModelConfig& config() const = 0;

  // Runs the forward pass for every scheduled token, writes their K/V into the cache through the
  // block tables, and samples the next token of each seq with needs_sample.
  virtual engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) = 0;

  // The forward pass of execute() without sampling: per scheduled seq, the fp32 logits [vocab] of
  // its last scheduled token when needs_sample is set (empty otherwise). The draft model of
  // speculative decoding (spec/draft_proposer.h) picks its tokens from them on the host.
  virtual std::vector<std::vector<float>> execute_logits(const engine::SchedulerOutput& batch) {
    (void)batch;
    throw_error(ErrorKind::kUnsupported, "this model runner does not return logits");
  }

  // Greedy drafting (the draft model of speculative decoding): runs `batch`, whose every seq has
  // needs_sample, then single-token steps in which each seq's input is its previous answer at the
  // next position, until seq i has steps[i] >= 1 answers. An answer is the argmax of the raw logits
  // (no sampling parameters: verification applies them). The block tables must hold every position
  // written. Returns the answers per seq. The default runs execute_logits() once per step; the
  // CUDA runner keeps the answers on the GPU between steps and synchronizes once.
  virtual std::vector<std::vector<int32_t>> execute_greedy_chain(
      const engine::SchedulerOutput& batch, std::span<const int> steps);

  // Whether drafts of sampled (temperature > 0) sequences are worth verifying here: the CUDA
  // runners verify them on the host from downloaded logits rows (spec::verify_drafts), slower than
  // decoding without drafts, so the engine speculates only for their greedy sequences.
  virtual bool verifies_sampled_drafts() const { return true; }

  // EAGLE speculation, the target's side: from now on every output carries hidden_states, the
  // final-normed hidden state of each scheduled token. The default refuses (kUnsupported).
  virtual void set_return_hidden() {
    throw_error(ErrorKind::kUnsupported,
                "this runner cannot give an EAGLE head its hidden states (EAGLE needs "
                "--tensor-parallel-size 1 and --pipeline-parallel-size 1)");
  }

  // EAGLE speculation, the head's side: the forward pass of execute_logits() with each scheduled
  // token's feature (features: [num_scheduled_tokens, hidden], in order; ForwardBatch::features),
  // answering per seq with needs_sample the logits of its last token and the head's output hidden
  // state there (the next position's feature). Empty vectors for the other seqs.
  struct FeatureStep {
    std::vector<std::vector<float>> logits;  // per seq: [vocab]
    std::vector<std::vector<float>> hidden;  // per seq: [hidden]
  };
  virtual FeatureStep execute_features(const engine::SchedulerOutput& batch,
                                       std::span<const float> features) {
    (void)batch, (void)features;
    throw_error(ErrorKind::kUnsupported, "this model runner does not run EAGLE heads");
  }

  // EAGLE greedy drafting: execute_features(batch, features), then single-token steps in which
  // each seq's input is its previous answer (the argmax of the raw logits) with the head's own
  // output there as its feature, until seq i has steps[i] answers (as execute_greedy_chain). The
  // default runs execute_features() once per step; the CUDA runner keeps answers and features on
  // the GPU between steps and synchronizes once.
  virtual std::vector<std::vector<int32_t>> execute_feature_chain(
      const engine::SchedulerOutput& batch, std::span<const float> features,
      std::span<const int> steps);

  // Batches in flight (pipeline parallelism, vLLM's batch queue): submit() starts a batch and, on a
  // runner that overlaps batches, returns before it is done; wait_next() returns the output of the
  // oldest batch not yet collected (rethrowing its error; it is collected either way). A submitted
  // batch, and everything its spans point into, must stay valid and unchanged until its output has
  // been collected. At most max_batches_in_flight() batches may be outstanding. The default runs
  // execute() inside submit().
  virtual int max_batches_in_flight() const { return 1; }
  virtual void submit(const engine::SchedulerOutput& batch) { done_.push_back(execute(batch)); }
  virtual engine::ModelRunnerOutput wait_next() {
    if (done_.empty()) throw_error(ErrorKind::kInternal, "model runner: no batch in flight");
    engine::ModelRunnerOutput out = std::move(done_.front());
    done_.pop_front();
    return out;
  }

  // False once the runner can no longer run steps (a parallel group aborted between steps, e.g. a
  // worker process that died while the engine was idle). Safe to call from any thread.
  virtual bool healthy() const { return true; }

 private:
  std::deque<engine::ModelRunnerOutput> done_;  // the default submit()'s outputs, oldest first
};

// Throws (kInternal) unless steps holds one count >= 1 per seq of batch and every seq is a plain
// sampled row (needs_sample, no drafts, no pooling): what execute_greedy_chain takes.
void check_greedy_chain(const engine::SchedulerOutput& batch, std::span<const int> steps);

}  // namespace pagellm::runner
