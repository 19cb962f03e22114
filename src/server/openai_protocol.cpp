#include "server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace pagellm::server {

using nlohmann::json;

void throw_bad_request(const std::string& message, const std::string& param) {
  throw ApiError(400, message, "invalid_request_error", param);
}

ApiError api_error_from(const Error& error) {
  switch (error.kind()) {
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kUnsupported:
      return ApiError(400, error.what(), "invalid_request_error");
    case ErrorKind::kNotFound:
      return ApiError(404, error.what(), "not_found_error");
    case ErrorKind::kResourceExhausted:
      return ApiError(503, error.what(), "server_overloaded");
    case ErrorKind::kInternal:
      break;
  }
  return ApiError(500, error.what(), "internal_error");
}

nlohmann::json error_body(const ApiError& error) {
  json inner = {{"message", error.what()}, {"type", error.type}};
  inner["param"] = error.param.empty() ? json(nullptr) : json(error.param);
  inner["code"] = error.code.empty() ? json(nullptr) : json(error.code);
  return json{{"error", std::move(inner)}};
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// Rejects nesting deeper than `max_depth` in one linear pass, skipping string contents. Runs before
// the real parser so that a body of a million '[' costs O(n) and no recursion.
void check_depth(std::string_view body, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        throw_bad_request("request body nests arrays/objects deeper than " +
                          std::to_string(max_depth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string type_name(const json& v) { return v.type_name(); }

std::optional<bool> get_bool(const json& obj, const char* name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) {
    throw_bad_request(std::string("'") + name + "' must be a boolean, got " + type_name(*v), name);
  }
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const char* name) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    throw_bad_request(std::string("'") + name + "' must be a string, got " + type_name(*v), name);
  }
  return v->get<std::string>();
}

// Integers may arrive as 3 or 3.0 (as pydantic accepts); anything else, or a value outside [lo, hi],
// is a 400 naming the field.
int64_t as_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  double d = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      d = static_cast<double>(u);
      if (u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo) return static_cast<int64_t>(u);
    } else {
      int64_t i = v.get<int64_t>();
      if (i >= lo && i <= hi) return i;
      d = static_cast<double>(i);
    }
  } else if (v.is_number_float()) {
    d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) {
      throw_bad_request("'" + name + "' must be an integer, got " + v.dump(), name);
    }
    // Below 2^63: a double of 2^63 compares equal to INT64_MAX but does not convert to int64.
    if (d >= static_cast<double>(lo) && d <= static_cast<double>(hi) && d < 9223372036854775808.0)
      return static_cast<int64_t>(d);
  } else {
    throw_bad_request("'" + name + "' must be an integer, got " + type_name(v), name);
  }
  throw_bad_request("'" + name + "' must be between " + std::to_string(lo) + " and " +
                        std::to_string(hi) + ", got " + v.dump(),
                    name);
}

std::optional<int64_t> get_int(const json& obj, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  return as_int(*v, name, lo, hi);
}

// A number in [lo, hi] (or (lo, hi] when lo_open).
std::optional<double> get_number(const json& obj, const char* name, double lo, double hi,
                                 bool lo_open = false) {
  const json* v = field(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) {
    throw_bad_request(std::string("'") + name + "' must be a number, got " + type_name(*v), name);
  }
  double d = v->get<double>();
  bool ok = std::isfinite(d) && (lo_open ? d > lo : d >= lo) && d <= hi;
  if (!ok) {
    auto fmt = [](double x) {
      std::string s = json(x).dump();
      return s;
    };
    throw_bad_request(std::string("'") + name + "' must be " + (lo_open ? "> " : ">= ") + fmt(lo) +
                          " and <= " + fmt(hi) + ", got " + v->dump(),
                      name);
  }
  return d;
}

std::vector<int32_t> as_token_ids(const json& arr, const std::string& name) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const json& v : arr) {
    ids.push_back(static_cast<int32_t>(as_int(v, name, 0, std::numeric_limits<int32_t>::max())));
  }
  return ids;
}

