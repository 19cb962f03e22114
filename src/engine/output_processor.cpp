#include "engine/output_processor.h"

#include <algorithm>

#include "engine/token_controls.h"

namespace pagellm {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return nullptr;
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return nullptr;
}

namespace engine {

namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

OutputProcessor::OutputProcessor(std::shared_ptr<const tok::Tokenizer> tokenizer,
                                 std::vector<int32_t> eos_token_ids, int max_model_len)
    : tokenizer_(std::move(tokenizer)), eos_token_ids_(std::move(eos_token_ids)), max_model_len_(max_model_len) {
  if (eos_token_ids_.empty() && tokenizer_ && tokenizer_->eos_token_id()) {
    eos_token_ids_.push_back(*tokenizer_->eos_token_id());
  }
}

void OutputProcessor::prepare(Request& req) const { set_bans(*req.seqs.front(), 0); }

void OutputProcessor::set_bans(Sequence& seq, int num_output) const {
  const SamplingParams& p = seq.request->params;
  seq.banned_token_ids.clear();
  if (num_output < p.min_tokens) {
    if (!p.ignore_eos) seq.banned_token_ids = eos_token_ids_;
    for (int32_t id : p.stop_token_ids) {
      if (!contains(seq.banned_token_ids, id)) seq.banned_token_ids.push_back(id);
    }
  }
  const auto output = seq.output_ids();
  add_bad_word_bans(seq.request->bad_words_token_ids,
                    output.first(std::min(output.size(), static_cast<size_t>(std::max(num_output, 0)))),
                    seq.banned_token_ids);
}

bool OutputProcessor::is_eos(const SamplingParams& params, int32_t token) const {
  return !params.ignore_eos && contains(eos_token_ids_, token);
}

FinishReason OutputProcessor::process_token(Sequence& seq, int32_t token,
                                            const std::optional<TokenLogprobs>& logprobs, int num_tokens) {
  const SamplingParams& p = seq.request->params;
  if (num_tokens < 0) num_tokens = seq.num_tokens();
  const int num_output = num_tokens - seq.num_prompt_tokens();
  if (logprobs) {
    seq.out.cumulative_logprob += logprobs->logprob;
    if (p.logprobs) {
      TokenLogprobs lp = *logprobs;
      if (lp.top.size() > static_cast<size_t>(*p.logprobs)) lp.top.resize(static_cast<size_t>(*p.logprobs));
      seq.out.logprobs.push_back(std::move(lp));
    }
  }
  const bool past_min = num_output > p.min_tokens;  // this token's index is num_output - 1
  if (num_output >= p.min_tokens || !seq.request->bad_words_token_ids.empty()) set_bans(seq, num_output);

  // Stop tokens end the sequence without adding text (unless asked to include them).
  const bool is_stop_id = contains(p.stop_token_ids, token);
  if (past_min && (is_stop_id || is_eos(p, token))) {
    if (is_stop_id) seq.out.stop_token = token;
    if (p.include_stop_str_in_output && p.detokenize && is_stop_id) {
      if (!seq.out.detokenizer) {
        seq.out.detokenizer = std::make_unique<tok::IncrementalDetokenizer>(
            tokenizer_, seq.prompt_ids(), p.skip_special_tokens);
      }
      seq.out.text += seq.out.detokenizer->push(token);
    }
    return FinishReason::kStop;
  }
  if (p.detokenize && tokenizer_) {
    if (!seq.out.detokenizer) {
      seq.out.detokenizer =
          std::make_unique<tok::IncrementalDetokenizer>(tokenizer_, seq.prompt_ids(), p.skip_special_tokens);
    }
    const size_t old_len = seq.out.text.size();
    seq.out.text += seq.out.detokenizer->push(token);
    if (past_min && !p.stop.empty()) {
      if (auto reason = check_stop_string(seq, old_len)) return *reason;
    }
  }
  if (num_output >= p.max_tokens || num_tokens >= max_model_len_) return FinishReason::kLength;
  return FinishReason::kNone;
}

std::optional<FinishReason> OutputProcessor::check_stop_string(Sequence& seq, size_t old_len) const {
  const SamplingParams& p = seq.request->params;
  std::string& text = seq.out.text;
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& stop : p.stop) {
    if (stop.empty()) continue;
    // Only a match that ends in the new text is new; it may start in older text.
    const size_t from = old_len >= stop.size() - 1 ? old_len - (stop.size() - 1) : 0;
    const size_t pos = text.find(stop, from);
    if (pos != std::string::npos && pos < best_pos) {
      best_pos = pos;
      best = &stop;
    }
  }
  if (best == nullptr) return std::nullopt;
  text.resize(p.include_stop_str_in_output ? best_pos + best->size() : best_pos);
  seq.out.stop_reason = *best;
  return FinishReason::kStop;
}

