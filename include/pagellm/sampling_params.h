// Per-request sampling parameters, mirroring vLLM's SamplingParams. validate() throws
// pagellm::Error(kInvalidArgument) naming the offending parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pagellm {

// Constrained decoding (vLLM's StructuredOutputsParams): exactly one of the fields is set. The
// output then matches the JSON schema / any JSON object / the regex (whole output) / one of the
// choices / the GBNF grammar, and EOS is allowed only where the match is complete.
struct StructuredOutputs {
  std::optional<std::string> json;          // a JSON schema, as JSON text
  bool json_object = false;                 // any JSON object
  std::optional<std::string> regex;
  std::optional<std::vector<std::string>> choice;
  std::optional<std::string> grammar;       // GBNF, start rule `root`

  int num_set() const {
    return int(json.has_value()) + int(json_object) + int(regex.has_value()) + int(choice.has_value()) +
           int(grammar.has_value());
  }
};

struct SamplingParams {
  int n = 1;                            // samples returned per prompt
  std::optional<int> best_of;           // samples generated (>= n); the n with best cumulative logprob are returned
  float temperature = 1.0f;             // 0 = greedy
  float top_p = 1.0f;                   // (0, 1]
  int top_k = -1;                       // -1 or 0 = all tokens
  float min_p = 0.0f;                   // [0, 1]
  float presence_penalty = 0.0f;        // [-2, 2]
  float frequency_penalty = 0.0f;       // [-2, 2]
  float repetition_penalty = 1.0f;      // > 0
  std::optional<uint64_t> seed;         // same seed => same output, whatever the batch
  int max_tokens = 16;                  // >= 1
  int min_tokens = 0;                   // EOS / stop ids suppressed before this many tokens
  std::vector<std::string> stop;        // stop strings, matched on detokenized text
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  std::optional<int> logprobs;          // top-N logprobs per generated token, N <= 20
  std::optional<int> prompt_logprobs;   // top-N logprobs per prompt token, N <= 20
  bool skip_special_tokens = true;
  bool detokenize = true;
  std::optional<StructuredOutputs> structured_outputs;
  // Added to a token's logit before penalties and sampling (OpenAI's logit_bias): (token id, bias in
  // [-100, 100]). Logprobs stay the raw model's.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Only these tokens may be sampled (vLLM's allowed_token_ids; EOS too only when listed).
  std::optional<std::vector<int32_t>> allowed_token_ids;
  // vLLM's bad_words: each word is tokenized as it reads at the start of the text and after a
  // space; a word's last token is banned wherever the tokens before it were just generated (a
  // one-token word is banned everywhere).
  std::vector<std::string> bad_words;

  static constexpr int kMaxLogprobs = 20;

  void validate() const;
  bool greedy() const { return temperature == 0.0f; }
};

}  // namespace pagellm
