// SamplingParams::validate(): vLLM's rules, one check per parameter. Every comparison is written so
// that NaN fails it (e.g. `!(x >= 0)` rather than `x < 0`), because a NaN slipping through would
// silently poison every logit it touches.
#include <cmath>
#include <string>

#include "common/error.h"
#include "pagellm/sampling_params.h"

namespace pagellm {
namespace {

std::string fmt_float(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = std::to_string(value);
  // to_string prints six decimals; trim trailing zeros for readable messages ("-1" not
  // "-1.000000").
  while (text.size() > 1 && text.back() == '0') text.pop_back();
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

[[noreturn]] void reject(const std::string& param, const std::string& expected,
                         const std::string& got) {
  invalid_argument("sampling parameter '" + param + "' must be " + expected + ", got " + got);
}

void check_float_range(const char* param, float value, float lo, float hi, const char* expected) {
  if (!(value >= lo && value <= hi)) reject(param, expected, fmt_float(value));
}

void check_logprobs(const char* param, const std::optional<int>& value) {
  if (value && (*value < 0 || *value > SamplingParams::kMaxLogprobs)) {
    reject(param, "in [0, " + std::to_string(SamplingParams::kMaxLogprobs) + "]",
           std::to_string(*value));
  }
}

void check_counts(const SamplingParams& p) {
  if (p.n < 1) reject("n", ">= 1", std::to_string(p.n));
  if (p.best_of && *p.best_of < p.n) {
    reject("best_of", ">= n (" + std::to_string(p.n) + ")", std::to_string(*p.best_of));
  }
  if (p.max_tokens < 1) reject("max_tokens", ">= 1", std::to_string(p.max_tokens));
  if (p.min_tokens < 0) reject("min_tokens", ">= 0", std::to_string(p.min_tokens));
  if (p.min_tokens > p.max_tokens) {
    reject("min_tokens", "<= max_tokens (" + std::to_string(p.max_tokens) + ")",
           std::to_string(p.min_tokens));
  }
}

void check_distribution(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f) || std::isinf(p.temperature)) {
    reject("temperature", "finite and >= 0", fmt_float(p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) reject("top_p", "in (0, 1]", fmt_float(p.top_p));
  // 0 disables top-k like -1 (vLLM accepts both).
  if (p.top_k < -1)
    reject("top_k", "-1, 0 (disabled) or a positive count", std::to_string(p.top_k));
  check_float_range("min_p", p.min_p, 0.0f, 1.0f, "in [0, 1]");
  check_float_range("presence_penalty", p.presence_penalty, -2.0f, 2.0f, "in [-2, 2]");
  check_float_range("frequency_penalty", p.frequency_penalty, -2.0f, 2.0f, "in [-2, 2]");
  if (!(p.repetition_penalty > 0.0f) || std::isinf(p.repetition_penalty)) {
    reject("repetition_penalty", "finite and > 0", fmt_float(p.repetition_penalty));
  }
}

void check_stops(const SamplingParams& p) {
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) {
      reject("stop", "non-empty strings", "an empty string at index " + std::to_string(i));
    }
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0) reject("stop_token_ids", "non-negative token ids", std::to_string(id));
  }
}

}  // namespace

void SamplingParams::validate() const {
  check_counts(*this);
  check_distribution(*this);
  check_stops(*this);
  check_logprobs("logprobs", logprobs);
  check_logprobs("prompt_logprobs", prompt_logprobs);
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const auto& [id, bias] = logit_bias[i];
    if (id < 0) reject("logit_bias", "non-negative token ids", std::to_string(id));
    for (size_t j = 0; j < i; ++j) {
      if (logit_bias[j].first == id) reject("logit_bias", "distinct token ids", std::to_string(id) + " twice");
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) reject("logit_bias", "biases in [-100, 100]", fmt_float(bias));
  }
  if (allowed_token_ids && allowed_token_ids->empty()) reject("allowed_token_ids", "a non-empty list", "[]");
  for (const std::string& word : bad_words) {
    if (word.empty()) reject("bad_words", "non-empty strings", "an empty string");
  }
  if (structured_outputs && structured_outputs->num_set() != 1) {
    reject("structured_outputs", "exactly one of json, json_object, regex, choice, grammar",
           std::to_string(structured_outputs->num_set()) + " of them");
  }
  // Greedy with n > 1 or best_of > 1 is allowed (vLLM only warns): the samples are identical unless
  // penalties differ, which is the user's business.
}

}  // namespace pagellm
