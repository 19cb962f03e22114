#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace pagellm::engine {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t sample_seed(uint64_t base_seed, int sample_index) {
  return sample_index == 0 ? base_seed : splitmix64(base_seed ^ static_cast<uint64_t>(sample_index));
}

bool Scheduler::SeqOrder::operator()(const Sequence* a, const Sequence* b) const {
  if (priority && a->request->priority != b->request->priority) {
    return a->request->priority < b->request->priority;
  }
  if (a->request->arrival_index != b->request->arrival_index) {
    return a->request->arrival_index < b->request->arrival_index;
  }
  return a->sample_index < b->sample_index;
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::KVCacheManager& kv)
    : config_(config),
      kv_(kv),
      waiting_(SeqOrder{config.policy == SchedulingPolicy::kPriority}),
      swapped_(SeqOrder{config.policy == SchedulingPolicy::kPriority}) {}

void Scheduler::check_fits(const Request& req) const {
  const int num_prompt = req.num_prompt_tokens();
  const int max_tokens = req.params.max_tokens;
  if (num_prompt < 1) invalid_argument("prompt: empty after tokenization");
  if (static_cast<int64_t>(num_prompt) + max_tokens > config_.max_model_len) {
    invalid_argument("prompt (" + std::to_string(num_prompt) + " tokens) + max_tokens (" +
                     std::to_string(max_tokens) + ") exceeds max_model_len (" +
                     std::to_string(config_.max_model_len) + ")");
  }
  // The last sampled token is never fed back, so a sequence holds at most prompt + max_tokens - 1.
  const int num_blocks =
      kv_.peak_blocks_for(num_prompt + max_tokens - 1, config_.max_num_batched_tokens);
  if (num_blocks > kv_.num_blocks()) {
    throw_error(ErrorKind::kResourceExhausted,
                "request needs " + std::to_string(num_blocks) + " KV blocks (prompt " +
                    std::to_string(num_prompt) + " + max_tokens " + std::to_string(max_tokens) +
                    ") but the KV cache has only " + std::to_string(kv_.num_blocks()));
  }
  if (req.num_samples() > config_.max_num_seqs) {
    invalid_argument("best_of/n (" + std::to_string(req.num_samples()) + ") exceeds max_num_seqs (" +
                     std::to_string(config_.max_num_seqs) + ")");
  }
}

void Scheduler::add_request(Request& req) {
  auto seq = std::make_unique<Sequence>();
  seq->seq_id = next_seq_id_++;
  seq->request = &req;
  seq->token_ids = req.prompt_token_ids;
  seq->seed = sample_seed(req.base_seed, 0);
  seq->status = SeqStatus::kWaiting;
  waiting_.insert(seq.get());
  req.seqs.push_back(std::move(seq));
}

kv::SeqRef Scheduler::seq_ref(const Sequence& seq) const {
  return {seq.seq_id, seq.token_ids, seq.request->cache_salt_hash};
}

int Scheduler::tokens_to_schedule(const Sequence& seq, int budget) const {
  int n = seq.num_tokens() - seq.num_computed_tokens;
  // An unforked multi-sample request stops one token short of its prompt: each sample computes the
  // last prompt token itself and samples its own first token.
  if (seq.request->needs_fork()) n = std::min(n, seq.num_prompt_tokens() - 1 - seq.num_computed_tokens);
  if (!config_.enable_chunked_prefill && n > budget) return 0;
  if (config_.enable_chunked_prefill && config_.long_prefill_token_threshold > 0)
    n = std::min(n, config_.long_prefill_token_threshold);
  return std::max(0, std::min(n, budget));
}