void parse_stop(const json& body, SamplingParams& p, const ProtocolLimits& limits) {
  if (const json* v = field(body, "stop")) {
    if (v->is_string()) {
      p.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (static_cast<int>(v->size()) > limits.max_stop) {
        throw_bad_request("'stop' may hold at most " + std::to_string(limits.max_stop) + " strings", "stop");
      }
      for (const json& s : *v) {
        if (!s.is_string()) throw_bad_request("'stop' must be a string or a list of strings", "stop");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      throw_bad_request("'stop' must be a string or a list of strings, got " + type_name(*v), "stop");
    }
    for (const auto& s : p.stop) {
      if (s.empty()) throw_bad_request("'stop' strings must not be empty", "stop");
      if (s.size() > limits.max_stop_bytes) {
        throw_bad_request("'stop' strings must be at most " + std::to_string(limits.max_stop_bytes) + " bytes", "stop");
      }
    }
  }
  if (const json* v = field(body, "stop_token_ids")) {
    if (!v->is_array()) throw_bad_request("'stop_token_ids' must be a list of integers", "stop_token_ids");
    if (static_cast<int>(v->size()) > limits.max_stop) {
      throw_bad_request("'stop_token_ids' may hold at most " + std::to_string(limits.max_stop) + " ids",
                        "stop_token_ids");
    }
    p.stop_token_ids = as_token_ids(*v, "stop_token_ids");
  }
}

// logit_bias ({"token id": bias}), allowed_token_ids and bad_words. Token ids are checked against
// the vocabulary later (check_token_ids), where its size is known.
void parse_token_controls(const json& body, SamplingParams& p, const ProtocolLimits& limits) {
  if (const json* v = field(body, "logit_bias")) {
    if (!v->is_object()) throw_bad_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
    if (static_cast<int>(v->size()) > limits.max_logit_bias) {
      throw_bad_request("'logit_bias' may hold at most " + std::to_string(limits.max_logit_bias) + " tokens",
                        "logit_bias");
    }
    for (const auto& [key, bias] : v->items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(key, &used);
        if (used != key.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        throw_bad_request("'logit_bias' keys must be token ids, got '" + key + "'", "logit_bias");
      }
      if (!bias.is_number() || !(bias.get<double>() >= -100.0 && bias.get<double>() <= 100.0)) {
        throw_bad_request("'logit_bias' values must be numbers in [-100, 100], got " + bias.dump() +
                              " for token " + key,
                          "logit_bias");
      }
      // "5" and "05" name one token: it gets one entry.
      const auto same = std::find_if(p.logit_bias.begin(), p.logit_bias.end(),
                                     [id](const auto& e) { return e.first == static_cast<int32_t>(id); });
      if (same != p.logit_bias.end()) p.logit_bias.erase(same);
      p.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias.get<double>()));
    }
  }
  if (const json* v = field(body, "allowed_token_ids")) {
    if (!v->is_array() || v->empty()) {
      throw_bad_request("'allowed_token_ids' must be a non-empty list of token ids", "allowed_token_ids");
    }
    p.allowed_token_ids = as_token_ids(*v, "allowed_token_ids");
  }
  if (const json* v = field(body, "bad_words")) {
    if (!v->is_array()) throw_bad_request("'bad_words' must be a list of strings", "bad_words");
    if (static_cast<int>(v->size()) > limits.max_bad_words) {
      throw_bad_request("'bad_words' may hold at most " + std::to_string(limits.max_bad_words) + " words",
                        "bad_words");
    }
    for (const json& w : *v) {
      if (!w.is_string() || w.get<std::string>().empty() || w.get<std::string>().size() > limits.max_stop_bytes) {
        throw_bad_request("'bad_words' entries must be non-empty strings of at most " +
                              std::to_string(limits.max_stop_bytes) + " bytes",
                          "bad_words");
      }
      p.bad_words.push_back(w.get<std::string>());
    }
  }
}

