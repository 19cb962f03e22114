#include "engine/engine_core.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/logging.h"
#include "common/phase_times.h"
#include "engine/token_controls.h"
#include "runner/model_loader.h"

namespace pagellm {

using engine::Clock;
using engine::Request;

EngineCore::EngineCore(const EngineArgs& args) : args_(args) {
  args_.resolve();
  runner::LoadedModel model = runner::load_model(args_);
  if (args_.model.empty()) {
    tokenizer_ = tok::Tokenizer::byte_level_demo();
  } else {
    tokenizer_ = tok::Tokenizer::from_dir(args_.tokenizer.empty() ? args_.model : args_.tokenizer);
  }
  generation_config_ = model.generation_config;
  info_.name = model.name;
  init(std::move(model.runner));
}

EngineCore::EngineCore(const EngineArgs& args, std::unique_ptr<runner::ModelRunner> runner,
                       std::shared_ptr<const tok::Tokenizer> tokenizer, io::GenerationConfig generation_config,
                       std::string model_name)
    : args_(args), tokenizer_(std::move(tokenizer)), generation_config_(std::move(generation_config)) {
  info_.name = std::move(model_name);
  init(std::move(runner));
}

EngineCore::~EngineCore() {
  // The runner may still read requests' memory: collect what is in flight before anything goes.
  for (; num_in_flight_ > 0; --num_in_flight_) {
    try {
      runner_->wait_next();
    } catch (const std::exception&) {
      // The failure was reported by the step that met it (or nobody is left to tell).
    }
  }
}

void EngineCore::init(std::unique_ptr<runner::ModelRunner> runner) {
  // An engine built around a given runner may get args whose step budget is still "the default"
  // (0): that default, without resolving the device string itself.
  if (args_.max_num_batched_tokens == 0) {
    EngineArgs resolved = args_;
    resolved.resolve_device();
    args_.max_num_batched_tokens = resolved.max_num_batched_tokens;
  }
  runner_ = std::move(runner);
  const io::ModelConfig& config = runner_->config();
  int model_len = static_cast<int>(config.max_position_embeddings);
  if (args_.max_model_len > 0 && model_len > 0 && args_.max_model_len > model_len) {
    invalid_argument("--max-model-len " + std::to_string(args_.max_model_len) +
                     " exceeds the model's max_position_embeddings (" + std::to_string(model_len) + ")");
  }
  const int max_model_len = args_.max_model_len > 0 ? args_.max_model_len : model_len;
  if (max_model_len <= 0) invalid_argument("max_model_len: unknown (set --max-model-len)");
  if (!args_.enable_chunked_prefill && args_.max_num_batched_tokens < max_model_len) {
    invalid_argument("--max-num-batched-tokens (" + std::to_string(args_.max_num_batched_tokens) +
                     ") must be >= max_model_len (" + std::to_string(max_model_len) +
                     ") when chunked prefill is disabled");
  }
  info_.max_model_len = max_model_len;
  info_.vocab_size = static_cast<int>(config.vocab_size);

  const kv::KvLayout layout = kv::kv_layout_of(config);
  kv_ = std::make_unique<kv::KVCacheManager>(kv::KVCacheConfig{
      runner_->num_kv_blocks(), runner_->block_size(), args_.enable_prefix_caching,
      runner_->num_swap_blocks(), layout.group_window});
  engine::SchedulerConfig sc;
  sc.max_num_seqs = args_.max_num_seqs;
  sc.max_num_batched_tokens = args_.max_num_batched_tokens;
  sc.max_model_len = max_model_len;
  sc.enable_chunked_prefill = args_.enable_chunked_prefill;
  sc.long_prefill_token_threshold = args_.long_prefill_token_threshold;
  sc.policy = args_.scheduling_policy == "priority" ? engine::SchedulingPolicy::kPriority
                                                     : engine::SchedulingPolicy::kFcfs;
  max_in_flight_ = std::max(1, runner_->max_batches_in_flight());
  sc.max_batches_in_flight = max_in_flight_;
  scheduler_ = std::make_unique<engine::Scheduler>(sc, *kv_);
  proposer_ = spec::make_proposer(args_, *runner_, *tokenizer_);
  if (proposer_ && proposer_->needs_hidden_states()) {
    // observe() pairs each output with the scheduler's last batch: one batch in flight.
    if (max_in_flight_ != 1)
      unsupported("--speculative-config: method " + args_.speculative.method +
                  " needs one batch in flight (no pipeline parallelism)");
    runner_->set_return_hidden();
  }
  if (proposer_) {
    const SpeculativeConfig& spec = args_.speculative;
    log::info("speculative decoding: " + spec.method + (spec.model.empty() ? "" : " " + spec.model) + ", " +
              std::to_string(spec.num_speculative_tokens) + " draft tokens per step");
  }

  std::vector<int32_t> eos;
  for (int64_t id : generation_config_.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  if (eos.empty()) {
    for (int64_t id : config.eos_token_ids) eos.push_back(static_cast<int32_t>(id));
  }
  output_processor_ = std::make_unique<engine::OutputProcessor>(tokenizer_, std::move(eos), max_model_len);
  if (tokenizer_) {
    grammar_compiler_ = std::make_unique<structured::GrammarCompiler>(
        tokenizer_, output_processor_->eos_token_ids(), static_cast<size_t>(std::max(info_.vocab_size, 0)));
    grammar_compiler_->build_vocab_in_background();
  }
  log::info("KV cache: " + std::to_string(kv_->num_blocks()) + " blocks of " +
            std::to_string(kv_->block_size()) + " tokens (" +
            std::to_string(static_cast<int64_t>(kv_->num_blocks()) * kv_->block_size()) +
            " tokens), max_model_len " + std::to_string(max_model_len) + ", up to " +
            std::to_string(args_.max_num_batched_tokens) + " tokens per step" +
            (runner_->num_swap_blocks() > 0
                 ? ", " + std::to_string(runner_->num_swap_blocks()) + " swap blocks"
                 : ""));
  if (layout.hybrid()) log_kv_groups(layout, max_model_len);
}

// The hybrid layout's effect, in the units a user sizes a deployment by: how many sequences of
// max_model_len tokens the pool holds, against every layer keeping every token.
void EngineCore::log_kv_groups(const kv::KvLayout& layout, int max_model_len) const {
  const int per_seq = kv_->peak_blocks_for(max_model_len, args_.max_num_batched_tokens);
  const double all_layers =
      static_cast<double>(kv_->blocks_for(max_model_len)) * layout.num_layers() / layout.slots;
  std::string windows;
  for (int w : layout.group_window) {
    windows.append(windows.empty() ? "" : ", ");
    windows.append(w == 0 ? "full" : std::to_string(w));
  }
  char line[320];
  std::snprintf(
      line, sizeof line,
      "KV cache groups: %d (layers per block: %d; windows: %s); a %d-token sequence holds "
      "at most %d blocks, %.0f%% of what every layer keeping every token would (%.1f such "
      "sequences fit)",
      layout.num_groups(), layout.slots, windows.c_str(), max_model_len, per_seq,
      100.0 * per_seq / all_layers, static_cast<double>(kv_->num_blocks()) / per_seq);
  log::info(line);
}

std::vector<int32_t> EngineCore::tokenize(const PromptInput& prompt) const {
  std::vector<int32_t> ids = prompt.token_ids.empty() ? tokenizer_->encode(prompt.text, true) : prompt.token_ids;
  for (int32_t id : ids) {
    if (id < 0 || id >= info_.vocab_size) {
      invalid_argument("prompt: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(info_.vocab_size) + ")");
    }
  }
  return ids;
}

std::unique_ptr<Request> EngineCore::make_request(const std::string& request_id, const PromptInput& prompt,
                                                  const SamplingParams& params, const RequestOptions& options,
                                                  bool stream_deltas) const {
  params.validate();
  const bool pooling_engine = args_.runner == "pooling";
  if (pooling_engine && options.pooling == PoolingType::kNone)
    invalid_argument("this model was started with --runner pooling: it answers embedding requests "
                     "only");
  if (!pooling_engine && options.pooling != PoolingType::kNone)
    invalid_argument("this model was started for generation: start it with --runner pooling to get "
                     "embeddings");
  auto req = std::make_unique<Request>();
  req->request_id = request_id;
  req->arrival_time = Clock::now();
  req->priority = options.priority;
  req->cache_salt = options.cache_salt;
  req->cache_salt_hash = kv::KVCacheManager::hash_salt(options.cache_salt);
  req->params = params;
  if (params.structured_outputs) {
    if (options.pooling != PoolingType::kNone)
      invalid_argument("structured_outputs: not available for embedding requests");
    if (!grammar_compiler_) invalid_argument("structured_outputs: this engine has no tokenizer");
    // Compiled here, on the caller's thread, so that the step loop never waits for a compile.
    req->grammar = grammar_compiler_->compile(*params.structured_outputs);
  }
  set_token_controls(*req);
  if (options.pooling != PoolingType::kNone) {
    // Nothing is generated: one sample, no logprobs; the prompt is all that runs.
    req->params = SamplingParams{};
    req->params.max_tokens = 1;
    req->pooling = options.pooling;
    req->normalize = options.normalize;
  }
  req->prompt_text = prompt.token_ids.empty() ? prompt.text : std::string();
  req->prompt_token_ids = tokenize(prompt);
  req->stream_deltas = stream_deltas;
  if (params.prompt_logprobs) req->prompt_logprobs.emplace_back();  // the first token has none
  scheduler_->check_fits(*req);
  return req;
}

// logit_bias, allowed_token_ids and bad_words: checked against the vocabulary, then kept in the
// forms the step loop uses.
void EngineCore::set_token_controls(Request& req) const {
  const SamplingParams& p = req.params;
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= info_.vocab_size) {
      invalid_argument("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                       std::to_string(info_.vocab_size) + ")");
    }
  }
  if (p.allowed_token_ids) req.allowed_mask = engine::allowed_token_mask(*p.allowed_token_ids, info_.vocab_size);
  if (!p.bad_words.empty()) {
    if (!tokenizer_) invalid_argument("bad_words: this engine has no tokenizer");
    req.bad_words_token_ids = engine::tokenize_bad_words(p.bad_words, *tokenizer_, info_.vocab_size);
  }
}