const SchedulerOutput& Scheduler::schedule() {
  if (num_batches_in_flight() >= std::max(config_.max_batches_in_flight, 1))
    throw_error(ErrorKind::kInternal, "scheduler: " + std::to_string(num_batches_in_flight()) +
                                          " batches in flight already (the limit)");
  compact_running();
  out_.seqs.clear();
  out_.blocks_to_copy.clear();
  out_.blocks_to_swap_out.clear();
  out_.blocks_to_swap_in.clear();
  scheduled_.clear();
  budget_ = config_.max_num_batched_tokens;
  seq_cap_ = batch_seq_cap();
  preempted_this_step_ = false;

  schedule_running(/*decodes=*/true);
  schedule_running(/*decodes=*/false);
  // A step that had to preempt is short of blocks: admitting more would only thrash.
  if (!preempted_this_step_) {
    schedule_swapped();
    // Swapped-out sequences come back before anything new is admitted, or new prompts could keep
    // taking the blocks they wait for.
    if (swapped_.empty()) schedule_waiting();
  }
  compact_running();
  out_.num_scheduled_tokens = config_.max_num_batched_tokens - budget_;
  if (out_.seqs.empty() && out_.blocks_to_swap_out.empty() && out_.blocks_to_swap_in.empty()) {
    last_scheduled_ = {};
    return out_;  // nothing for the runner: not in flight
  }
  for (Sequence* seq : scheduled_) seq->in_flight = true;
  in_flight_.push_back({std::move(out_), std::move(scheduled_), {}});
  out_ = {};
  scheduled_.clear();
  last_scheduled_ = in_flight_.back().seqs;
  return in_flight_.back().out;
}

int Scheduler::batch_seq_cap() const {
  const int num_batches = config_.max_batches_in_flight;
  if (num_batches <= 1) return config_.max_num_seqs;
  // Every sequence that could run, in flight or not, spread evenly over the batches: a batch that
  // took all the ready ones would leave the next stage-slot nearly empty for good.
  int num_runnable = 0;
  for (const Sequence* s : running_) num_runnable += s->status == SeqStatus::kRunning;
  const int num_queued = static_cast<int>(waiting_.size() + swapped_.size());
  num_runnable += std::min(num_queued, std::max(0, config_.max_num_seqs - num_running_));
  return std::max(1, (num_runnable + num_batches - 1) / num_batches);
}

void Scheduler::schedule_running(bool decodes) {
  // Drafts take only the budget that the decodes still to come leave: each of them needs one token.
  int num_decodes_left = 0;
  if (decodes) {
    for (const Sequence* s : running_)
      num_decodes_left += s->status == SeqStatus::kRunning && s->num_scheduled_tokens == 0 &&
                          s->num_tokens() - s->num_computed_tokens == 1;
  }
  // Indexing (not iterators): preemption changes statuses but never the vector during this loop.
  for (size_t i = 0; i < running_.size() && !batch_full(); ++i) {
    Sequence& seq = *running_[i];
    if (seq.status != SeqStatus::kRunning || seq.num_scheduled_tokens > 0) continue;
    const bool is_decode = seq.num_tokens() - seq.num_computed_tokens == 1;
    if (is_decode != decodes) continue;
    schedule_running_seq(seq, decodes ? num_decodes_left-- : 0);
  }
}

bool Scheduler::schedule_running_seq(Sequence& seq, int num_decodes_left) {
  const int n = tokens_to_schedule(seq, budget_);
  if (n == 0) return false;
  int num_spec = n == 1 && num_decodes_left > 0 ? std::min(usable_drafts(seq), budget_ - num_decodes_left) : 0;
  num_spec = std::max(num_spec, 0);
  while (!kv_.allocate_slots(seq_ref(seq), seq.num_computed_tokens, n + num_spec, nullptr, out_.blocks_to_copy)) {
    // Short of blocks: drop the drafts before preempting anyone.
    if (num_spec > 0) {
      num_spec = 0;
      continue;
    }
    Sequence* victim = pick_victim();
    preempt(*victim);
    if (victim == &seq) return false;
  }
  add_scheduled(seq, n + num_spec, num_spec);
  return true;
}

int Scheduler::usable_drafts(const Sequence& seq) const {
  if (seq.spec_token_ids.empty() || seq.spec_base_len != seq.num_tokens()) return 0;
  const Request& req = *seq.request;
  if (req.needs_fork() || req.pooling != PoolingType::kNone) return 0;
  return std::max(0, std::min(static_cast<int>(seq.spec_token_ids.size()), draft_room(seq)));
}

int Scheduler::draft_room(const Sequence& seq) const {
  // A step yields at most num_spec + 1 tokens; none may pass max_tokens or max_model_len.
  return std::min(seq.request->params.max_tokens - seq.num_output_tokens() - 1,
                  config_.max_model_len - seq.num_tokens() - 1);
}

