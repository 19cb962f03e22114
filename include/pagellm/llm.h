// pagellm's public C++ API, mirroring vLLM's: LLM (offline batches), LLMEngine (step-wise control)
// and AsyncEngine (the engine loop on its own thread, for the server).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagellm/engine_args.h"
#include "pagellm/outputs.h"
#include "pagellm/sampling_params.h"

namespace pagellm {

namespace tok {
class Tokenizer;
class ChatTemplate;
}  // namespace tok

// A prompt as text or as token ids (exactly one is used: ids when non-empty).
struct PromptInput {
  std::string text;
  std::vector<int32_t> token_ids;
  static PromptInput from_text(std::string t) { return {std::move(t), {}}; }
  static PromptInput from_ids(std::vector<int32_t> ids) { return {{}, std::move(ids)}; }
};

struct RequestOptions {
  int priority = 0;        // lower runs first under --scheduling-policy priority
  std::string cache_salt;  // isolates this request's prefix-cache entries
  // kLast / kMean: the request computes its prompt and finishes with RequestOutput::embedding
  // (L2-normalized when `normalize`), generating nothing; the sampling parameters are ignored.
  PoolingType pooling = PoolingType::kNone;
  bool normalize = true;
};

// Counters and gauges for /metrics and the stats logger. Counters only grow.
struct EngineStats {
  int num_running = 0;
  int num_waiting = 0;
  int num_swapped = 0;
  double kv_usage = 0.0;  // fraction of KV blocks in use, 0..1
  int num_kv_blocks = 0;
  int kv_peak_blocks = 0;             // the most KV blocks in use at once since the engine started
  uint64_t prefix_cache_queries = 0;  // tokens looked up
  uint64_t prefix_cache_hits = 0;     // tokens found
  uint64_t num_preemptions = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t requests_finished_stop = 0;
  uint64_t requests_finished_length = 0;
  uint64_t requests_finished_abort = 0;
  uint64_t requests_finished_error = 0;
  uint64_t num_steps = 0;
  // Speculative decoding (vLLM's vllm:spec_decode_* counters): verified rows that carried drafts,
  // draft tokens verified, drafts accepted, and acceptances per draft position.
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  // Adaptive k: what one more draft costs against a target step (configured, measured, or the
  // method's default until measured; SpeculativeConfig::adaptive). 0 without adaptive k.
  double spec_draft_cost = 0;
  // Latency samples (seconds) collected since the last take_latency_samples(); the server folds them
  // into histograms.
  std::vector<double> ttft_samples;
  std::vector<double> itl_samples;
  std::vector<double> e2e_samples;
};

struct ModelInfo {
  std::string name;       // served name (folder name or "demo")
  int max_model_len = 0;  // context length in tokens
  int vocab_size = 0;
};

class EngineCore;

// Step-wise engine, single-threaded: the caller drives step().
class LLMEngine {
 public:
  explicit LLMEngine(const EngineArgs& args);
  ~LLMEngine();
  LLMEngine(const LLMEngine&) = delete;
  LLMEngine& operator=(const LLMEngine&) = delete;

  // Validates params and prompt length (throws pagellm::Error naming the problem; nothing is queued
  // then). Duplicate request ids are rejected.
  void add_request(const std::string& request_id, const PromptInput& prompt,
                   const SamplingParams& params, const RequestOptions& options = {});
  // Runs one engine step. Returns the cumulative output of every request that made progress or
  // finished during this step.
  std::vector<RequestOutput> step();
  // Aborts a request at any stage and frees its KV blocks; unknown ids are ignored.
  void abort_request(const std::string& request_id);
  bool has_unfinished_requests() const;

  const tok::Tokenizer& tokenizer() const;
  std::shared_ptr<const tok::Tokenizer> tokenizer_ptr() const;
  const ModelInfo& model_info() const;
  // Snapshot of the counters; latency samples are moved out (each is reported once).
  EngineStats take_stats();
  const EngineArgs& args() const;

 private:
  std::unique_ptr<EngineCore> core_;
};

// Offline batch inference, mirroring vLLM's LLM.generate. With --data-parallel-size N it holds N
// engine replicas: each batch is split over them (fewest outstanding tokens first, equal prompt
// prefixes together) and the replicas step concurrently, each on its own thread.
class LLM {
 public:
  explicit LLM(const EngineArgs& args);
  ~LLM();
  // Runs all prompts to completion (batched), returning outputs in prompt order. When show_progress
  // is set a progress bar goes to stderr.
  std::vector<RequestOutput> generate(const std::vector<PromptInput>& prompts,
                                      const SamplingParams& params, bool show_progress = false);
  std::vector<RequestOutput> generate(const std::vector<PromptInput>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      bool show_progress = false);
  // Polled on the calling thread between engine steps (every ~20 ms while replicas step on their
  // own threads). Returning true stops the batch: its unfinished requests are aborted and come
  // back with finish reason abort, and generate returns once the engines are idle again.
  using StopCheck = std::function<bool()>;
  std::vector<RequestOutput> generate(const std::vector<PromptInput>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      bool show_progress, const StopCheck& should_stop);
  // Embeddings of the prompts (engines made with runner = "pooling"), in prompt order: the
  // engine's pooling (args.default_pooling, args.default_normalize), as vLLM's LLM.embed.
  std::vector<std::vector<float>> embed(const std::vector<PromptInput>& prompts,
                                        bool show_progress = false);
  LLMEngine& engine() { return *engine_; }  // the first replica
  int num_replicas() const { return 1 + static_cast<int>(replicas_.size()); }

 private:
  std::vector<RequestOutput> run(const std::vector<PromptInput>& prompts,
                                 const std::vector<SamplingParams>& params,
                                 const RequestOptions& options, bool show_progress,
                                 const StopCheck& should_stop);

  std::unique_ptr<LLMEngine> engine_;
  std::vector<std::unique_ptr<LLMEngine>> replicas_;  // data-parallel replicas 1..N-1
};

// Receives a request's incremental outputs on the engine thread: each call carries only what is new
// since the previous call (text and token_ids deltas), with finished set on the last. It must not
// block: post the work to your own executor.
using OutputCallback = std::function<void(RequestOutput&&)>;

// The engine loop on its own thread. All methods are thread-safe and never wait for a step.
class AsyncEngine {
 public:
  explicit AsyncEngine(const EngineArgs& args);
  ~AsyncEngine();  // stops the loop; unfinished requests get a final abort output

  // Validates synchronously (throws pagellm::Error as LLMEngine::add_request does) and queues.
  void add_request(const std::string& request_id, const PromptInput& prompt,
                   const SamplingParams& params, OutputCallback on_output,
                   const RequestOptions& options = {});
  void abort_request(const std::string& request_id);
  // Stops taking requests; returns once the running ones have finished or `timeout_s` has passed
  // (then they are aborted).
  void shutdown(double timeout_s);

  bool healthy() const;  // false once the engine thread has died
  EngineStats take_stats();
  int num_unfinished() const;
  const tok::Tokenizer& tokenizer() const;
  std::shared_ptr<const tok::Tokenizer> tokenizer_ptr() const;
  const ModelInfo& model_info() const;
  const EngineArgs& args() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace pagellm
