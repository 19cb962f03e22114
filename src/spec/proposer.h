// Draft-token proposers for speculative decoding. The engine asks its proposer for drafts right
// before each schedule(), for every running sequence in decode; the scheduler then schedules such a
// sequence's last token plus its drafts as one row of 1 + k tokens, and the runner verifies them
// (spec/rejection_sampler.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/request.h"
#include "pagellm/engine_args.h"
#include "runner/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::spec {

struct SpecCandidate {
  engine::Sequence* seq = nullptr;
  int max_drafts = 0;  // drafts the sequence can still use (max_tokens, max_model_len)
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Sets every candidate's spec_token_ids (0 to min(k, max_drafts) tokens), spec_draft_probs
  // ([num drafts, vocab], or empty for point masses) and spec_base_len (its current length).
  virtual void propose(std::span<const SpecCandidate> candidates) = 0;
  // The sequence has finished or was aborted: forget what is kept for it.
  virtual void release(int64_t seq_id) { (void)seq_id; }
  virtual int num_speculative_tokens() const = 0;
  // Whether the target must return its hidden states (ModelRunner::set_return_hidden), which the
  // engine then hands to observe() after every step, before the scheduler takes the step's tokens.
  virtual bool needs_hidden_states() const { return false; }
  virtual void observe(const engine::SchedulerOutput& batch, const engine::ModelRunnerOutput& out) {
    (void)batch, (void)out;
  }
};

// Empties seq's drafts and their probabilities, bases them on its current length, and returns it.
int clear_drafts(engine::Sequence& seq);

// The sampling context of `seq`'s draft number `step`: its output extended by the drafts proposed
// so far (spec::position_context; the extended output lives in scratch).
engine::ScheduledSeq draft_sampling_context(const engine::Sequence& seq, int step,
                                            std::vector<int32_t>& scratch);

// A sampled seq's draft number `step` from the proposer's logits row: drawn from the seq's
// sampling distribution q in that context, which is appended to seq.spec_draft_probs for the
// rejection sampler. probs is scratch.
int32_t draw_sampled_draft(std::span<float> logits, engine::Sequence& seq, int step,
                           std::vector<int32_t>& scratch, std::vector<float>& probs);

// Adaptive k: how many drafts (1..k) a sequence whose decayed counts of accepted and judged
// drafts are `hits` and `trials` should get when one more draft costs `cost` of a target step
// (SpeculativeConfig::adaptive): the most j with alpha^j >= cost, alpha = (hits + 1) / (trials + 1)
// (one optimistic pseudo-count, so a new sequence starts at k and none is ever stuck at zero).
int adaptive_num_drafts(double hits, double trials, int k, double cost);

// The index of the first largest logit (a greedy seq's draft).
int32_t argmax_draft(std::span<const float> logits);

// The proposer args.speculative asks for (null when speculation is off). For draft_model it loads
// the draft on the CPU and checks it against the target: same vocabulary size and tokenizer
// (one-line kInvalidArgument errors naming the draft folder).
std::unique_ptr<Proposer> make_proposer(const EngineArgs& args, const runner::ModelRunner& target,
                                        const tok::Tokenizer& tokenizer);

}  // namespace pagellm::spec