void Scheduler::spec_candidates(std::vector<std::pair<Sequence*, int>>& out) const {
  out.clear();
  for (Sequence* seq : running_) {
    if (seq->status != SeqStatus::kRunning || seq->in_flight ||
        seq->num_tokens() - seq->num_computed_tokens != 1)
      continue;
    const Request& req = *seq->request;
    if (req.needs_fork() || req.pooling != PoolingType::kNone) continue;
    if (req.params.prompt_logprobs && static_cast<int>(req.prompt_logprobs.size()) < req.num_prompt_tokens()) continue;
    if (const int room = draft_room(*seq); room > 0) out.emplace_back(seq, room);
  }
}

void Scheduler::schedule_swapped() {
  while (!swapped_.empty() && !batch_full() && num_running_ < config_.max_num_seqs) {
    Sequence& seq = **swapped_.begin();
    if (!kv_.can_swap_in(seq.seq_id)) break;
    swapped_.erase(swapped_.begin());
    kv_.swap_in(seq.seq_id, seq.num_computed_tokens, out_.blocks_to_swap_in);
    seq.status = SeqStatus::kRunning;
    running_.push_back(&seq);
    ++num_running_;
    const int n = tokens_to_schedule(seq, budget_);
    if (n > 0 && kv_.allocate_slots(seq_ref(seq), seq.num_computed_tokens, n, nullptr,
                                    out_.blocks_to_copy)) {
      add_scheduled(seq, n);
    }
  }
}

void Scheduler::schedule_waiting() {
  while (!waiting_.empty() && !batch_full()) {
    if (!admit_waiting_seq(**waiting_.begin())) break;
  }
}

bool Scheduler::admit_waiting_seq(Sequence& seq) {
  Request& req = *seq.request;
  const int num_new_seqs = req.needs_fork() ? req.num_samples() : 1;
  if (num_running_ + num_new_seqs > config_.max_num_seqs) return false;
  // Prompt logprobs need the logits of every prompt position, and mean pooling the hidden state of
  // every prompt token, so such a request skips the cache.
  const bool wants_prompt_logprobs =
      (req.params.prompt_logprobs.has_value() &&
       static_cast<int>(req.prompt_logprobs.size()) < req.num_prompt_tokens()) ||
      req.pooling == PoolingType::kMean;
  kv::ComputedBlocks hit;
  if (!wants_prompt_logprobs) hit = kv_.get_computed_blocks(seq_ref(seq));
  seq.num_computed_tokens = hit.num_computed_tokens();
  const int n = tokens_to_schedule(seq, budget_);
  const bool fork_now = req.needs_fork() && seq.num_computed_tokens == seq.num_prompt_tokens() - 1;
  if ((n == 0 && !fork_now) ||
      !kv_.allocate_slots(seq_ref(seq), seq.num_computed_tokens, n, &hit, out_.blocks_to_copy)) {
    seq.num_computed_tokens = 0;
    kv_.free(seq.seq_id);  // drops the hashes computed by the lookup
    return false;
  }
  waiting_.erase(waiting_.begin());
  seq.status = SeqStatus::kRunning;
  running_.push_back(&seq);
  ++num_running_;
  if (!req.admitted) {
    req.admitted = true;
    req.num_cached_tokens = hit.num_computed_tokens();
  }
  if (n > 0) {
    add_scheduled(seq, n);
  } else {
    // The prompt is ready to fork (a one-token prompt, or a hit covering all but the last token).
    fork(seq);
    for (const auto& sample : req.seqs) {
      const int m = tokens_to_schedule(*sample, budget_);
      if (m > 0 && kv_.allocate_slots(seq_ref(*sample), sample->num_computed_tokens, m, nullptr,
                                      out_.blocks_to_copy)) {
        add_scheduled(*sample, m);
      }
    }
  }
  return true;
}