// Sampling fields common to both endpoints.
void parse_sampling(const json& body, GenerationRequest& r, const ProtocolLimits& limits,
                    const SamplingParams& defaults) {
  SamplingParams& p = r.params;
  p.temperature = defaults.temperature;
  p.top_p = defaults.top_p;
  p.top_k = defaults.top_k;
  p.min_p = defaults.min_p;
  p.repetition_penalty = defaults.repetition_penalty;
  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  auto max_tokens = get_int(body, "max_tokens", 1, kMaxTokens);
  if (auto v = get_int(body, "max_completion_tokens", 1, kMaxTokens)) max_tokens = v;
  if (max_tokens) {
    p.max_tokens = static_cast<int>(*max_tokens);
    r.max_tokens_set = true;
  }
  if (auto v = get_int(body, "min_tokens", 0, kMaxTokens)) p.min_tokens = static_cast<int>(*v);
  if (r.max_tokens_set && p.min_tokens > p.max_tokens) {
    throw_bad_request("'min_tokens' (" + std::to_string(p.min_tokens) + ") must not exceed 'max_tokens' (" +
                          std::to_string(p.max_tokens) + ")",
                      "min_tokens");
  }
  if (auto v = get_number(body, "temperature", 0.0, 2.0)) p.temperature = static_cast<float>(*v);
  if (auto v = get_number(body, "top_p", 0.0, 1.0, /*lo_open=*/true)) p.top_p = static_cast<float>(*v);
  if (auto v = get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max())) p.top_k = static_cast<int>(*v);
  if (auto v = get_number(body, "min_p", 0.0, 1.0)) p.min_p = static_cast<float>(*v);
  if (auto v = get_number(body, "presence_penalty", -2.0, 2.0)) p.presence_penalty = static_cast<float>(*v);
  if (auto v = get_number(body, "frequency_penalty", -2.0, 2.0)) p.frequency_penalty = static_cast<float>(*v);
  if (auto v = get_number(body, "repetition_penalty", 0.0, 100.0, true)) p.repetition_penalty = static_cast<float>(*v);
  if (auto v = get_int(body, "n", 1, limits.max_n)) p.n = static_cast<int>(*v);
  if (auto v = get_int(body, "best_of", 1, limits.max_n)) {
    if (*v < p.n) throw_bad_request("'best_of' must be >= 'n'", "best_of");
    if (*v != p.n) p.best_of = static_cast<int>(*v);
  }
  if (const json* v = field(body, "seed")) {
    // OpenAI seeds are signed 64-bit; the engine hashes them as unsigned.
    p.seed = static_cast<uint64_t>(as_int(*v, "seed", std::numeric_limits<int64_t>::min(),
                                          std::numeric_limits<int64_t>::max()));
  }
  parse_stop(body, p, limits);
  p.structured_outputs = parse_structured_outputs(body);
  parse_token_controls(body, p, limits);
  if (auto v = get_bool(body, "ignore_eos")) p.ignore_eos = *v;
  if (auto v = get_bool(body, "include_stop_str_in_output")) p.include_stop_str_in_output = *v;
  if (auto v = get_bool(body, "skip_special_tokens")) p.skip_special_tokens = *v;
  if (auto v = get_int(body, "priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max())) {
    r.options.priority = static_cast<int>(*v);
  }
  if (auto v = get_string(body, "cache_salt")) r.options.cache_salt = *v;
  if (auto v = get_string(body, "user")) r.user = *v;
  if (auto v = get_string(body, "model")) r.model = *v;
  if (auto v = get_bool(body, "stream")) r.stream = *v;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) throw_bad_request("'stream_options' must be an object", "stream_options");
    if (!r.stream) throw_bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (auto v = get_bool(*so, "include_usage")) r.include_usage = *v;
    if (auto v = get_bool(*so, "continuous_usage_stats")) r.continuous_usage = *v;
  }
  if (r.stream && p.best_of && *p.best_of > p.n) {
    throw_bad_request("'best_of' > 'n' is not supported with streaming", "best_of");
  }
}

