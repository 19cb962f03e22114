// The plain structs that pass between the scheduler and a model runner each step (vLLM V1's
// SchedulerOutput / ModelRunnerOutput). The scheduler never touches a device; a runner never touches
// scheduling state. Spans point into engine-owned memory that stays valid for the step.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "kv/kv_layout.h"
#include "pagellm/engine_args.h"
#include "pagellm/outputs.h"
#include "pagellm/sampling_params.h"

namespace pagellm::engine {

// One sequence's share of a step.
struct ScheduledSeq {
  int64_t seq_id = 0;                    // engine-internal, stable while the sequence lives
  std::span<const int32_t> token_ids;    // tokens to compute this step: [num_scheduled_tokens]
  int32_t num_computed_tokens = 0;       // position of token_ids[0]; KV for [0, this) is cached
  // Per KV cache group (kv/kv_layout.h: one, unless the model mixes sliding-window and full
  // layers), the physical KV blocks covering [0, num_computed + num_scheduled); 0 where a
  // sliding-window group gave a block back. Groups past the runner's count are empty.
  std::array<std::span<const int32_t>, kv::kMaxKvGroups> block_tables{};
  bool needs_sample = false;  // the last scheduled token is the sequence's last known token
  // Sampling context (read only when needs_sample or prompt_logprobs).
  const SamplingParams* params = nullptr;
  uint64_t seed = 0;                           // effective per-sample seed (always set)
  std::span<const int32_t> prompt_token_ids;   // for repetition penalty
  std::span<const int32_t> output_token_ids;   // generated so far: penalties, and the RNG counter
  std::span<const int32_t> banned_token_ids;   // masked to -inf (EOS/stop ids before min_tokens)
  // Structured output (empty when unconstrained): [ceil(vocab / 32)] words, token t may be sampled
  // iff bit t % 32 of word t / 32 is set. Applied before anything else; ids past the mask are
  // disallowed.
  std::span<const uint32_t> allowed_token_mask;
  int prompt_logprobs = 0;  // >0: return logprobs for the prompt positions computed this step
  // A pooling request: no sampling; the runner returns ModelRunnerOutput::pooled for it instead.
  PoolingType pooling = PoolingType::kNone;
  // Speculative decoding: the last num_spec_tokens of token_ids are draft tokens (needs_sample is
  // set). The runner computes logits at all 1 + num_spec_tokens positions and verifies the drafts
  // (spec::verify_drafts), answering in ModelRunnerOutput::spec_token_ids.
  int32_t num_spec_tokens = 0;
  std::span<const float> draft_probs;
  // An EAGLE proposer drafts for this seq: a runner asked for hidden states
  // (ModelRunner::set_return_hidden) returns this step's (ModelRunnerOutput::hidden_states).
  bool return_hidden = false;  // [num_spec_tokens, vocab] the draft's q; empty = point masses
};

// Allowed-token masks that may still be in the making when the runner starts: EngineCore builds
// them on a thread pool while the forward pass runs, since only the sampler reads them.
class MaskFence {
 public:
  virtual ~MaskFence() = default;
  // Returns once every allowed_token_mask of the step is written; rethrows a failure to build one.
  virtual void wait() const = 0;
};

// A runner applies the block operations in this order, each list in order, before computing any
// token: swap out, swap in, copy. (A block freed by a swap-out may be reused in the same step by a
// swap-in or as a copy destination; copies read blocks that stay referenced.)
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;
  int32_t num_scheduled_tokens = 0;                     // sum over seqs
  std::vector<std::pair<int32_t, int32_t>> blocks_to_copy;  // copy-on-write: (src, dst) KV blocks
  std::vector<std::pair<int32_t, int32_t>> blocks_to_swap_out;  // (device block, host block)
  std::vector<std::pair<int32_t, int32_t>> blocks_to_swap_in;   // (host block, device block)
  // Set while the masks are being built: a runner calls wait_for_masks() before it reads any
  // allowed_token_mask (reading one earlier is a data race). Null: they are ready.
  const MaskFence* pending_masks = nullptr;
};

// Whether some seq of the batch wants its hidden states back (ScheduledSeq::return_hidden).
inline bool any_return_hidden(const SchedulerOutput& batch) {
  for (const ScheduledSeq& s : batch.seqs)
    if (s.return_hidden) return true;
  return false;
}

inline void wait_for_masks(const SchedulerOutput& batch) {
  if (batch.pending_masks != nullptr) batch.pending_masks->wait();
}

struct ModelRunnerOutput {
  // Per scheduled seq, in SchedulerOutput order; -1 where needs_sample was false.
  std::vector<int32_t> sampled_token_ids;
  // Logprob info of the sampled token (top-N filled when params->logprobs is set); empty optional
  // where nothing was sampled.
  std::vector<std::optional<TokenLogprobs>> sampled_logprobs;
  // Per scheduled seq: logprobs of token i+1 given tokens up to i, for each prompt position computed
  // this step whose next token is a prompt token (only when prompt_logprobs > 0).
  std::vector<std::vector<TokenLogprobs>> prompt_logprobs;
  // Per scheduled seq (empty for the others): pooling kLast, on its needs_sample step, the
  // final-normed hidden state of its last token; kMean, every step, the sum of the final-normed
  // hidden states of the tokens computed this step. [hidden_size] floats.
  std::vector<std::vector<float>> pooled;
  // Per scheduled seq with num_spec_tokens > 0 (empty for the others; sampled_token_ids holds -1
  // there): the tokens the step yields, in order — the accepted drafts, then the target's own token
  // (the correction after a rejection, or the bonus token when all were accepted) — so 1 to
  // num_spec_tokens + 1 tokens, with the target's logprobs of each.
  std::vector<std::vector<int32_t>> spec_token_ids;
  std::vector<std::vector<TokenLogprobs>> spec_logprobs;
  // Only from a runner asked for them (ModelRunner::set_return_hidden), on a step where some seq
  // has return_hidden: the final-normed hidden state of every scheduled token,
  // [num_scheduled_tokens, hidden_size] in SchedulerOutput order (what an EAGLE head drafts from;
  // the rows of the other seqs may be zeros). Empty otherwise.
  std::vector<float> hidden_states;
};

}  // namespace pagellm::engine
