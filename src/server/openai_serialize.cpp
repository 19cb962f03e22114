#include "server/openai_serialize.h"

#include <cmath>

namespace pagellm::server {

using nlohmann::json;

json finish_reason_json(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return nullptr;
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return nullptr;
}

json stop_reason_json(const std::optional<std::string>& stop_string, const std::optional<int32_t>& stop_token) {
  if (stop_string) return *stop_string;
  if (stop_token) return *stop_token;
  return nullptr;
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  return json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

double clamp_logprob(double logprob) {
  if (std::isnan(logprob)) return -9999.0;
  return std::max(logprob, -9999.0);
}

namespace {

json empty_completion_logprobs() {
  return json{{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
}

json top_map(const TokenLogprobs& t, const TokenText& text) {
  json top = json::object();
  // The chosen token is always listed, as OpenAI does.
  top[text(t.token_id)] = clamp_logprob(t.logprob);
  for (const auto& [id, lp] : t.top) top[text(id)] = clamp_logprob(lp);
  return top;
}

json bytes_of(const std::string& s) {
  json bytes = json::array();
  for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

json completion_logprobs_json(std::span<const TokenLogprobs> tokens, const TokenText& text, size_t& text_offset) {
  json out = empty_completion_logprobs();
  for (const auto& t : tokens) {
    std::string piece = text(t.token_id);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(clamp_logprob(t.logprob));
    out["top_logprobs"].push_back(top_map(t, text));
    out["text_offset"].push_back(text_offset);
    text_offset += piece.size();
  }
  return out;
}

void append_completion_logprobs(json& into, std::span<const std::optional<TokenLogprobs>> tokens,
                                std::span<const int32_t> ids, const TokenText& text, size_t& text_offset) {
  if (into.is_null()) into = empty_completion_logprobs();
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = text(ids[i]);
    into["tokens"].push_back(piece);
    const auto* t = i < tokens.size() && tokens[i] ? &*tokens[i] : nullptr;
    into["token_logprobs"].push_back(t ? json(clamp_logprob(t->logprob)) : json(nullptr));
    into["top_logprobs"].push_back(t ? top_map(*t, text) : json(nullptr));
    into["text_offset"].push_back(text_offset);
    text_offset += piece.size();
  }
}

json chat_logprobs_json(std::span<const TokenLogprobs> tokens, const TokenText& text) {
  json content = json::array();
  for (const auto& t : tokens) {
    std::string piece = text(t.token_id);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      std::string alt = text(id);
      top.push_back({{"token", alt}, {"logprob", clamp_logprob(lp)}, {"bytes", bytes_of(alt)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", clamp_logprob(t.logprob)},
                       {"bytes", bytes_of(piece)},
                       {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}};
}

}  // namespace pagellm::server