PromptInput parse_single_prompt(const json& v) {
  if (v.is_string()) return PromptInput::from_text(v.get<std::string>());
  if (!v.is_array()) throw_bad_request("'prompt' must be a string, a list of strings or token ids", "prompt");
  if (v.empty()) throw_bad_request("'prompt' token list must not be empty", "prompt");
  return PromptInput::from_ids(as_token_ids(v, "prompt"));
}

std::vector<PromptInput> parse_prompts(const json& body, const ProtocolLimits& limits) {
  const json* v = field(body, "prompt");
  if (!v) throw_bad_request("'prompt' is required", "prompt");
  if (v->is_string()) return {PromptInput::from_text(v->get<std::string>())};
  if (!v->is_array()) {
    throw_bad_request("'prompt' must be a string, a list of strings or token ids, got " + type_name(*v), "prompt");
  }
  if (v->empty()) throw_bad_request("'prompt' must not be an empty list", "prompt");
  if (static_cast<int>(v->size()) > limits.max_prompts && !(*v)[0].is_number()) {
    throw_bad_request("'prompt' may hold at most " + std::to_string(limits.max_prompts) + " prompts", "prompt");
  }
  const json& first = (*v)[0];
  if (first.is_number()) return {PromptInput::from_ids(as_token_ids(*v, "prompt"))};
  std::vector<PromptInput> prompts;
  for (const json& item : *v) {
    if (!item.is_string() && !item.is_array()) {
      throw_bad_request("'prompt' list entries must be strings or token-id lists", "prompt");
    }
    prompts.push_back(parse_single_prompt(item));
  }
  return prompts;
}

// Content as a string, or a list of {"type": "text", "text": ...} parts (joined with newlines as
// vLLM's "string" content format does). Returns null for a null content.
json normalise_content(const json& content, size_t index) {
  const std::string param = "messages[" + std::to_string(index) + "].content";
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) throw_bad_request("'" + param + "' must be a string or a list of parts", param);
  std::string text;
  bool first = true;
  for (const json& part : content) {
    if (!part.is_object()) throw_bad_request("'" + param + "' parts must be objects", param);
    auto type = get_string(part, "type");
    if (!type) throw_bad_request("'" + param + "' parts need a 'type'", param);
    if (*type != "text") {
      throw_bad_request("'" + param + "' part type '" + *type +
                            "' is not supported: this server takes text content parts only",
                        param);
    }
    auto t = get_string(part, "text");
    if (!t) throw_bad_request("'" + param + "' text parts need a string 'text'", param);
    if (!first) text += "\n";
    text += *t;
    first = false;
  }
  return text;
}

json parse_messages(const json& body, const ProtocolLimits& limits) {
  const json* v = field(body, "messages");
  if (!v) throw_bad_request("'messages' is required", "messages");
  if (!v->is_array()) throw_bad_request("'messages' must be a list, got " + type_name(*v), "messages");
  if (v->empty()) throw_bad_request("'messages' must not be empty", "messages");
  if (static_cast<int>(v->size()) > limits.max_messages) {
    throw_bad_request("'messages' may hold at most " + std::to_string(limits.max_messages) + " entries", "messages");
  }
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string prefix = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw_bad_request("'" + prefix + "' must be an object", prefix);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      throw_bad_request("'" + prefix + ".role' must be a string", prefix + ".role");
    }
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer") {
      throw_bad_request("'" + prefix + ".role' must be system, user, assistant, tool or developer, got '" + r + "'",
                        prefix + ".role");
    }
    json msg = m;  // keep name, tool_calls, tool_call_id for templates that use them
    auto content = m.find("content");
    if (content == m.end()) {
      if (r != "assistant") throw_bad_request("'" + prefix + ".content' is required", prefix + ".content");
      msg["content"] = nullptr;
    } else {
      msg["content"] = normalise_content(*content, i);
      if (msg["content"].is_null() && r != "assistant") {
        throw_bad_request("'" + prefix + ".content' must not be null", prefix + ".content");
      }
    }
    if (r == "assistant") normalise_tool_calls(msg, prefix);
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