void Scheduler::add_scheduled(Sequence& seq, int num_new_tokens, int num_spec) {
  const Request& req = *seq.request;
  ScheduledSeq s;
  s.seq_id = seq.seq_id;
  s.num_computed_tokens = seq.num_computed_tokens;
  for (int g = 0; g < kv_.num_groups(); ++g)
    s.block_tables[static_cast<size_t>(g)] = kv_.block_table(seq.seq_id, g);
  if (num_spec > 0) {
    // The drafts are not the sequence's tokens yet: the row is the last token plus the drafts.
    seq.step_token_ids.assign(1, seq.token_ids.back());
    seq.step_token_ids.insert(seq.step_token_ids.end(), seq.spec_token_ids.begin(),
                              seq.spec_token_ids.begin() + num_spec);
    s.token_ids = seq.step_token_ids;
    s.num_spec_tokens = num_spec;
    if (!seq.spec_draft_probs.empty()) {
      const size_t per_draft = seq.spec_draft_probs.size() / seq.spec_token_ids.size();
      s.draft_probs = std::span<const float>(seq.spec_draft_probs).first(static_cast<size_t>(num_spec) * per_draft);
    }
    s.needs_sample = true;
  } else {
    s.token_ids = std::span<const int32_t>(seq.token_ids)
                      .subspan(static_cast<size_t>(seq.num_computed_tokens), static_cast<size_t>(num_new_tokens));
    s.needs_sample = seq.num_computed_tokens + num_new_tokens == seq.num_tokens();
  }
  s.params = &req.params;
  s.seed = seq.seed;
  s.prompt_token_ids = seq.prompt_ids();
  s.output_token_ids = seq.output_ids();
  s.banned_token_ids = seq.banned_token_ids;
  if (s.needs_sample && !seq.token_mask.empty()) s.allowed_token_mask = seq.token_mask;
  s.pooling = req.pooling;
  s.return_hidden = req.spec_features;
  if (req.params.prompt_logprobs && static_cast<int>(req.prompt_logprobs.size()) < req.num_prompt_tokens()) {
    // The runner contract asks for > 0; a request for 0 alternatives gets 1, trimmed on collection.
    s.prompt_logprobs = std::max(1, *req.params.prompt_logprobs);
  }
  seq.num_scheduled_tokens = num_new_tokens;
  budget_ -= num_new_tokens;
  out_.seqs.push_back(s);
  scheduled_.push_back(&seq);
}

void Scheduler::unschedule(Sequence& seq) {
  auto it = std::find(scheduled_.begin(), scheduled_.end(), &seq);
  if (it == scheduled_.end()) return;
  const auto index = it - scheduled_.begin();
  scheduled_.erase(it);
  out_.seqs.erase(out_.seqs.begin() + index);
  budget_ += seq.num_scheduled_tokens;
  seq.num_scheduled_tokens = 0;
  // A copy-on-write into one of its blocks must not run: the block is about to be freed and may be
  // handed to someone else in this very step.
  for (int g = 0; g < kv_.num_groups(); ++g) {
    const auto table = kv_.block_table(seq.seq_id, g);
    std::erase_if(out_.blocks_to_copy, [&](const std::pair<int32_t, int32_t>& p) {
      return std::find(table.begin(), table.end(), p.second) != table.end();
    });
  }
}

Sequence* Scheduler::pick_victim() const {
  Sequence* victim = nullptr;
  const SeqOrder order{config_.policy == SchedulingPolicy::kPriority};
  // A sequence in flight keeps its blocks: the runner is still writing them.
  for (Sequence* s : running_) {
    if (s->status == SeqStatus::kRunning && !s->in_flight && (victim == nullptr || order(victim, s)))
      victim = s;
  }
  if (victim == nullptr) throw_error(ErrorKind::kInternal, "scheduler: no sequence to preempt");
  return victim;
}

void Scheduler::preempt(Sequence& victim) {
  // Swapping reads the victim's blocks before this step's copies run, so a victim that already did a
  // copy-on-write this step is recomputed instead.
  const bool was_scheduled = victim.num_scheduled_tokens > 0;
  if (was_scheduled) unschedule(victim);
  preempted_this_step_ = true;
  ++num_preemptions_;
  --num_running_;
  if (!was_scheduled && kv_.num_swap_blocks() > 0 && kv_.can_swap_out(victim.seq_id)) {
    kv_.swap_out(victim.seq_id, out_.blocks_to_swap_out);
    victim.status = SeqStatus::kSwapped;
    swapped_.insert(&victim);
    return;
  }
  kv_.free(victim.seq_id);
  victim.num_computed_tokens = 0;
  victim.request->pooled_sum.clear();  // mean pooling starts over with the recomputed prompt
  victim.status = SeqStatus::kWaiting;
  waiting_.insert(&victim);
}