void EngineCore::submit(std::unique_ptr<Request> req) {
  if (requests_.count(req->request_id) != 0) {
    invalid_argument("request_id: duplicate '" + req->request_id + "'");
  }
  req->arrival_index = next_arrival_++;
  req->base_seed = req->params.seed ? *req->params.seed
                                    : engine::splitmix64(args_.seed ^ engine::splitmix64(req->arrival_index));
  req->spec_features = proposer_ && proposer_->needs_hidden_states() && may_speculate(*req);
  scheduler_->add_request(*req);
  if (req->grammar || !req->allowed_mask.empty()) {
    engine::Sequence& seq = *req->seqs.front();
    if (req->grammar) seq.matcher = std::make_unique<structured::Matcher>(req->grammar);
    seq.token_mask.resize((static_cast<size_t>(info_.vocab_size) + 31) / 32);
  }
  output_processor_->prepare(*req);
  const std::string id = req->request_id;
  requests_.emplace(id, std::move(req));
}

void EngineCore::add_request(const std::string& request_id, const PromptInput& prompt,
                             const SamplingParams& params, const RequestOptions& options, bool stream_deltas) {
  if (requests_.count(request_id) != 0) invalid_argument("request_id: duplicate '" + request_id + "'");
  submit(make_request(request_id, prompt, params, options, stream_deltas));
}

