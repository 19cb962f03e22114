#include "spec/draft_proposer.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "common/error.h"
#include "engine/sampler.h"
#include "runner/model_loader.h"
#include "spec/rejection_sampler.h"

namespace pagellm::spec {

namespace {

[[noreturn]] void bad_draft(const std::string& message) {
  invalid_argument("--speculative-config: draft model " + message);
}

// The draft must read and write the same token ids as the target.
void check_same_vocabulary(const std::filesystem::path& dir, const runner::ModelRunner& target,
                           const tok::Tokenizer& target_tok) {
  if (!std::filesystem::exists(dir / "config.json"))
    bad_draft("'" + dir.string() + "' has no config.json");
  const io::ModelConfig dc = io::load_model_config(dir);
  if (dc.vocab_size != target.config().vocab_size) {
    bad_draft("'" + dir.string() + "' has vocab_size " + std::to_string(dc.vocab_size) +
              " but the target has " + std::to_string(target.config().vocab_size));
  }
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    return;  // the target's tokenizer serves both
  const auto draft_tok = tok::Tokenizer::from_dir(dir);
  if (draft_tok->vocab_size() != target_tok.vocab_size()) {
    bad_draft("'" + dir.string() + "' has a tokenizer of " +
              std::to_string(draft_tok->vocab_size()) + " tokens but the target's has " +
              std::to_string(target_tok.vocab_size()));
  }
  for (int32_t id = 0; id < target_tok.vocab_size(); ++id) {
    const std::optional<std::string> ours = draft_tok->id_to_token(id);
    const std::optional<std::string> theirs = target_tok.id_to_token(id);
    if (ours != theirs) {
      // Built piece by piece: GCC 12 warns (-Wrestrict, falsely) on a long operator+ chain here.
      std::string message = "'";
      message += dir.string();
      message += "' has a different tokenizer than the target (token id ";
      message += std::to_string(id);
      message += " is '" + ours.value_or("") + "' vs '" + theirs.value_or("") + "')";
      bad_draft(message);
    }
  }
}

}  // namespace

DraftModelProposer::DraftModelProposer(std::unique_ptr<runner::ModelRunner> draft,
                                       int num_speculative_tokens, int max_batch_tokens)
    : draft_(std::move(draft)),
      k_(num_speculative_tokens),
      max_batch_tokens_(max_batch_tokens > 0 ? max_batch_tokens : std::numeric_limits<int>::max()),
      vocab_(static_cast<int>(draft_->config().vocab_size)),
      max_positions_(
          draft_->config().max_position_embeddings > 0
              ? static_cast<int>(std::min<int64_t>(draft_->config().max_position_embeddings,
                                                   std::numeric_limits<int>::max()))
              : std::numeric_limits<int>::max()),
      kv_(kv::KVCacheConfig{draft_->num_kv_blocks(), draft_->block_size(), false, 0}) {}

void DraftModelProposer::release(int64_t seq_id) {
  states_.erase(seq_id);
  kv_.free(seq_id);
}

bool DraftModelProposer::reserve(int64_t seq_id, std::span<const int32_t> tokens, int num_computed,
                                 int num_tokens) {
  // A sequence longer than the whole pool would only evict everyone else, every step.
  if (kv_.blocks_for(num_tokens) > kv_.num_blocks()) return false;
  const kv::SeqRef ref{seq_id, tokens, 0};
  kv::BlockPairs copies;  // stays empty: the draft's blocks are never shared
  for (;;) {
    if (kv_.allocate_slots(ref, num_computed, num_tokens - num_computed, nullptr, copies))
      return true;
    int64_t victim = -1;
    uint64_t oldest = clock_;
    for (const auto& [id, st] : states_) {
      if (st.last_used < oldest) oldest = st.last_used, victim = id;
    }
    if (victim < 0) return false;
    release(victim);
  }
}

void DraftModelProposer::propose(std::span<const SpecCandidate> candidates) {
  ++clock_;
  std::vector<Active> active;
  for (const SpecCandidate& c : candidates) {
    engine::Sequence& seq = *c.seq;
    const int len = clear_drafts(seq);
    // The last draft step feeds position len + n - 2.
    const int n = std::min({k_, c.max_drafts, max_positions_ - len + 1});
    if (n <= 0 || len < 1) continue;
    State& st = states_[seq.seq_id];
    st.last_used = clock_;
    // Draft KV stays valid for the leading tokens that are still the sequence's; the last token is
    // always fed again because its logits give the first draft.
    size_t keep = 0;
    const size_t max_keep = static_cast<size_t>(len - 1);
    while (keep < st.fed.size() && keep < max_keep && st.fed[keep] == seq.token_ids[keep]) ++keep;
    if (!reserve(seq.seq_id, seq.token_ids, static_cast<int>(keep), len + n - 1)) {
      release(seq.seq_id);
      continue;
    }
    st.fed.resize(keep);
    active.push_back({&seq, &st, n, static_cast<int>(keep), -1, {}});
  }
  if (!propose_greedy_chain(active))
    for (int step = 0; step < k_; ++step) draft_step(active, step);
}

bool DraftModelProposer::propose_greedy_chain(std::vector<Active>& active) {
  engine::SchedulerOutput batch;
  std::vector<int> steps;
  for (Active& a : active) {
    if (!a.seq->request->params.greedy()) return false;
    const std::span<const int32_t> tokens(a.seq->token_ids);
    // A round feeds 1 new token after a rejection, 2 after all drafts passed: always 2 (the first
    // one's KV rewritten as it was) gives every round the same shape, a CUDA graph's.
    const int begin = std::min(a.begin, std::max(0, static_cast<int>(tokens.size()) - 2));
    engine::ScheduledSeq s = draft_context(a, 0);
    s.token_ids = tokens.subspan(static_cast<size_t>(begin));
    s.num_computed_tokens = begin;
    s.block_tables[0] = kv_.block_table(s.seq_id);
    s.needs_sample = true;
    batch.num_scheduled_tokens += static_cast<int32_t>(s.token_ids.size());
    batch.seqs.push_back(s);
    steps.push_back(a.num_drafts);
  }
  // A draft prefill longer than one step goes in pieces (draft_step).
  if (batch.seqs.empty() || batch.num_scheduled_tokens > max_batch_tokens_) return false;
  const std::vector<std::vector<int32_t>> answers = draft_->execute_greedy_chain(batch, steps);
  for (size_t i = 0; i < active.size(); ++i) {
    Active& a = active[i];
    const std::vector<int32_t>& drafts = answers.at(i);
    a.seq->spec_token_ids.assign(drafts.begin(), drafts.end());
    // The draft now holds KV for the tokens and every draft but the last.
    a.state->fed.assign(a.seq->token_ids.begin(), a.seq->token_ids.end());
    a.state->fed.insert(a.state->fed.end(), drafts.begin(), drafts.end() - 1);
  }
  return true;
}

engine::ScheduledSeq DraftModelProposer::draft_context(const Active& a, int step) {
  return draft_sampling_context(*a.seq, step, a.output);
}

void DraftModelProposer::draft_step(std::vector<Active>& active, int step) {
  // All greedy: the draft's runner picks the tokens itself (on a GPU, its sampler: no logits leave
  // it); otherwise the logits come back and choose() samples, keeping q for verification.
  bool greedy = true;
  for (const Active& a : active)
    if (step < a.num_drafts) greedy = greedy && a.seq->request->params.greedy();
  std::vector<size_t> index;  // the answers' seqs, by index into active
  std::vector<Answer> answers;
  if (step == 0) {
    answers = feed_new_tokens(active, index, greedy);
  } else {
    engine::SchedulerOutput batch;
    for (size_t i = 0; i < active.size(); ++i) {
      Active& a = active[i];
      if (step >= a.num_drafts) continue;
      engine::ScheduledSeq s = draft_context(a, step);
      s.token_ids = std::span<const int32_t>(&a.last, 1);
      s.num_computed_tokens = a.seq->num_tokens() - 1 + step;
      s.block_tables[0] = kv_.block_table(s.seq_id);
      s.needs_sample = true;
      batch.num_scheduled_tokens += 1;
      batch.seqs.push_back(s);
      index.push_back(i);
    }
    if (batch.seqs.empty()) return;
    answers = run(batch, greedy);
  }
  for (size_t j = 0; j < index.size(); ++j) {
    Active& a = active[index[j]];
    const int32_t token = greedy ? answers[j].token : choose(answers[j].logits, a, step);
    if (step == 0) {
      a.state->fed.assign(a.seq->token_ids.begin(), a.seq->token_ids.end());
    } else {
      a.state->fed.push_back(a.last);
    }
    a.seq->spec_token_ids.push_back(token);
    a.last = token;
  }
}

std::vector<DraftModelProposer::Answer> DraftModelProposer::run(const engine::SchedulerOutput& batch,
                                                                bool greedy) {
  std::vector<Answer> out(batch.seqs.size());
  if (greedy) {
    const engine::ModelRunnerOutput r = draft_->execute(batch);
    for (size_t j = 0; j < out.size(); ++j) out[j].token = r.sampled_token_ids.at(j);
  } else {
    std::vector<std::vector<float>> logits = draft_->execute_logits(batch);
    for (size_t j = 0; j < out.size(); ++j) out[j].logits = std::move(logits.at(j));
  }
  return out;
}

std::vector<DraftModelProposer::Answer> DraftModelProposer::feed_new_tokens(
    std::vector<Active>& active, std::vector<size_t>& index, bool greedy) {
  std::vector<Answer> out;  // [index.size()]
  engine::SchedulerOutput batch;
  std::vector<size_t> owner;  // per batch seq: its entry in out
  auto flush = [&] {
    if (batch.seqs.empty()) return;
    std::vector<Answer> answers = run(batch, greedy);
    for (size_t j = 0; j < batch.seqs.size(); ++j)
      if (batch.seqs[j].needs_sample) out[owner[j]] = std::move(answers[j]);
    batch = {};
    owner.clear();
  };
  // A seq's tokens go in pieces that fill each batch to max_batch_tokens_; only the piece with its
  // last token samples. A batch holds at most one piece of each seq.
  for (size_t i = 0; i < active.size(); ++i) {
    Active& a = active[i];
    if (a.num_drafts <= 0) continue;
    index.push_back(i);
    out.emplace_back();
    const std::span<const int32_t> tokens(a.seq->token_ids);
    for (size_t pos = static_cast<size_t>(a.begin); pos < tokens.size();) {
      if (batch.num_scheduled_tokens >= max_batch_tokens_) flush();
      const size_t n = std::min(tokens.size() - pos,
                                static_cast<size_t>(max_batch_tokens_ - batch.num_scheduled_tokens));
      engine::ScheduledSeq s = draft_context(a, 0);
      s.token_ids = tokens.subspan(pos, n);
      s.num_computed_tokens = static_cast<int32_t>(pos);
      s.block_tables[0] = kv_.block_table(s.seq_id);
      s.needs_sample = pos + n == tokens.size();
      batch.num_scheduled_tokens += static_cast<int32_t>(n);
      batch.seqs.push_back(s);
      owner.push_back(out.size() - 1);
      pos += n;
    }
  }
  flush();
  return out;
}

int32_t DraftModelProposer::choose(std::span<float> logits, Active& a, int step) {
  if (logits.size() != static_cast<size_t>(vocab_)) {
    throw_error(ErrorKind::kInternal,
                "draft model: logits row of " + std::to_string(logits.size()) + " entries");
  }
  return draw_sampled_draft(logits, *a.seq, step, a.output, probs_);
}

std::unique_ptr<Proposer> load_draft_proposer(const EngineArgs& args,
                                              const runner::ModelRunner& target,
                                              const tok::Tokenizer& tokenizer) {
  const SpeculativeConfig& sc = args.speculative;
  check_same_vocabulary(sc.model, target, tokenizer);
  EngineArgs da = args;
  da.model = sc.model;
  da.tokenizer.clear();
  da.model_id.clear();
  da.revision.clear();
  da.load_format = "auto";
  da.quantization.clear();
  da.kv_cache_dtype = "auto";
  da.calculate_kv_scales = false;
  da.device = args.device;  // on a GPU: the first of the target's (it left room for the draft)
  da.tensor_parallel_size = da.pipeline_parallel_size = da.data_parallel_size = 1;
  da.data_parallel_rank = 0;
  da.nnodes = 1;
  da.node_rank = 0;
  da.swap_space_gib = 0.0;
  da.num_kv_blocks = target.num_kv_blocks();  // as many tokens as the target's pool
  da.block_size = target.block_size();
  da.speculative = SpeculativeConfig{};
  da.disable_hybrid_kv_cache_manager = true;  // its pool holds as many tokens as the target's
  runner::LoadedModel m = runner::load_model(da);
  return std::make_unique<DraftModelProposer>(std::move(m.runner), sc.num_speculative_tokens,
                                              da.max_num_batched_tokens);
}

}  // namespace pagellm::spec
