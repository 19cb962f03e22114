// --speculative-config: vLLM's JSON keys, parsed and checked with one-line errors.
#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "pagellm/engine_args.h"

namespace pagellm {

namespace {

constexpr const char* kFlag = "--speculative-config: ";
constexpr const char* kKeys =
    "method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, model, "
    "disable_by_batch_size, adaptive, draft_token_cost";

[[noreturn]] void bad(const std::string& message) { invalid_argument(kFlag + message); }

int int_field(const nlohmann::json& v, const std::string& key) {
  if (!v.is_number_integer()) bad(key + " must be an integer, got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < -1000000 || x > 1000000) bad(key + " is out of range: " + v.dump());
  return static_cast<int>(x);
}

std::string string_field(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string()) bad(key + " must be a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace

SpeculativeConfig SpeculativeConfig::from_json(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) bad("expected a JSON object, got '" + json + "'");
  SpeculativeConfig c;
  bool has_k = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "method") {
      c.method = string_field(value, key);
    } else if (key == "num_speculative_tokens") {
      c.num_speculative_tokens = int_field(value, key);
      has_k = true;
    } else if (key == "prompt_lookup_min") {
      c.prompt_lookup_min = int_field(value, key);
      if (c.prompt_lookup_min < 1) bad("prompt_lookup_min must be >= 1, got " + value.dump());
    } else if (key == "prompt_lookup_max") {
      c.prompt_lookup_max = int_field(value, key);
      if (c.prompt_lookup_max < 1) bad("prompt_lookup_max must be >= 1, got " + value.dump());
    } else if (key == "model") {
      c.model = string_field(value, key);
    } else if (key == "adaptive") {
      if (!value.is_boolean()) bad("adaptive must be true or false, got " + value.dump());
      c.adaptive = value.get<bool>();
    } else if (key == "draft_token_cost") {
      if (!value.is_number()) bad("draft_token_cost must be a number, got " + value.dump());
      c.draft_token_cost = value.get<double>();
    } else if (key == "disable_by_batch_size") {
      c.disable_by_batch_size = int_field(value, key);
      if (c.disable_by_batch_size < 1) bad("disable_by_batch_size must be >= 1, got " + value.dump());
    } else {
      bad("unknown key '" + key + "' (supported: " + kKeys + ")");
    }
  }
  // vLLM's shorthands: "model": "ngram" selects n-gram lookup; a model alone is a draft model.
  if (c.method.empty() && c.model == "ngram") c.model.clear(), c.method = "ngram";
  if (c.method.empty() && !c.model.empty()) c.method = "draft_model";
  if (c.method.empty()) bad("'method' is missing (ngram, draft_model or eagle)");
  if (!has_k) bad("num_speculative_tokens is missing");
  if (c.method == "ngram") {
    // vLLM's defaults: 5 and 5 when neither bound is given, else the given one for both.
    if (c.prompt_lookup_min == 0 && c.prompt_lookup_max == 0)
      c.prompt_lookup_min = c.prompt_lookup_max = 5;
    if (c.prompt_lookup_min == 0) c.prompt_lookup_min = std::min(5, c.prompt_lookup_max);
    if (c.prompt_lookup_max == 0) c.prompt_lookup_max = std::max(5, c.prompt_lookup_min);
  }
  c.validate();
  return c;
}

void SpeculativeConfig::validate() const {
  if (method.empty()) return;
  if (method == "eagle3")
    bad("method eagle3 is not available yet (supported: ngram, draft_model, eagle)");
  if (method != "ngram" && method != "draft_model" && method != "eagle")
    bad("unknown method '" + method + "' (supported: ngram, draft_model, eagle)");
  if (num_speculative_tokens < 1 || num_speculative_tokens > kMaxSpeculativeTokens) {
    bad("num_speculative_tokens must be in [1, " + std::to_string(kMaxSpeculativeTokens) +
        "], got " + std::to_string(num_speculative_tokens));
  }
  if (!(draft_token_cost >= 0 && draft_token_cost < 1))
    bad("draft_token_cost must be in (0, 1), got " + std::to_string(draft_token_cost));
  if (draft_token_cost > 0 && !adaptive)
    bad("draft_token_cost applies with \"adaptive\": true only");
  if (method == "ngram") {
    if (!model.empty()) bad("method ngram takes no model (got '" + model + "')");
    if (prompt_lookup_min < 1 || prompt_lookup_max < 1) {
      bad("prompt_lookup_min and prompt_lookup_max must be >= 1 (got " +
          std::to_string(prompt_lookup_min) + " and " + std::to_string(prompt_lookup_max) + ")");
    }
    if (prompt_lookup_min > prompt_lookup_max) {
      bad("prompt_lookup_min (" + std::to_string(prompt_lookup_min) +
          ") must be <= prompt_lookup_max (" + std::to_string(prompt_lookup_max) + ")");
    }
    if (prompt_lookup_max > 1024)
      bad("prompt_lookup_max must be <= 1024, got " + std::to_string(prompt_lookup_max));
  } else {
    if (model.empty())
      bad("method " + method + " needs \"model\": the " +
          (method == "eagle" ? "EAGLE head's" : "draft model's") + " folder");
    if (prompt_lookup_min != 0 || prompt_lookup_max != 0)
      bad("prompt_lookup_min/max apply to method ngram only");
  }
}

}  // namespace pagellm