std::vector<RequestOutput> EngineCore::step() {
  std::vector<RequestOutput> outputs = std::move(pending_outputs_);
  pending_outputs_.clear();
  if (!scheduler_->has_unfinished() && num_in_flight_ == 0) return outputs;
  ++step_index_;
  const bool submitted = num_in_flight_ < max_in_flight_ && scheduler_->has_unfinished() && submit_batch();
  // Room for another batch: schedule it in the next step rather than wait for this one.
  if (num_in_flight_ == 0 || (submitted && num_in_flight_ < max_in_flight_)) return outputs;
  collect_batch(outputs);
  return outputs;
}

bool EngineCore::submit_batch() {
  std::optional<phase::Scope> scheduling(phase::kSchedule);
  if (proposer_) propose_drafts();
  const engine::SchedulerOutput& batch = scheduler_->schedule();
  scheduling.reset();
  if (batch.seqs.empty() && batch.blocks_to_swap_out.empty() && batch.blocks_to_swap_in.empty()) {
    return false;
  }
  count_scheduled_tokens(batch);
  // The masks build on the mask threads while the runner runs the forward pass; the runner waits
  // for them (SchedulerOutput::pending_masks) before it samples.
  {
    phase::Scope s(phase::kMaskStart);
    start_token_masks(batch);
  }
  {
    phase::Scope s(phase::kRunnerSubmit);
    runner_->submit(batch);
  }
  last_batch_ = &batch;
  ++num_in_flight_;
  ++num_submitted_;
  if (proposer_) time_draft_batch(batch);
  return true;
}

