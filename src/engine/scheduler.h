// Iteration-level scheduling as in vLLM V1: no prefill and decode phases. Every step hands each
// sequence a number of tokens to compute (num_tokens - num_computed_tokens, capped by the token
// budget), so chunked prefill, prefix hits and recompute after preemption are all the same rule.
//
// Order within a step: running sequences with one token to compute (decodes), then running sequences
// in the middle of a prompt, then swapped-out sequences, then waiting ones — so new prompts never starve
// running decodes. When KV blocks run out the lowest-priority, latest sequence is preempted (swapped to
// host memory when swap space exists, otherwise freed and recomputed later with its tokens kept).
//
// Batches in flight (pipeline parallelism, vLLM V1's batch queue): up to max_batches_in_flight
// batches may be scheduled before the oldest one's output comes back; outputs are applied in
// scheduling order. A sequence in a batch in flight is skipped by schedule() until its output is
// applied (so no sequence is in two batches), is never preempted, and when it finishes meanwhile
// (an abort) its KV blocks are freed only once its batch has come back. To keep every stage busy,
// a batch takes at most its share of the sequences that could run (in flight or not, over
// max_batches_in_flight), so that in steady state the batches are of equal size.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "kv/kv_cache_manager.h"

namespace pagellm::engine {

enum class SchedulingPolicy { kFcfs, kPriority };

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 2048;
  bool enable_chunked_prefill = true;
  int long_prefill_token_threshold = 0;  // with chunked prefill: most tokens per seq and step
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  int max_batches_in_flight = 1;  // batches scheduled before the oldest one's output is applied
};

// A token produced by the last step, for the output processor.
struct NewToken {
  Sequence* seq = nullptr;
  int32_t token_id = -1;
  std::optional<TokenLogprobs> logprobs;
  bool pooled = false;  // a pooling request's prompt is done: no token, its embedding is ready
  // The sequence's length with this token: a speculating step appends several tokens at once, and
  // a stop on one of them drops those after it.
  int num_tokens = 0;
};

