// Building blocks of OpenAI response JSON: finish reasons, usage, and logprobs in the completions
// ({tokens, token_logprobs, top_logprobs, text_offset}) and chat ({content: [{token, logprob, bytes,
// top_logprobs}]}) shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "pagellm/outputs.h"

namespace pagellm::server {

// Text of one token as shown in logprobs (special tokens included).
using TokenText = std::function<std::string(int32_t)>;

// "stop", "length", "abort", "error"; null for kNone.
nlohmann::json finish_reason_json(FinishReason reason);
// vLLM's stop_reason: the stop string or token id that ended the sample, else null.
nlohmann::json stop_reason_json(const std::optional<std::string>& stop_string, const std::optional<int32_t>& stop_token);

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens);

// Logprobs are finite in JSON: -inf (an impossible token) is reported as -9999 as vLLM does.
double clamp_logprob(double logprob);

// Completions logprobs. `text_offset` is the character offset of the first token and advances past
// each token's text.
nlohmann::json completion_logprobs_json(std::span<const TokenLogprobs> tokens, const TokenText& text,
                                        size_t& text_offset);
// Appends to an existing completions logprobs object (for echo: prompt first, then the output).
void append_completion_logprobs(nlohmann::json& into, std::span<const std::optional<TokenLogprobs>> tokens,
                                std::span<const int32_t> ids, const TokenText& text, size_t& text_offset);

// Chat logprobs: {"content": [...]}.
nlohmann::json chat_logprobs_json(std::span<const TokenLogprobs> tokens, const TokenText& text);

}  // namespace pagellm::server