nlohmann::json parse_json_object(std::string_view body, const ProtocolLimits& limits) {
  check_depth(body, limits.max_json_depth);
  json value;
  try {
    value = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    // nlohmann's messages say where parsing failed ("syntax error while parsing value - ...").
    throw_bad_request(std::string("invalid JSON in request body: ") + e.what());
  }
  if (!value.is_object()) throw_bad_request("request body must be a JSON object, got " + type_name(value));
  return value;
}

CompletionRequest parse_completion_request(const json& body, const ProtocolLimits& limits,
                                           const SamplingParams& defaults) {
  CompletionRequest r;
  r.prompts = parse_prompts(body, limits);
  parse_sampling(body, r, limits, defaults);
  if (auto v = get_bool(body, "echo")) r.echo = *v;
  if (auto v = get_bool(body, "add_special_tokens")) r.add_special_tokens = *v;
  if (auto v = get_int(body, "logprobs", 0, limits.max_logprobs)) {
    r.logprobs = static_cast<int>(*v);
    r.params.logprobs = r.logprobs;
    if (r.echo) r.params.prompt_logprobs = r.logprobs;
  }
  if (field(body, "suffix")) throw_bad_request("'suffix' is not supported", "suffix");
  return r;
}

ChatRequest parse_chat_request(const json& body, const ProtocolLimits& limits,
                               const SamplingParams& defaults) {
  ChatRequest r;
  r.messages = parse_messages(body, limits);
  parse_sampling(body, r, limits, defaults);
  if (auto v = get_bool(body, "logprobs")) r.logprobs = *v;
  if (auto v = get_int(body, "top_logprobs", 0, limits.max_logprobs)) {
    if (!r.logprobs) throw_bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    r.top_logprobs = static_cast<int>(*v);
  }
  if (r.logprobs) r.params.logprobs = r.top_logprobs;
  if (auto v = get_bool(body, "add_generation_prompt")) r.add_generation_prompt = *v;
  if (auto v = get_bool(body, "continue_final_message")) r.continue_final_message = *v;
  if (r.add_generation_prompt && r.continue_final_message && field(body, "add_generation_prompt")) {
    throw_bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                      "continue_final_message");
  }
  if (r.continue_final_message) r.add_generation_prompt = false;
  if (auto v = get_bool(body, "add_special_tokens")) r.add_special_tokens = *v;
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw_bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    r.template_kwargs = *kw;
  }
  parse_tools(body, r);
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body, const ProtocolLimits& limits) {
  TokenizeRequest r;
  if (auto v = get_string(body, "model")) r.model = *v;
  if (field(body, "messages")) {
    r.messages = parse_messages(body, limits);
    r.add_special_tokens = false;
  } else if (auto p = get_string(body, "prompt")) {
    r.prompt = *p;
  } else {
    throw_bad_request("'prompt' (a string) or 'messages' is required", "prompt");
  }
  if (auto v = get_bool(body, "add_special_tokens")) r.add_special_tokens = *v;
  if (auto v = get_bool(body, "add_generation_prompt")) r.add_generation_prompt = *v;
  if (auto v = get_bool(body, "return_token_strs")) r.return_token_strs = *v;
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) throw_bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    r.template_kwargs = *kw;
  }
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw_bad_request("'tools' must be a list", "tools");
    r.template_kwargs["tools"] = *tools;
  }
  return r;
}

DetokenizeRequest parse_detokenize_request(const json& body) {
  DetokenizeRequest r;
  if (auto v = get_string(body, "model")) r.model = *v;
  const json* t = field(body, "tokens");
  if (!t || !t->is_array()) throw_bad_request("'tokens' must be a list of integers", "tokens");
  r.tokens = as_token_ids(*t, "tokens");
  return r;
}

void check_token_ids(const std::vector<int32_t>& ids, int32_t vocab_size, const std::string& param) {
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      throw_bad_request("'" + param + "' holds token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ")",
                        param);
    }
  }
}

}  // namespace pagellm::server
