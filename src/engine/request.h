// A request and its sequences (one per sample). The sequence is the unit the scheduler and the KV cache
// manager work on; the request groups the samples of one prompt and carries what they share.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagellm/llm.h"
#include "pagellm/outputs.h"
#include "pagellm/sampling_params.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::engine {

using Clock = std::chrono::steady_clock;

struct Request;

enum class SeqStatus { kWaiting, kRunning, kSwapped, kFinished };

// Output-side state of one sample: detokenization, stop-string matching and what has been emitted.
struct SeqOutputState {
  std::unique_ptr<tok::IncrementalDetokenizer> detokenizer;  // null when params.detokenize is false
  std::string text;                  // detokenized text, truncated at a stop string once finished
  size_t num_emitted_chars = 0;      // delta streaming: text already sent
  size_t num_emitted_tokens = 0;     // delta streaming: token ids already sent
  std::vector<TokenLogprobs> logprobs;  // per generated token, when params.logprobs is set
  double cumulative_logprob = 0.0;
  std::optional<std::string> stop_reason;
  std::optional<int32_t> stop_token;
  bool finish_sent = false;          // delta streaming: the finish reason has been reported
};

struct Sequence {
  int64_t seq_id = 0;
  Request* request = nullptr;
  int sample_index = 0;
  SeqStatus status = SeqStatus::kWaiting;
  std::vector<int32_t> token_ids;  // [num_prompt_tokens + num_output_tokens]
  int num_computed_tokens = 0;     // tokens whose KV is in the cache
  int num_scheduled_tokens = 0;    // this step's share (0 when not scheduled)
  // In a batch handed to the runner whose output has not come back (pipeline parallelism keeps
  // several batches in flight): its tokens, block table and sampling state must not change, so it
  // is neither scheduled again nor preempted, and its KV blocks are freed only when the batch ends.
  bool in_flight = false;
  uint64_t seed = 0;               // effective sampling seed of this sample
  FinishReason finish_reason = FinishReason::kNone;
  // EOS/stop ids while min_tokens is not reached, and the bad words' banned tokens for the next step.
  std::vector<int32_t> banned_token_ids;
  // Structured output: where this sample stands in the request's grammar, and the allowed-token
  // mask of its next sample ([ceil(vocab / 32)] words, filled each step it samples; also used,
  // without a matcher, for allowed_token_ids).
  std::unique_ptr<structured::Matcher> matcher;
  std::vector<uint32_t> token_mask;
  SeqOutputState out;
  // Speculative decoding. The proposer fills the drafts right before schedule(); they are used only
  // while the sequence still has spec_base_len tokens, and never enter token_ids (nor the prefix
  // cache's hashes) until the target has verified them.
  std::vector<int32_t> spec_token_ids;   // [num_drafts]
  std::vector<float> spec_draft_probs;   // [num_drafts, vocab] the draft's q; empty = point masses
  int spec_base_len = -1;
  std::vector<int32_t> step_token_ids;   // a speculating step's tokens: the last token, then drafts
  // Adaptive k: decayed counts of this sample's accepted drafts and of the drafts judged (each
  // accepted one, and the first rejected one), the estimate of its per-draft acceptance.
  double spec_hits = 0, spec_trials = 0;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_prompt_tokens() const;
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens(); }
  std::span<const int32_t> prompt_ids() const;
  std::span<const int32_t> output_ids() const;
  bool finished() const { return status == SeqStatus::kFinished; }
};

struct Request {
  std::string request_id;
  uint64_t arrival_index = 0;  // FCFS order (monotonic per engine)
  Clock::time_point arrival_time;
  int priority = 0;
  std::string cache_salt;
  uint64_t cache_salt_hash = 0;
  SamplingParams params;
  std::shared_ptr<structured::CompiledGrammar> grammar;  // params.structured_outputs, compiled
  // params.allowed_token_ids as a mask ([ceil(vocab / 32)] words; empty = no restriction).
  std::vector<uint32_t> allowed_mask;
  std::vector<std::vector<int32_t>> bad_words_token_ids;  // params.bad_words, tokenized
  // An EAGLE proposer drafts for this request: its steps return their hidden states
  // (ScheduledSeq::return_hidden; set by EngineCore::submit).
  bool spec_features = false;
  std::string prompt_text;
  std::vector<int32_t> prompt_token_ids;
  uint64_t base_seed = 0;      // params.seed, or derived from the engine seed and arrival_index
  bool stream_deltas = false;  // outputs carry only what is new (AsyncEngine) instead of everything

  // Samples. Starts with one sequence; forked into best_of when the prompt (all but its last token)
  // has been computed, so the samples share the prompt's KV blocks.
  std::vector<std::unique_ptr<Sequence>> seqs;
  bool forked = false;
  int num_samples() const { return params.best_of.value_or(params.n); }
  bool needs_fork() const { return !forked && num_samples() > 1; }

  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache at first admission
  bool admitted = false;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;  // [num computed so far]; entry 0 empty
  std::optional<Clock::time_point> first_token_time;
  Clock::time_point last_token_time;
  uint64_t touched_step = 0;  // last engine step that produced output for this request
  bool prompt_sent = false;   // delta streaming: prompt fields go out with the first output only
  // Pooling requests (RequestOptions::pooling): the runner's per-step pieces add up here (the
  // last token's hidden state, or the sum of every prompt token's), then `embedding` is final.
  PoolingType pooling = PoolingType::kNone;
  bool normalize = true;
  std::vector<double> pooled_sum;
  std::vector<float> embedding;

  int num_prompt_tokens() const { return static_cast<int>(prompt_token_ids.size()); }
  bool all_finished() const;
};

inline int Sequence::num_prompt_tokens() const { return request->num_prompt_tokens(); }
inline std::span<const int32_t> Sequence::prompt_ids() const {
  return std::span<const int32_t>(token_ids).first(static_cast<size_t>(num_prompt_tokens()));
}
inline std::span<const int32_t> Sequence::output_ids() const {
  return std::span<const int32_t>(token_ids).subspan(static_cast<size_t>(num_prompt_tokens()));
}

}  // namespace pagellm::engine
