// Draft-model speculation: a smaller model with the target's vocabulary proposes k tokens
// autoregressively per step, on the target's backend (the CPU, or the first GPU of the target's).
//
// KV design: the draft has its own runner with its own KV pool (as many blocks as the target's,
// so it holds as many tokens; on a GPU the target left room for it, cuda_model_loader) and its own
// KVCacheManager without prefix caching. The draft's KV is
// independent of the target's blocks, so the target's scheduler, preemption, swapping and prefix
// cache never need to know about it. Per sequence the proposer remembers which tokens the draft has
// KV for (`fed`); a round feeds the draft what it lacks — the whole prompt on a sequence's first
// round (the draft's "prefill", in pieces of at most max_batch_tokens), afterwards the target's correction or bonus token (and the last
// accepted draft) — then k - 1 single-token steps. When every seq of the round is greedy and its
// new tokens fit one step, the whole round is one ModelRunner::execute_greedy_chain (the draft's
// argmax at each step; the CUDA runner feeds each answer to the next step on the GPU and
// synchronizes once); otherwise each step is a runner call. Rejected drafts roll back for free: `fed` is cut
// to its common prefix with the verified tokens and their slots are overwritten next round. When
// the draft's pool runs out, the least recently used sequences' draft KV is dropped (they redo
// their draft prefill later); a sequence that still does not fit gets no drafts that step.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "runner/model_runner.h"
#include "spec/proposer.h"

namespace pagellm::spec {

class DraftModelProposer : public Proposer {
 public:
  // Takes a runner of the draft (its pool's blocks are managed here) whose steps hold at most
  // max_batch_tokens tokens (0: no limit).
  DraftModelProposer(std::unique_ptr<runner::ModelRunner> draft, int num_speculative_tokens,
                     int max_batch_tokens = 0);

  void propose(std::span<const SpecCandidate> candidates) override;
  void release(int64_t seq_id) override;
  int num_speculative_tokens() const override { return k_; }

  // For tests: sequences whose draft KV is held, and the draft pool.
  int num_tracked() const { return static_cast<int>(states_.size()); }
  const kv::KVCacheManager& kv() const { return kv_; }

 private:
  struct State {
    std::vector<int32_t> fed;  // tokens whose draft KV sits at positions [0, fed.size())
    uint64_t last_used = 0;
  };
  // One sequence of this round.
  struct Active {
    engine::Sequence* seq = nullptr;
    State* state = nullptr;
    int num_drafts = 0;  // drafts to propose
    int begin = 0;       // first position fed in the first draft step
    int32_t last = -1;   // the token fed by the next single-token step
    mutable std::vector<int32_t> output;  // draft_context's output extended by the drafts so far
  };
  // The draft's answer for one seq: its token (greedy steps) or its logits row.
  struct Answer {
    int32_t token = -1;
    std::vector<float> logits;
  };

  // Makes room in the draft pool for positions [0, num_tokens) of `seq`, evicting the least
  // recently used sequences that are not in this round. False when it cannot.
  bool reserve(int64_t seq_id, std::span<const int32_t> tokens, int num_computed, int num_tokens);
  // All of `active` greedy and their new tokens within one step: the drafts of every seq by one
  // ModelRunner::execute_greedy_chain (the draft's argmax, on a GPU without a host round trip per
  // draft token). False (nothing done) otherwise.
  bool propose_greedy_chain(std::vector<Active>& active);
  // One draft forward over `active` (those with step < num_drafts); picks draft number `step`.
  void draft_step(std::vector<Active>& active, int step);
  // Step 0's forward: each active seq's tokens from `begin` on, in batches of at most
  // max_batch_tokens_; the answer for each seq's last token, by index into active.
  std::vector<Answer> feed_new_tokens(std::vector<Active>& active, std::vector<size_t>& index,
                                      bool greedy);
  // One draft batch: greedy, the runner's own sampled tokens; else the logits rows.
  std::vector<Answer> run(const engine::SchedulerOutput& batch, bool greedy);
  // The sampling context of a's draft number `step`: its output extended by the drafts so far
  // (spec::position_context; the extended output lives in a.output).
  static engine::ScheduledSeq draft_context(const Active& a, int step);
  // A sampled seq's draft from the logits row: drawn from the draft's distribution q, which is
  // kept (spec_draft_probs) for the rejection sampler.
  int32_t choose(std::span<float> logits, Active& a, int step);

  std::unique_ptr<runner::ModelRunner> draft_;
  int k_;
  int max_batch_tokens_;
  int vocab_;
  int max_positions_;
  kv::KVCacheManager kv_;
  std::unordered_map<int64_t, State> states_;
  uint64_t clock_ = 0;
  std::vector<float> probs_;  // [vocab]
};

// Loads the draft named by args.speculative.model for `target` and checks it (vocabulary size,
// tokenizer); throws pagellm::Error (kInvalidArgument, one line) when they differ.
std::unique_ptr<Proposer> load_draft_proposer(const EngineArgs& args,
                                              const runner::ModelRunner& target,
                                              const tok::Tokenizer& tokenizer);

}  // namespace pagellm::spec