void Scheduler::fork(Sequence& parent) {
  Request& req = *parent.request;
  req.forked = true;
  for (int i = 1; i < req.num_samples(); ++i) {
    auto child = std::make_unique<Sequence>();
    child->seq_id = next_seq_id_++;
    child->request = &req;
    child->sample_index = i;
    child->status = SeqStatus::kRunning;
    child->token_ids = parent.token_ids;
    child->num_computed_tokens = parent.num_computed_tokens;
    child->seed = sample_seed(req.base_seed, i);
    child->banned_token_ids = parent.banned_token_ids;
    if (parent.matcher) child->matcher = std::make_unique<structured::Matcher>(*parent.matcher);
    child->token_mask.resize(parent.token_mask.size());
    kv_.fork(parent.seq_id, child->seq_id);
    running_.push_back(child.get());
    ++num_running_;
    req.seqs.push_back(std::move(child));
  }
}

void Scheduler::compact_running() {
  std::erase_if(running_, [](const Sequence* s) { return s->status != SeqStatus::kRunning; });
}

void Scheduler::collect_prompt_logprobs(Sequence& seq, int first_pos,
                                        const std::vector<TokenLogprobs>& lps) {
  Request& req = *seq.request;
  const size_t top_n = static_cast<size_t>(req.params.prompt_logprobs.value_or(0));
  for (size_t k = 0; k < lps.size(); ++k) {
    // Entry for position p is the logprob of prompt token p + 1; positions recomputed after a
    // preemption are already recorded.
    const size_t target = static_cast<size_t>(first_pos) + k + 1;
    if (target != req.prompt_logprobs.size() || static_cast<int>(target) >= req.num_prompt_tokens()) continue;
    TokenLogprobs lp = lps[k];
    if (lp.top.size() > top_n) lp.top.resize(top_n);
    req.prompt_logprobs.emplace_back(std::move(lp));
  }
}

void Scheduler::collect_pooled(Request& req, const std::vector<float>& piece) {
  if (piece.empty()) return;
  if (req.pooled_sum.empty()) req.pooled_sum.assign(piece.size(), 0.0);
  if (req.pooled_sum.size() != piece.size()) return;  // a runner contract violation: ignored
  for (size_t d = 0; d < piece.size(); ++d) req.pooled_sum[d] += piece[d];
}

void Scheduler::apply_spec_output(Sequence& seq, const ScheduledSeq& s, size_t i, const ModelRunnerOutput& output,
                                  std::vector<NewToken>& new_tokens) {
  const size_t k = static_cast<size_t>(s.num_spec_tokens);
  const std::vector<int32_t>* tokens = i < output.spec_token_ids.size() ? &output.spec_token_ids[i] : nullptr;
  if (tokens == nullptr || tokens->empty() || tokens->size() > k + 1) {
    throw_error(ErrorKind::kInternal, "scheduler: the runner verified no tokens for speculating seq " +
                                          std::to_string(seq.seq_id));
  }
  const size_t num_accepted = tokens->size() - 1;
  // Computed now: the last verified token and the accepted drafts. The rejected drafts' KV slots
  // stay allocated and are simply overwritten by later steps.
  seq.num_computed_tokens += 1 + static_cast<int>(num_accepted);
  seq.num_scheduled_tokens = 0;
  const std::vector<TokenLogprobs>* lps = i < output.spec_logprobs.size() ? &output.spec_logprobs[i] : nullptr;
  for (size_t j = 0; j < tokens->size(); ++j) {
    seq.token_ids.push_back((*tokens)[j]);
    NewToken nt{&seq, (*tokens)[j], std::nullopt, false, seq.num_tokens()};
    if (lps != nullptr && j < lps->size()) nt.logprobs = (*lps)[j];
    new_tokens.push_back(std::move(nt));
  }
  // Only verified tokens reach the prefix cache: every computed position now holds one.
  kv_.cache_computed_blocks(seq_ref(seq), seq.num_computed_tokens);
  constexpr double kDecay = 0.75;  // adaptive k: the last few rounds weigh most
  seq.spec_hits = kDecay * seq.spec_hits + static_cast<double>(num_accepted);
  seq.spec_trials =
      kDecay * seq.spec_trials + static_cast<double>(num_accepted + (num_accepted < k ? 1 : 0));
  ++spec_.num_drafts;
  spec_.num_draft_tokens += k;
  spec_.num_accepted_tokens += num_accepted;
  if (spec_.accepted_per_pos.size() < k) spec_.accepted_per_pos.resize(k, 0);
  for (size_t j = 0; j < num_accepted; ++j) ++spec_.accepted_per_pos[j];
}