void EngineCore::collect_batch(std::vector<RequestOutput>& outputs) {
  --num_in_flight_;  // collected even when it failed
  ++num_collected_;
  // However the runner ends, the mask threads are done with the sequences before anything else
  // touches them (they may still be building a later batch's masks: waited for too).
  struct JoinMasks {
    EngineCore* core;
    ~JoinMasks() {
      try {
        core->wait_token_masks();
      } catch (...) {  // already thrown to the runner, or the runner failed first
      }
    }
  } join_masks{this};
  std::optional<phase::Scope> waiting(phase::kRunnerWait);
  const engine::ModelRunnerOutput result = runner_->wait_next();
  wait_token_masks();  // a runner that sampled nothing need not have waited
  waiting.reset();
  if (timed_batch_ != 0 && timed_batch_ == num_collected_) {
    draft_cost_meter_.add_target_step(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - timed_batch_start_)
            .count());
    timed_batch_ = 0;
  }
  std::optional<phase::Scope> applying(phase::kApplyOutput);
  if (proposer_ && last_batch_) proposer_->observe(*last_batch_, result);
  new_tokens_.clear();
  scheduler_->update_from_output(result, new_tokens_);
  release_retired();
  std::vector<Request*> touched;
  process_new_tokens(new_tokens_, touched);
  applying.reset();
  phase::Scope making(phase::kMakeOutputs);
  for (Request* req : touched) {
    RequestOutput out = output_processor_->make_output(*req);
    const bool finished = req->all_finished();
    if (!out.outputs.empty() || finished) outputs.push_back(std::move(out));
    if (finished) finish_request(*req);
  }
  ++stats_.num_steps;
  if (args_.log_stats) stats_logger_.maybe_log(counters(), Clock::now());
}

void EngineCore::release_retired() {
  std::erase_if(retired_, [&](const auto& r) { return r.second <= num_collected_; });
}

bool EngineCore::may_speculate(const engine::Request& req) const {
  // A structured-output request gets no drafts: verifying them would need its grammar's mask at
  // every draft position, and the runner applies one mask per row. Bad words, whose bans change
  // with every token, and allowed_token_ids (a mask too) are treated alike. Sampled requests on a
  // runner that verifies their drafts slowly (the CUDA runners: on the host) decode without
  // drafts too.
  return !req.grammar && req.allowed_mask.empty() && req.bad_words_token_ids.empty() &&
         req.pooling == PoolingType::kNone &&
         (req.params.greedy() || runner_->verifies_sampled_drafts());
}

