// One engine: tokenizer + model runner + KV cache manager + scheduler + output processor, driven one
// step at a time (schedule → execute → update → outputs). Single-threaded; LLMEngine wraps it directly
// and AsyncEngine runs it on its own thread.
//
// With a runner that keeps several batches in flight (pipeline parallelism), a step schedules and
// submits a batch while the queue has room and returns at once; once it is full, or nothing more
// can be scheduled, the step waits for the oldest batch and applies its output (vLLM V1's
// step_with_batch_queue). A request that ends while a batch that reads its memory is in flight is
// kept until that batch has come back.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/mask_builder.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/stats.h"
#include "io/hf_config.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"
#include "pagellm/llm.h"
#include "runner/model_runner.h"
#include "spec/draft_cost.h"
#include "spec/proposer.h"
#include "structured/compiler.h"

namespace pagellm {

class EngineCore {
 public:
  // Loads the model (runner::load_model) and its tokenizer, or the demo model when args.model is empty.
  explicit EngineCore(const EngineArgs& args);
  // With a ready runner (tests use a fake one). max_model_len comes from args or the runner's config.
  EngineCore(const EngineArgs& args, std::unique_ptr<runner::ModelRunner> runner,
             std::shared_ptr<const tok::Tokenizer> tokenizer, io::GenerationConfig generation_config,
             std::string model_name);
  ~EngineCore();

  // Validates and queues (throws pagellm::Error, queuing nothing). stream_deltas: outputs carry only
  // what is new since the previous output of this request.
  void add_request(const std::string& request_id, const PromptInput& prompt, const SamplingParams& params,
                   const RequestOptions& options, bool stream_deltas);
  // The two halves of add_request. make_request only reads immutable state (and the thread-safe
  // structured-output grammar cache, compiling the request's grammar there), so any thread may call
  // it (AsyncEngine validates on the caller's thread); submit belongs to the stepping thread and
  // rejects duplicate ids.
  std::unique_ptr<engine::Request> make_request(const std::string& request_id, const PromptInput& prompt,
                                                const SamplingParams& params, const RequestOptions& options,
                                                bool stream_deltas) const;
  void submit(std::unique_ptr<engine::Request> req);
  // Aborts every request (their outputs come with the next step()).
  void abort_all();
  // One step; returns an output for every request that made progress, finished or was aborted.
  std::vector<RequestOutput> step();
  // Ends the request wherever it is; its final output (finish reason abort) comes with the next
  // step(). Returns false for unknown or already finished ids.
  bool abort_request(const std::string& request_id);
  bool has_unfinished() const {
    return !requests_.empty() || !pending_outputs_.empty() || num_in_flight_ > 0;
  }
  int num_unfinished() const { return static_cast<int>(requests_.size()); }

  EngineStats take_stats();
  EngineStats counters() const;  // without latency samples

  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  std::shared_ptr<const tok::Tokenizer> tokenizer_ptr() const { return tokenizer_; }
  const ModelInfo& model_info() const { return info_; }
  const EngineArgs& args() const { return args_; }
  const io::GenerationConfig& generation_config() const { return generation_config_; }
  engine::Scheduler& scheduler() { return *scheduler_; }
  bool runner_healthy() const { return runner_->healthy(); }
  kv::KVCacheManager& kv_cache() { return *kv_; }
  spec::Proposer* proposer() { return proposer_.get(); }  // null without speculation

 private:
  void init(std::unique_ptr<runner::ModelRunner> runner);
  void log_kv_groups(const kv::KvLayout& layout, int max_model_len) const;
  std::vector<int32_t> tokenize(const PromptInput& prompt) const;
  void process_new_tokens(const std::vector<engine::NewToken>& new_tokens, std::vector<engine::Request*>& touched);
  // How the sequence's grammar took its previous token (deferred to the mask threads): kStop when
  // that completed the output, kError when it broke it, else kNone.
  FinishReason settled_grammar(engine::Sequence& seq) const;
  void count_scheduled_tokens(const engine::SchedulerOutput& batch);
  // Speculative decoding: drafts for every running sequence in decode, before schedule().
  void propose_drafts();
  // What one more draft costs against a target step, for adaptive k: draft_token_cost when set,
  // else the measured cost (spec::DraftCostMeter), else the method's default.
  double draft_cost() const;
  // Times the batch just submitted if it verifies drafts and runs alone (draft_cost_meter_).
  void time_draft_batch(const engine::SchedulerOutput& batch);
  // Whether the request's sequences may get drafts (propose_drafts).
  bool may_speculate(const engine::Request& req) const;
  // Structured output and allowed_token_ids: starts building the allowed-token mask of every
  // scheduled seq that samples this step on the mask pool, and marks the batch's masks pending
  // (the runner waits for them before sampling, so they are built while the forward pass runs).
  void start_token_masks(const engine::SchedulerOutput& batch);
  void wait_token_masks();
  void set_token_controls(engine::Request& req) const;
  void finish_request(engine::Request& req);
  // Schedules and submits one batch; false when there was nothing to run.
  bool submit_batch();
  // Waits for the oldest batch in flight and applies its output.
  void collect_batch(std::vector<RequestOutput>& outputs);
  // Destroys the finished requests that no batch in flight reads any more.
  void release_retired();
  // A pooling request's prompt is computed: its embedding from the pooled sum (mean, L2 norm).
  static void finish_pooling(engine::Request& req);

  EngineArgs args_;
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  io::GenerationConfig generation_config_;
  ModelInfo info_;
  std::unique_ptr<runner::ModelRunner> runner_;
  std::unique_ptr<kv::KVCacheManager> kv_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::unique_ptr<spec::Proposer> proposer_;  // null without --speculative-config
  // The batch submitted last (the scheduler's; valid until the next schedule()): observe()'s.
  const engine::SchedulerOutput* last_batch_ = nullptr;
  std::vector<std::pair<engine::Sequence*, int>> spec_seqs_;  // reused every step
  std::vector<spec::SpecCandidate> spec_candidates_;
  // Adaptive k's measured draft cost: proposals and the target steps that verified them, timed
  // (timed_batch_: the number of the batch being timed, 0 for none; it ran alone).
  spec::DraftCostMeter draft_cost_meter_;
  uint64_t timed_batch_ = 0;
  std::chrono::steady_clock::time_point timed_batch_start_;
  std::unique_ptr<engine::OutputProcessor> output_processor_;
  std::unique_ptr<structured::GrammarCompiler> grammar_compiler_;  // null without a tokenizer
  std::unordered_map<std::string, std::unique_ptr<engine::Request>> requests_;
  std::vector<RequestOutput> pending_outputs_;  // abort outputs waiting for the next step
  // Batches in flight: at most max_in_flight_ (the runner's limit); submitted_ / collected_ count
  // batches since the start. A request finished while batches were in flight waits in retired_
  // until every batch submitted before then has been collected.
  int max_in_flight_ = 1;
  int num_in_flight_ = 0;
  uint64_t num_submitted_ = 0;
  uint64_t num_collected_ = 0;
  std::vector<std::pair<std::unique_ptr<engine::Request>, uint64_t>> retired_;
  uint64_t next_arrival_ = 0;
  uint64_t step_index_ = 0;
  EngineStats stats_;  // counters and latency samples; gauges are filled on read
  engine::StatsLogger stats_logger_;
  std::vector<engine::NewToken> new_tokens_;  // reused every step
  std::vector<engine::MaskJob> mask_jobs_;    // reused every step
  std::unique_ptr<engine::MaskBuilder> mask_builder_;  // made on the first step with a mask
  bool masks_pending_ = false;
};

}  // namespace pagellm