void Scheduler::update_from_output(const ModelRunnerOutput& output, std::vector<NewToken>& new_tokens) {
  if (in_flight_.empty()) throw_error(ErrorKind::kInternal, "scheduler: an output with no batch in flight");
  const Batch& batch = in_flight_.front();
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    if (batch.seqs[i] == nullptr) continue;  // finished while in flight
    Sequence& seq = *batch.seqs[i];
    const ScheduledSeq& s = batch.out.seqs[i];
    seq.in_flight = false;
    seq.spec_token_ids.clear();
    seq.spec_draft_probs.clear();
    if (s.num_spec_tokens > 0) {
      apply_spec_output(seq, s, i, output, new_tokens);
      continue;
    }
    const int first_pos = seq.num_computed_tokens;
    seq.num_computed_tokens += seq.num_scheduled_tokens;
    seq.num_scheduled_tokens = 0;
    kv_.cache_computed_blocks(seq_ref(seq), seq.num_computed_tokens);
    if (s.prompt_logprobs > 0 && i < output.prompt_logprobs.size()) {
      collect_prompt_logprobs(seq, first_pos, output.prompt_logprobs[i]);
    }
    if (s.pooling != PoolingType::kNone) {
      collect_pooled(*seq.request, i < output.pooled.size() ? output.pooled[i] : std::vector<float>{});
      if (s.needs_sample) new_tokens.push_back(NewToken{&seq, -1, std::nullopt, true, seq.num_tokens()});
      continue;
    }
    const int32_t token = i < output.sampled_token_ids.size() ? output.sampled_token_ids[i] : -1;
    if (s.needs_sample && token >= 0) {
      seq.token_ids.push_back(token);
      NewToken nt{&seq, token, std::nullopt, false, seq.num_tokens()};
      if (i < output.sampled_logprobs.size()) nt.logprobs = output.sampled_logprobs[i];
      new_tokens.push_back(std::move(nt));
    }
    if (seq.request->needs_fork() && seq.num_computed_tokens == seq.num_prompt_tokens() - 1) fork(seq);
  }
  for (int64_t seq_id : batch.deferred_frees) kv_.free(seq_id);
  in_flight_.pop_front();  // its spans point into token vectors that just grew
  if (in_flight_.empty()) last_scheduled_ = {};
}

bool Scheduler::forget_in_flight(Sequence& seq) {
  if (!seq.in_flight) return false;
  for (Batch& batch : in_flight_) {
    const auto it = std::find(batch.seqs.begin(), batch.seqs.end(), &seq);
    if (it == batch.seqs.end()) continue;
    *it = nullptr;
    batch.deferred_frees.push_back(seq.seq_id);
    seq.in_flight = false;
    seq.num_scheduled_tokens = 0;
    return true;
  }
  throw_error(ErrorKind::kInternal, "scheduler: seq " + std::to_string(seq.seq_id) +
                                        " is in flight in no batch");
}

void Scheduler::finish_seq(Sequence& seq, FinishReason reason) {
  if (seq.finished()) return;
  // In flight: the runner may still write its blocks, so they are freed when the batch returns.
  const bool deferred = forget_in_flight(seq);
  if (seq.num_scheduled_tokens > 0) unschedule(seq);
  switch (seq.status) {
    case SeqStatus::kRunning:
      // Removed now, not at the next compaction: the engine may destroy the request right after.
      std::erase(running_, &seq);
      --num_running_;
      break;
    case SeqStatus::kWaiting: waiting_.erase(&seq); break;
    case SeqStatus::kSwapped: swapped_.erase(&seq); break;
    case SeqStatus::kFinished: break;
  }
  if (!deferred) kv_.free(seq.seq_id);
  seq.status = SeqStatus::kFinished;
  seq.finish_reason = reason;
}

void Scheduler::abort_request(Request& req) {
  for (const auto& seq : req.seqs) finish_seq(*seq, FinishReason::kAbort);
  req.forked = true;  // an aborted request never forks
}

}  // namespace pagellm::engine
