#include "spec/eagle_proposer.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <string>

#include "common/error.h"
#include "io/eagle_config.h"
#include "io/safetensors.h"
#include "models/llama.h"
#include "runner/cpu_runner.h"
#include "runner/cuda_model_loader.h"

namespace pagellm::spec {

EagleProposer::EagleProposer(std::unique_ptr<runner::ModelRunner> head, int num_speculative_tokens,
                             int max_batch_tokens)
    : head_(std::move(head)),
      k_(num_speculative_tokens),
      max_batch_tokens_(max_batch_tokens > 0 ? max_batch_tokens : std::numeric_limits<int>::max()),
      vocab_(static_cast<int>(head_->config().vocab_size)),
      hidden_(static_cast<int>(head_->config().hidden_size)),
      max_positions_(
          head_->config().max_position_embeddings > 0
              ? static_cast<int>(std::min<int64_t>(head_->config().max_position_embeddings,
                                                   std::numeric_limits<int>::max()))
              : std::numeric_limits<int>::max()),
      max_held_(std::max<size_t>(1, kMaxHeldFeatureBytes / (sizeof(float) * size_t(hidden_)))),
      kv_(kv::KVCacheConfig{head_->num_kv_blocks(), head_->block_size(), false, 0}) {
  if (!head_->config().eagle)
    throw_error(ErrorKind::kInternal, "EAGLE proposer: the runner is not an EAGLE head");
}

void EagleProposer::release(int64_t seq_id) {
  states_.erase(seq_id);
  kv_.free(seq_id);
}

int EagleProposer::num_held_features(int64_t seq_id) const {
  const auto it = states_.find(seq_id);
  return it == states_.end() ? 0 : static_cast<int>(it->second.feats.size() / size_t(hidden_));
}

void EagleProposer::evict(int64_t seq_id, State& st) {
  kv_.free(seq_id);
  st.has_kv = false;
  st.valid = 0;
}

bool EagleProposer::reserve(int64_t seq_id, std::span<const int32_t> tokens, int num_computed,
                            int num_tokens) {
  if (kv_.blocks_for(num_tokens) > kv_.num_blocks()) return false;
  const kv::SeqRef ref{seq_id, tokens, 0};
  kv::BlockPairs copies;  // stays empty: the head's blocks are never shared
  for (;;) {
    if (kv_.allocate_slots(ref, num_computed, num_tokens - num_computed, nullptr, copies))
      return true;
    // The least recently used sequence outside this round that holds KV.
    State* victim = nullptr;
    int64_t victim_id = -1;
    for (auto& [id, st] : states_)
      if (st.has_kv && st.last_used < clock_ && (!victim || st.last_used < victim->last_used))
        victim = &st, victim_id = id;
    if (!victim) return false;
    evict(victim_id, *victim);
  }
}

void EagleProposer::observe(const engine::SchedulerOutput& batch,
                            const engine::ModelRunnerOutput& out) {
  if (out.hidden_states.empty()) return;
  const size_t dim = size_t(hidden_);
  if (out.hidden_states.size() != size_t(batch.num_scheduled_tokens) * dim)
    throw_error(ErrorKind::kInternal,
                "EAGLE: the target returned " + std::to_string(out.hidden_states.size()) +
                    " hidden values for " + std::to_string(batch.num_scheduled_tokens) + " tokens");
  const float* rows = out.hidden_states.data();
  for (const engine::ScheduledSeq& s : batch.seqs) {
    const size_t n = s.token_ids.size();
    const float* mine = rows;
    rows += n * dim;
    if (!s.return_hidden) continue;
    State& st = states_[s.seq_id];
    const int p0 = s.num_computed_tokens;
    const int held = static_cast<int>(st.feats.size() / dim);
    // Positions continue what is held, or restart it (a recomputation, or a gap: positions the
    // target took from its prefix cache).
    if (st.feats.empty() || p0 < st.feat_begin || p0 > st.feat_begin + held) {
      st.feat_begin = p0;
      st.feats.clear();
    } else {
      st.feats.resize(size_t(p0 - st.feat_begin) * dim);
    }
    st.feats.insert(st.feats.end(), mine, mine + n * dim);
    const size_t now = st.feats.size() / dim;
    if (now > max_held_) {
      const size_t drop = now - max_held_;
      st.feats.erase(st.feats.begin(), st.feats.begin() + ptrdiff_t(drop * dim));
      st.feat_begin += static_cast<int>(drop);
    }
  }
}

void EagleProposer::append_feature(const State& st, int p, std::vector<float>& out) const {
  const size_t dim = size_t(hidden_);
  const int held = static_cast<int>(st.feats.size() / dim);
  if (p >= st.feat_begin && p < st.feat_begin + held) {
    const float* f = st.feats.data() + size_t(p - st.feat_begin) * dim;
    out.insert(out.end(), f, f + dim);
  } else {
    out.insert(out.end(), dim, 0.0f);
  }
}

void EagleProposer::propose(std::span<const SpecCandidate> candidates) {
  ++clock_;
  std::vector<Active> active;
  for (const SpecCandidate& c : candidates) {
    engine::Sequence& seq = *c.seq;
    const int len = clear_drafts(seq);
    // Draft j (1-based) is read at head position len - 3 + j.
    const int n = std::min({k_, c.max_drafts, max_positions_ - len + 2});
    if (n <= 0 || len < 2) continue;
    State& st = states_[seq.seq_id];
    st.last_used = clock_;
    // Position len - 2 is always fed: its output gives the first draft.
    const int keep = std::min(st.has_kv ? st.valid : 0, len - 2);
    if (!reserve(seq.seq_id, seq.token_ids, keep, len + n - 2)) {
      evict(seq.seq_id, st);
      continue;
    }
    st.has_kv = true;
    st.valid = keep;
    active.push_back({&seq, &st, n, keep, -1, {}, {}});
  }
  if (active.empty()) return;
  if (!propose_greedy_chain(active)) {
    catch_up(active);
    for (int step = 1; step < k_; ++step) draft_step(active, step);
  }
  for (Active& a : active) {
    // The head's KV now holds the target's features up to position len - 2; the features before
    // len - 1 are spent.
    State& st = *a.state;
    st.valid = a.seq->num_tokens() - 1;
    const int drop = std::clamp(st.valid - st.feat_begin, 0,
                                static_cast<int>(st.feats.size() / size_t(hidden_)));
    st.feats.erase(st.feats.begin(), st.feats.begin() + ptrdiff_t(size_t(drop) * size_t(hidden_)));
    st.feat_begin += drop;
  }
}

bool EagleProposer::propose_greedy_chain(std::vector<Active>& active) {
  engine::SchedulerOutput batch;
  std::vector<float> features;
  std::vector<int> steps;
  for (const Active& a : active) {
    if (!a.seq->request->params.greedy()) return false;
    const std::span<const int32_t> tokens(a.seq->token_ids);
    const int last = static_cast<int>(tokens.size()) - 2;
    engine::ScheduledSeq s;
    s.seq_id = a.seq->seq_id;
    s.token_ids = tokens.subspan(size_t(a.begin) + 1, size_t(last + 1 - a.begin));
    s.num_computed_tokens = a.begin;
    s.block_tables[0] = kv_.block_table(s.seq_id);
    s.needs_sample = true;
    for (int p = a.begin; p <= last; ++p) append_feature(*a.state, p, features);
    batch.num_scheduled_tokens += static_cast<int32_t>(s.token_ids.size());
    batch.seqs.push_back(s);
    steps.push_back(a.num_drafts);
  }
  // A catch-up longer than one step goes in pieces (catch_up).
  if (batch.num_scheduled_tokens > max_batch_tokens_) return false;
  const std::vector<std::vector<int32_t>> answers =
      head_->execute_feature_chain(batch, features, steps);
  for (size_t i = 0; i < active.size(); ++i)
    active[i].seq->spec_token_ids.assign(answers.at(i).begin(), answers.at(i).end());
  return true;
}

void EagleProposer::catch_up(std::vector<Active>& active) {
  engine::SchedulerOutput batch;
  std::vector<float> features;
  std::vector<size_t> owner;  // per batch seq: its entry in active
  auto flush = [&] {
    if (batch.seqs.empty()) return;
    runner::ModelRunner::FeatureStep r = head_->execute_features(batch, features);
    for (size_t j = 0; j < batch.seqs.size(); ++j)
      if (batch.seqs[j].needs_sample) take_answer(active[owner[j]], 0, r.logits[j], r.hidden[j]);
    batch = {};
    features.clear();
    owner.clear();
  };
  // Head position p takes token p + 1: positions [begin, len - 2] take tokens [begin + 1, len).
  for (size_t i = 0; i < active.size(); ++i) {
    Active& a = active[i];
    const std::span<const int32_t> tokens(a.seq->token_ids);
    const int last = static_cast<int>(tokens.size()) - 2;
    for (int pos = a.begin; pos <= last;) {
      if (batch.num_scheduled_tokens >= max_batch_tokens_) flush();
      const int n = std::min(last + 1 - pos, max_batch_tokens_ - batch.num_scheduled_tokens);
      engine::ScheduledSeq s;
      s.seq_id = a.seq->seq_id;
      s.token_ids = tokens.subspan(size_t(pos) + 1, size_t(n));
      s.num_computed_tokens = pos;
      s.block_tables[0] = kv_.block_table(s.seq_id);
      s.needs_sample = pos + n == last + 1;
      for (int p = pos; p < pos + n; ++p) append_feature(*a.state, p, features);
      batch.num_scheduled_tokens += n;
      batch.seqs.push_back(s);
      owner.push_back(i);
      pos += n;
    }
  }
  flush();
}

void EagleProposer::draft_step(std::vector<Active>& active, int step) {
  engine::SchedulerOutput batch;
  std::vector<float> features;
  std::vector<size_t> owner;
  for (size_t i = 0; i < active.size(); ++i) {
    Active& a = active[i];
    if (step >= a.num_drafts) continue;
    engine::ScheduledSeq s;
    s.seq_id = a.seq->seq_id;
    s.token_ids = std::span<const int32_t>(&a.last, 1);
    s.num_computed_tokens = a.seq->num_tokens() - 2 + step;
    s.block_tables[0] = kv_.block_table(s.seq_id);
    s.needs_sample = true;
    features.insert(features.end(), a.feature.begin(), a.feature.end());
    batch.num_scheduled_tokens += 1;
    batch.seqs.push_back(s);
    owner.push_back(i);
  }
  if (batch.seqs.empty()) return;
  runner::ModelRunner::FeatureStep r = head_->execute_features(batch, features);
  for (size_t j = 0; j < owner.size(); ++j)
    take_answer(active[owner[j]], step, r.logits[j], r.hidden[j]);
}

void EagleProposer::take_answer(Active& a, int step, std::vector<float>& logits,
                                std::vector<float>& hidden) {
  if (logits.size() != size_t(vocab_) || hidden.size() != size_t(hidden_))
    throw_error(ErrorKind::kInternal, "EAGLE head: an answer of " + std::to_string(logits.size()) +
                                          " logits and " + std::to_string(hidden.size()) +
                                          " hidden values");
  const int32_t token = a.seq->request->params.greedy()
                            ? argmax_draft(logits)
                            : draw_sampled_draft(logits, *a.seq, step, a.scratch, probs_);
  a.seq->spec_token_ids.push_back(token);
  a.last = token;
  a.feature = std::move(hidden);
}

namespace {

[[noreturn]] void bad_head(const std::string& message) {
  invalid_argument("--speculative-config: EAGLE head " + message);
}

// "NAME has KEY A but the target has B", built piece by piece: GCC 12 warns (-Wrestrict, falsely)
// on a long operator+ chain.
[[noreturn]] void mismatch(const std::string& name, const char* key, int64_t head, int64_t target) {
  std::string message = name;
  message += " has ";
  message += key;
  message += ' ';
  message += std::to_string(head);
  message += " but the target has ";
  message += std::to_string(target);
  bad_head(message);
}

// The head's config.json, checked against the target and completed for an EAGLE LlamaModel.
io::ModelConfig eagle_head_config(const std::filesystem::path& dir, const io::ModelConfig& target,
                                  const io::WeightStore& store) {
  std::string name = "'";
  name += dir.string();
  name += '\'';
  bool eagle3 = false;
  io::ModelConfig c = io::load_eagle_head_config(dir, &eagle3);
  if (eagle3 || store.find("midlayer.hidden_norm.weight"))
    unsupported("--speculative-config: " + name +
                " is an EAGLE-3 head; method eagle takes EAGLE(-1) heads (fc + decoder layers), "
                "and eagle3 is not available yet");
  if (!store.find("fc.weight")) bad_head(name + " has no tensor fc.weight: not an EAGLE head");
  if (c.hidden_size != target.hidden_size)
    mismatch(name, "hidden_size", c.hidden_size, target.hidden_size);
  if (c.vocab_size != target.vocab_size)
    mismatch(name, "vocab_size", c.vocab_size, target.vocab_size);
  c.eagle = true;
  c.eagle_fc_bias = store.find("fc.bias") != nullptr;
  c.eagle_prefix =
      store.find("model.layers.0.self_attn.q_proj.weight") ? "model.layers." : "layers.";
  c.tie_word_embeddings = target.tie_word_embeddings;
  c.sliding_window = 0;
  c.sliding_layer.clear();
  c.hybrid_kv_cache = false;
  c.quant = {};
  return c;
}

}  // namespace

std::unique_ptr<Proposer> load_eagle_proposer(const EngineArgs& args,
                                              const runner::ModelRunner& target) {
  const SpeculativeConfig& sc = args.speculative;
  if (args.tensor_parallel_size != 1 || args.pipeline_parallel_size != 1)
    unsupported(
        "--speculative-config: method eagle needs --tensor-parallel-size 1 and "
        "--pipeline-parallel-size 1");
  if (args.model.empty()) invalid_argument("--speculative-config: method eagle needs --model");
  const std::filesystem::path dir = sc.model;
  if (!std::filesystem::exists(dir / "config.json"))
    bad_head("'" + dir.string() + "' has no config.json");
  const io::WeightStore store = io::WeightStore::open(dir);
  const io::ModelConfig config = eagle_head_config(dir, target.config(), store);
  // The head embeds and predicts with the target's tensors.
  std::optional<io::WeightStore> target_store;
  if (args.load_format != "dummy") target_store.emplace(io::WeightStore::open(args.model));
  if (args.device == "cuda") {
#ifdef PAGELLM_HAVE_CUDA
    return std::make_unique<EagleProposer>(
        runner::load_cuda_eagle_head(args, config, store, target,
                                     target_store ? &*target_store : nullptr),
        sc.num_speculative_tokens, args.max_num_batched_tokens);
#endif
  }
  models::LlamaWeights w = models::load_llama_weights(config, store);
  models::LlamaWeights shared = models::load_target_embeddings(
      target.config(), target_store ? &*target_store : nullptr, args.seed);
  w.embed = std::move(shared.embed);
  w.lm_head = std::move(shared.lm_head);
  auto head = std::make_unique<runner::CpuRunner>(
      std::make_unique<models::LlamaModel>(config, std::move(w)), target.num_kv_blocks(),
      target.block_size());
  return std::make_unique<EagleProposer>(std::move(head), sc.num_speculative_tokens,
                                         args.max_num_batched_tokens);
}

}  // namespace pagellm::spec