// Speculative decoding counters (vLLM's spec_decode metrics).
struct SpecDecodeCounters {
  uint64_t num_drafts = 0;           // rows verified with at least one draft token
  uint64_t num_draft_tokens = 0;     // draft tokens verified
  uint64_t num_accepted_tokens = 0;  // draft tokens accepted
  std::vector<uint64_t> accepted_per_pos;  // [k] acceptances of draft position i
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, kv::KVCacheManager& kv);

  // Throws pagellm::Error(kInvalidArgument / kResourceExhausted) when the request can never be
  // scheduled: prompt + max_tokens beyond max_model_len, more KV blocks than the whole pool, more
  // samples than max_num_seqs.
  void check_fits(const Request& req) const;
  // Queues the request's first sequence. The request must outlive its sequences' stay here.
  void add_request(Request& req);

  // Decides the next batch's work. A batch with work (sequences or swaps) is in flight until
  // update_from_output() applies its output, and its output stays valid until then; an empty one
  // is not in flight and stays valid until the next schedule() call. Throws pagellm::Error
  // (kInternal) when max_batches_in_flight batches are in flight already.
  const SchedulerOutput& schedule();
  // Marks the output schedule() just returned as having its allowed-token masks still being built
  // (null: ready); see SchedulerOutput::pending_masks.
  void set_pending_masks(const MaskFence* fence) {
    (in_flight_.empty() ? out_ : in_flight_.back().out).pending_masks = fence;
  }
  // The sequences behind the last schedule()'s output, in its order.
  std::span<Sequence* const> scheduled_seqs() const { return last_scheduled_; }
  // Applies the runner's results to the sequences of the oldest batch in flight (advances
  // num_computed_tokens, appends sampled tokens, forks samples whose prompt is ready) and lists the
  // new tokens.
  void update_from_output(const ModelRunnerOutput& output, std::vector<NewToken>& new_tokens);
  int num_batches_in_flight() const { return static_cast<int>(in_flight_.size()); }

  // Ends one sequence with `reason`, frees its blocks and drops every reference to it, so the caller
  // may destroy it (and its request) right away.
  void finish_seq(Sequence& seq, FinishReason reason);
  // Ends every sequence of the request with kAbort, wherever it is.
  void abort_request(Request& req);

  // Running sequences in decode that may speculate this step (no fork pending, no pooling, no
  // prompt logprobs outstanding), each with the drafts it could still use under max_tokens and
  // max_model_len. The proposer fills their drafts before schedule().
  void spec_candidates(std::vector<std::pair<Sequence*, int>>& out) const;
  const SpecDecodeCounters& spec_counters() const { return spec_; }

  int num_running() const { return num_running_; }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  bool has_unfinished() const { return num_running_ > 0 || !waiting_.empty() || !swapped_.empty(); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  const SchedulerConfig& config() const { return config_; }
  kv::KVCacheManager& kv() { return kv_; }

 private:
  // Total order of sequences: priority (under kPriority), then arrival, then sample index. The waiting
  // and swapped queues run front to back; the preemption victim is the running maximum.
  struct SeqOrder {
    bool priority = false;
    bool operator()(const Sequence* a, const Sequence* b) const;
  };

  // A batch handed to the runner.
  struct Batch {
    SchedulerOutput out;
    std::vector<Sequence*> seqs;  // parallel to out.seqs; null where the sequence finished meanwhile
    std::vector<int64_t> deferred_frees;  // sequences finished meanwhile: KV freed on its return
  };

  kv::SeqRef seq_ref(const Sequence& seq) const;
  // How many sequences the batch being scheduled may take (see the file comment).
  int batch_seq_cap() const;
  bool batch_full() const { return budget_ <= 0 || static_cast<int>(scheduled_.size()) >= seq_cap_; }
  // Drops a finishing sequence from its batch in flight; false when it is in none.
  bool forget_in_flight(Sequence& seq);
  int tokens_to_schedule(const Sequence& seq, int budget) const;
  void schedule_running(bool decodes);
  bool schedule_running_seq(Sequence& seq, int num_decodes_left);
  int usable_drafts(const Sequence& seq) const;
  int draft_room(const Sequence& seq) const;
  void apply_spec_output(Sequence& seq, const ScheduledSeq& s, size_t i, const ModelRunnerOutput& output,
                         std::vector<NewToken>& new_tokens);
  void schedule_swapped();
  void schedule_waiting();
  bool admit_waiting_seq(Sequence& seq);
  void add_scheduled(Sequence& seq, int num_new_tokens, int num_spec = 0);
  void unschedule(Sequence& seq);
  Sequence* pick_victim() const;
  void preempt(Sequence& victim);
  void fork(Sequence& parent);
  void compact_running();
  void collect_prompt_logprobs(Sequence& seq, int first_pos, const std::vector<TokenLogprobs>& lps);
  // Adds a runner's pooled piece of a pooling request (ModelRunnerOutput::pooled).
  static void collect_pooled(Request& req, const std::vector<float>& piece);

  SchedulerConfig config_;
  kv::KVCacheManager& kv_;
  int64_t next_seq_id_ = 1;

  std::vector<Sequence*> running_;  // admission order; may hold non-running entries until compaction
  int num_running_ = 0;
  std::set<Sequence*, SeqOrder> waiting_;
  std::set<Sequence*, SeqOrder> swapped_;

  // The batch being scheduled; it joins in_flight_ when schedule() returns it with work.
  SchedulerOutput out_;
  std::vector<Sequence*> scheduled_;  // parallel to out_.seqs
  std::deque<Batch> in_flight_;       // oldest first (a deque: references stay valid)
  std::span<Sequence* const> last_scheduled_;
  int budget_ = 0;
  int seq_cap_ = 0;
  bool preempted_this_step_ = false;
  uint64_t num_preemptions_ = 0;
  SpecDecodeCounters spec_;
};

// The effective seed of sample `index` of a request whose base seed is `base_seed` (the request's
// seed when given, so the same seed reproduces the same text in any batch).
uint64_t sample_seed(uint64_t base_seed, int sample_index);
uint64_t splitmix64(uint64_t x);

}  // namespace pagellm::engine