void EngineCore::propose_drafts() {
  scheduler_->spec_candidates(spec_seqs_);
  spec_candidates_.clear();
  const SpeculativeConfig& spec = args_.speculative;
  // Requests that may not speculate never give a proposer anything to keep (an EAGLE proposer
  // gets hidden states only for Request::spec_features, which may_speculate decides).
  for (const auto& [seq, room] : spec_seqs_)
    if (may_speculate(*seq->request)) spec_candidates_.push_back({seq, room});
  // Adaptive k: as many drafts as the measured acceptance pays for, the most any sequence of the
  // step wants (a draft model's steps and the verification shape serve the whole batch, so one
  // sequence drafting fewer would save nothing, and equal counts keep the CUDA graph shapes).
  int step_k = spec.num_speculative_tokens;
  if (spec.adaptive) {
    const double cost = draft_cost();
    step_k = 1;
    for (const spec::SpecCandidate& c : spec_candidates_)
      step_k = std::max(step_k, spec::adaptive_num_drafts(c.seq->spec_hits, c.seq->spec_trials,
                                                          spec.num_speculative_tokens, cost));
    for (spec::SpecCandidate& c : spec_candidates_) c.max_drafts = std::min(c.max_drafts, step_k);
  }
  // The adaptive switch: a batch this large decodes without drafts (their drafts, if any, were
  // proposed for an earlier length and are ignored by the scheduler).
  if (spec_candidates_.size() > size_t(spec.max_speculating_seqs())) return;
  if (spec_candidates_.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  proposer_->propose(spec_candidates_);
  draft_cost_meter_.add_proposal(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), step_k);
}

double EngineCore::draft_cost() const {
  const SpeculativeConfig& spec = args_.speculative;
  if (spec.draft_token_cost > 0) return spec.draft_token_cost;
  // Verifying one more token: the share of a target step the n-gram default stands for.
  return draft_cost_meter_.cost(spec.effective_draft_cost(), SpeculativeConfig::kNgramDraftCost);
}

void EngineCore::time_draft_batch(const engine::SchedulerOutput& batch) {
  if (num_in_flight_ != 1) return;  // another batch shares the runner's time
  const bool drafts =
      std::any_of(batch.seqs.begin(), batch.seqs.end(),
                  [](const engine::ScheduledSeq& s) { return s.num_spec_tokens > 0; });
  if (!drafts) return;
  timed_batch_ = num_submitted_;
  timed_batch_start_ = std::chrono::steady_clock::now();
}

void EngineCore::count_scheduled_tokens(const engine::SchedulerOutput& batch) {
  for (const engine::ScheduledSeq& s : batch.seqs) {
    const int num_prompt = static_cast<int>(s.prompt_token_ids.size());
    const int begin = s.num_computed_tokens;
    const int end = begin + static_cast<int>(s.token_ids.size());
    if (begin < num_prompt) stats_.prompt_tokens += static_cast<uint64_t>(std::min(end, num_prompt) - begin);
  }
}

void EngineCore::start_token_masks(const engine::SchedulerOutput& batch) {
  // One batch's masks at a time: an earlier batch in flight may still be building its own.
  wait_token_masks();
  mask_jobs_.clear();
  const std::span<engine::Sequence* const> seqs = scheduler_->scheduled_seqs();
  for (size_t i = 0; i < batch.seqs.size() && i < seqs.size(); ++i) {
    engine::Sequence& seq = *seqs[i];
    if (!batch.seqs[i].needs_sample || seq.token_mask.empty()) continue;
    // Written in place: this step's ScheduledSeq already points at the mask's storage.
    mask_jobs_.push_back({seq.matcher.get(), seq.token_mask, seq.request->allowed_mask});
  }
  if (mask_jobs_.empty()) {
    scheduler_->set_pending_masks(nullptr);
    return;
  }
  if (!mask_builder_) {
    // Half the cores at most: the engine thread, and the CPU backend's pool where it runs, need
    // the rest. A cached mask is a 16 KB copy at a 128k vocabulary, so a few threads suffice.
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    mask_builder_ = std::make_unique<engine::MaskBuilder>(std::clamp(cores / 2, 1, 8));
  }
  mask_builder_->start(mask_jobs_);
  masks_pending_ = true;
  scheduler_->set_pending_masks(mask_builder_.get());
}

