// Turns sampled tokens into text and finish decisions: incremental detokenization, stop strings
// matched on the text (across token boundaries), stop token ids, EOS, min/max tokens. While streaming,
// text that could be the start of a stop string is held back until it is known not to be one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/request.h"

namespace pagellm::engine {

class OutputProcessor {
 public:
  // eos_token_ids: generation_config's list (falls back to the tokenizer's EOS when empty).
  OutputProcessor(std::shared_ptr<const tok::Tokenizer> tokenizer, std::vector<int32_t> eos_token_ids,
                  int max_model_len);

  // Sets up a new request's first sequence (min_tokens bans). Samples forked later inherit it.
  void prepare(Request& req) const;
  // The ids seq may not sample next, having generated num_output tokens: EOS and stop ids before
  // min_tokens, and the bad words' last tokens where the rest of the word was just generated.
  void set_bans(Sequence& seq, int num_output) const;
  // Handles one token already appended to seq.token_ids. Returns why the sequence must finish, or
  // kNone. num_tokens: the sequence's length with this token (-1 = seq.num_tokens()); a speculating
  // step appends several tokens before they are processed one by one.
  FinishReason process_token(Sequence& seq, int32_t token, const std::optional<TokenLogprobs>& logprobs,
                             int num_tokens = -1);
  // The request's output: everything so far, or (req.stream_deltas) only what is new since the last
  // call. With best_of > n, samples appear only once all have finished, the n best by cumulative
  // logprob.
  RequestOutput make_output(Request& req) const;

  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }

 private:
  bool is_eos(const SamplingParams& params, int32_t token) const;
  std::optional<FinishReason> check_stop_string(Sequence& seq, size_t old_len) const;
  static size_t held_back(const Sequence& seq);
  CompletionOutput sample_output(Sequence& seq, int index, bool delta) const;

  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_token_ids_;
  int max_model_len_;
};

}  // namespace pagellm::engine
