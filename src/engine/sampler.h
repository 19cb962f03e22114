// Token sampling on the CPU, one logits row at a time. Deterministic: the token drawn depends only on
// the row, the seq's sampling params, its seed and the number of tokens it has generated — never on the
// rest of the batch. The CUDA sampler reproduces the same random stream (sample_uniform).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "engine/scheduler_output.h"
#include "pagellm/outputs.h"

namespace pagellm::engine {

struct SampleResult {
  int32_t token_id = -1;
  // Raw-model logprob of the chosen token and, when seq.params->logprobs is set, its top-N.
  TokenLogprobs logprobs;
};

// Applies banned ids, penalties (repetition, presence, frequency), temperature, top-k, top-p and min-p
// to `logits` (modified in place: [vocab]) and draws one token. Logprobs are computed from the row as
// it was passed in (vLLM's default "raw" logprobs).
SampleResult sample_token(std::span<float> logits, const ScheduledSeq& seq);

// The distribution sample_token draws from for this row, as probabilities `probs` [vocab] summing to
// 1: after bans, penalties, temperature, top-k, top-p and min-p; one-hot at sample_token's choice
// when greedy or when no token has weight. `logits` is modified as by sample_token. Speculative
// decoding's rejection sampler compares the target's and the draft's distributions through it.
void sampling_probs(std::span<float> logits, const ScheduledSeq& seq, std::span<float> probs);

// log_softmax(logits)[token] plus the top-n entries (best first).
TokenLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int top_n);

// Counter-based uniform random number in [0, 1) for (seed, counter): a pure function, so every
// backend draws the same stream.
double sample_uniform(uint64_t seed, uint64_t counter);

}  // namespace pagellm::engine