// The fence stays in the batch's output: a runner thread may still read it (batches in flight),
// and waiting on a finished fence returns at once.
void EngineCore::wait_token_masks() {
  if (!masks_pending_) return;
  masks_pending_ = false;
  mask_builder_->wait();
}

void EngineCore::process_new_tokens(const std::vector<engine::NewToken>& new_tokens,
                                    std::vector<Request*>& touched) {
  const auto now = Clock::now();
  for (const engine::NewToken& nt : new_tokens) {
    engine::Sequence& seq = *nt.seq;
    Request& req = *seq.request;
    if (nt.pooled) {
      finish_pooling(req);
      if (req.touched_step != step_index_) req.touched_step = step_index_, touched.push_back(&req);
      scheduler_->finish_seq(seq, FinishReason::kStop);
      continue;
    }
    // A stop earlier in this step's accepted drafts ends the sequence: the tokens after it are dropped.
    if (seq.finished()) continue;
    // The grammar took the previous token while this step ran (Matcher::settle on the mask
    // threads). If that completed the output (or, never expected, broke it), the sequence ends
    // there and this step's token is dropped, as if it had ended a step earlier.
    if (const FinishReason ended = settled_grammar(seq); ended != FinishReason::kNone) {
      seq.token_ids.resize(static_cast<size_t>(nt.num_tokens - 1));
      scheduler_->finish_seq(seq, ended);
      if (req.touched_step != step_index_) req.touched_step = step_index_, touched.push_back(&req);
      continue;
    }
    // A token outside the step's mask means the runner did not apply it: end the sample as an
    // error rather than return text that breaks its grammar.
    const bool mask_ok = seq.token_mask.empty() || engine::mask_allows(seq.token_mask, nt.token_id);
    if (seq.matcher) seq.matcher->defer(nt.token_id);  // settled with the next step's mask
    FinishReason reason = output_processor_->process_token(seq, nt.token_id, nt.logprobs, nt.num_tokens);
    if (!mask_ok) {
      log::warning("request " + req.request_id + ": sampled token " + std::to_string(nt.token_id) +
                " is outside its structured-output mask");
      reason = FinishReason::kError;
    }
    ++stats_.generation_tokens;
    if (req.touched_step != step_index_) {
      req.touched_step = step_index_;
      touched.push_back(&req);
      const double since = std::chrono::duration<double>(now - (req.first_token_time ? req.last_token_time
                                                                                     : req.arrival_time)).count();
      engine::add_latency_sample(req.first_token_time ? stats_.itl_samples : stats_.ttft_samples, since);
      if (!req.first_token_time) req.first_token_time = now;
      req.last_token_time = now;
    }
    if (reason != FinishReason::kNone) {
      if (nt.num_tokens > 0 && seq.num_tokens() > nt.num_tokens) seq.token_ids.resize(static_cast<size_t>(nt.num_tokens));
      scheduler_->finish_seq(seq, reason);
    }
  }
}

FinishReason EngineCore::settled_grammar(engine::Sequence& seq) const {
  if (!seq.matcher) return FinishReason::kNone;
  switch (seq.matcher->take_settled()) {
    case structured::Matcher::Settled::kComplete:
      return FinishReason::kStop;  // the grammar is complete and nothing may follow
    case structured::Matcher::Settled::kRejected:
      log::warning("request " + seq.request->request_id +
                   ": a sampled token broke its structured-output grammar");
      return FinishReason::kError;
    default:
      return FinishReason::kNone;
  }
}

