// EAGLE speculation (method "eagle"): a one-layer draft head that reads the target's own hidden
// states (Li et al., EAGLE, 2024). Draft position p takes fc(concat(embedding(t[p + 1]), f[p])),
// f[p] being the target's final-normed hidden state at position p, and its output predicts
// t[p + 2]; the head's KV cache sits at the target's positions. Per round the head first catches
// up on the positions the target has computed since the last round (the prompt on a sequence's
// first round, afterwards the verified tokens), which gives the first draft; each further draft
// feeds the previous draft's token with the head's own output as its feature. When every sequence
// of the round is greedy and the catch-up fits one step, the round is one
// ModelRunner::execute_feature_chain (argmax drafts; the CUDA runner keeps tokens and features on
// the GPU and synchronizes once); otherwise each step is a runner call.
//
// Where the features come from: the target returns every scheduled token's hidden state
// (ModelRunner::set_return_hidden) and the engine hands them to observe() after each step; they
// are kept per sequence until a round has fed them. Positions with no feature (served from the
// target's prefix cache, or fed before the head's KV was evicted) get zeros: the drafts are then
// worse, never the output, which verification decides.
//
// KV: the head has its own runner and pool (as many blocks as the target's) managed here without
// prefix caching, as DraftModelProposer does; when the pool runs out the least recently used
// sequences' head KV is dropped.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "runner/model_runner.h"
#include "spec/proposer.h"

namespace pagellm::spec {

class EagleProposer : public Proposer {
 public:
  // Takes the head's runner (config().eagle; its pool's blocks are managed here) whose steps hold
  // at most max_batch_tokens tokens (0: no limit).
  EagleProposer(std::unique_ptr<runner::ModelRunner> head, int num_speculative_tokens,
                int max_batch_tokens = 0);

  void propose(std::span<const SpecCandidate> candidates) override;
  void release(int64_t seq_id) override;
  int num_speculative_tokens() const override { return k_; }
  bool needs_hidden_states() const override { return true; }
  void observe(const engine::SchedulerOutput& batch, const engine::ModelRunnerOutput& out) override;

  // For tests: sequences with state, and the features held for one (positions).
  int num_tracked() const { return static_cast<int>(states_.size()); }
  int num_held_features(int64_t seq_id) const;

  // Feature bytes held per sequence at most (fp32 rows); older positions are dropped (they then
  // feed zeros): 64 MiB is 4,096 positions of an 8B model's 4,096-wide rows.
  static constexpr size_t kMaxHeldFeatureBytes = size_t{64} << 20;

 private:
  struct State {
    int valid = 0;  // the head's KV holds positions [0, valid) fed with the target's features
    bool has_kv = false;
    int feat_begin = 0;        // feats holds positions [feat_begin, feat_begin + feats / hidden)
    std::vector<float> feats;  // [positions, hidden]
    uint64_t last_used = 0;
  };
  struct Active {
    engine::Sequence* seq = nullptr;
    State* state = nullptr;
    int num_drafts = 0;
    int begin = 0;                 // first position fed in the catch-up step
    int32_t last = -1;             // the token fed by the next single-token step
    std::vector<float> feature;    // the head's output at the last position fed: [hidden]
    std::vector<int32_t> scratch;  // draft_sampling_context's
  };

  bool reserve(int64_t seq_id, std::span<const int32_t> tokens, int num_computed, int num_tokens);
  void evict(int64_t seq_id, State& st);
  // Appends position p's feature (the target's, or zeros) to out.
  void append_feature(const State& st, int p, std::vector<float>& out) const;
  // All of `active` greedy and their catch-up within one step: the drafts of every seq by one
  // ModelRunner::execute_feature_chain (on a GPU without a host round trip per draft). False
  // (nothing done) otherwise.
  bool propose_greedy_chain(std::vector<Active>& active);
  // The catch-up step: positions [begin, len - 2] of every active seq, in batches of at most
  // max_batch_tokens_; gives each seq its first draft.
  void catch_up(std::vector<Active>& active);
  // Draft number `step` >= 1 of every active seq that wants it: one token each.
  void draft_step(std::vector<Active>& active, int step);
  // Takes the head's answer (logits row and output) for a: its next draft.
  void take_answer(Active& a, int step, std::vector<float>& logits, std::vector<float>& hidden);

  std::unique_ptr<runner::ModelRunner> head_;
  int k_;
  int max_batch_tokens_;
  int vocab_;
  int hidden_;
  int max_positions_;
  size_t max_held_;  // positions: kMaxHeldFeatureBytes of rows
  kv::KVCacheManager kv_;
  std::unordered_map<int64_t, State> states_;
  uint64_t clock_ = 0;
  std::vector<float> probs_;
};

// Loads the EAGLE head named by args.speculative.model for `target`, on the target's backend (the
// CPU, or its GPU; without parallelism): its config.json and fc / layer tensors (with or without a
// "model." prefix), and the target's embedding and LM head. Throws pagellm::Error (one line) for a
// folder that is not an EAGLE head of this target (hidden size, vocabulary) or an EAGLE-3 head.
std::unique_ptr<Proposer> load_eagle_proposer(const EngineArgs& args,
                                              const runner::ModelRunner& target);

}  // namespace pagellm::spec