size_t OutputProcessor::held_back(const Sequence& seq) {
  const SamplingParams& p = seq.request->params;
  if (seq.finished() || p.stop.empty()) return 0;
  const std::string& text = seq.out.text;
  size_t hold = 0;
  for (const std::string& stop : p.stop) {
    if (stop.empty()) continue;
    // Longest proper prefix of `stop` that the text ends with.
    for (size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

CompletionOutput OutputProcessor::sample_output(Sequence& seq, int index, bool delta) const {
  CompletionOutput c;
  c.index = index;
  const size_t num_visible = seq.out.text.size() - held_back(seq);
  const auto ids = seq.output_ids();
  c.cumulative_logprob = seq.out.cumulative_logprob;
  c.finish_reason = seq.finished() ? seq.finish_reason : FinishReason::kNone;
  c.stop_reason = seq.out.stop_reason;
  c.stop_token = seq.out.stop_token;
  size_t first_char = 0;
  size_t first_token = 0;
  if (delta) {
    first_char = std::min(seq.out.num_emitted_chars, num_visible);
    first_token = seq.out.num_emitted_tokens;
    seq.out.num_emitted_chars = std::max(seq.out.num_emitted_chars, num_visible);
    seq.out.num_emitted_tokens = ids.size();
    seq.out.finish_sent = seq.finished();
  }
  c.text = seq.out.text.substr(first_char, num_visible - first_char);
  c.token_ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(first_token), ids.end());
  if (first_token < seq.out.logprobs.size()) {
    c.logprobs.assign(seq.out.logprobs.begin() + static_cast<std::ptrdiff_t>(first_token),
                      seq.out.logprobs.end());
  }
  return c;
}

RequestOutput OutputProcessor::make_output(Request& req) const {
  RequestOutput o;
  o.request_id = req.request_id;
  o.finished = req.all_finished();
  o.num_cached_tokens = req.num_cached_tokens;
  if (o.finished) o.embedding = req.embedding;
  if (!req.stream_deltas || !req.prompt_sent) {
    o.prompt = req.prompt_text;
    o.prompt_token_ids = req.prompt_token_ids;
    if (req.params.prompt_logprobs) o.prompt_logprobs = req.prompt_logprobs;
    req.prompt_sent = true;
  }
  const bool delta = req.stream_deltas;
  if (req.num_samples() > req.params.n) {
    // best_of: only the final answer, the n samples with the highest cumulative logprob.
    if (!o.finished) return o;
    std::vector<Sequence*> ranked;
    for (const auto& s : req.seqs) ranked.push_back(s.get());
    std::stable_sort(ranked.begin(), ranked.end(), [](const Sequence* a, const Sequence* b) {
      return a->out.cumulative_logprob > b->out.cumulative_logprob;
    });
    for (int i = 0; i < req.params.n && i < static_cast<int>(ranked.size()); ++i) {
      o.outputs.push_back(sample_output(*ranked[static_cast<size_t>(i)], i, false));
    }
    return o;
  }
  for (const auto& s : req.seqs) {
    if (delta && s->out.finish_sent) continue;
    CompletionOutput c = sample_output(*s, s->sample_index, delta);
    if (delta && c.text.empty() && c.token_ids.empty() && c.finish_reason == FinishReason::kNone) continue;
    o.outputs.push_back(std::move(c));
  }
  std::sort(o.outputs.begin(), o.outputs.end(),
            [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
  return o;
}

}  // namespace engine
}  // namespace pagellm