void EngineCore::finish_pooling(Request& req) {
  std::vector<double> v = std::move(req.pooled_sum);
  if (v.empty()) return;  // no hidden state came back: the output's embedding stays empty
  if (req.pooling == PoolingType::kMean)
    for (double& x : v) x /= double(std::max(1, req.num_prompt_tokens()));
  double norm = 0;
  for (double x : v) norm += x * x;
  const double scale = req.normalize && norm > 0 ? 1.0 / std::sqrt(norm) : 1.0;
  req.embedding.resize(v.size());
  for (size_t d = 0; d < v.size(); ++d) req.embedding[d] = float(v[d] * scale);
}

void EngineCore::finish_request(Request& req) {
  if (proposer_) {
    for (const auto& seq : req.seqs) proposer_->release(seq->seq_id);
  }
  switch (req.seqs.front()->finish_reason) {
    case FinishReason::kStop: ++stats_.requests_finished_stop; break;
    case FinishReason::kLength: ++stats_.requests_finished_length; break;
    case FinishReason::kAbort: ++stats_.requests_finished_abort; break;
    case FinishReason::kError: ++stats_.requests_finished_error; break;
    case FinishReason::kNone: break;
  }
  engine::add_latency_sample(stats_.e2e_samples,
                             std::chrono::duration<double>(Clock::now() - req.arrival_time).count());
  const std::string id = req.request_id;  // req dies with the erase, unless a batch in flight reads it
  auto it = requests_.find(id);
  if (num_in_flight_ > 0) retired_.emplace_back(std::move(it->second), num_submitted_);
  requests_.erase(it);
}

bool EngineCore::abort_request(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  Request& req = *it->second;
  scheduler_->abort_request(req);
  pending_outputs_.push_back(output_processor_->make_output(req));
  finish_request(req);
  return true;
}

void EngineCore::abort_all() {
  std::vector<std::string> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, req] : requests_) ids.push_back(id);
  for (const std::string& id : ids) abort_request(id);
}

EngineStats EngineCore::counters() const {
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.num_swapped = scheduler_->num_swapped();
  s.kv_usage = kv_->usage();
  s.num_kv_blocks = kv_->num_blocks();
  s.kv_peak_blocks = kv_->peak_used_blocks();
  s.prefix_cache_queries = kv_->prefix_cache_queries();
  s.prefix_cache_hits = kv_->prefix_cache_hits();
  s.num_preemptions = scheduler_->num_preemptions();
  s.prompt_tokens = stats_.prompt_tokens;
  s.generation_tokens = stats_.generation_tokens;
  s.requests_finished_stop = stats_.requests_finished_stop;
  s.requests_finished_length = stats_.requests_finished_length;
  s.requests_finished_abort = stats_.requests_finished_abort;
  s.requests_finished_error = stats_.requests_finished_error;
  s.num_steps = stats_.num_steps;
  const engine::SpecDecodeCounters& spec = scheduler_->spec_counters();
  s.spec_num_drafts = spec.num_drafts;
  s.spec_num_draft_tokens = spec.num_draft_tokens;
  s.spec_num_accepted_tokens = spec.num_accepted_tokens;
  s.spec_accepted_per_pos = spec.accepted_per_pos;
  if (proposer_ && args_.speculative.adaptive) s.spec_draft_cost = draft_cost();
  return s;
}

EngineStats EngineCore::take_stats() {
  EngineStats s = counters();
  s.ttft_samples = std::move(stats_.ttft_samples);
  s.itl_samples = std::move(stats_.itl_samples);
  s.e2e_samples = std::move(stats_.e2e_samples);
  stats_.ttft_samples.clear();
  stats_.itl_samples.clear();
  stats_.e2e_samples.clear();
  return s;
}

}  // namespace pagellm
