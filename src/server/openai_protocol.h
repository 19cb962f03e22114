// OpenAI-compatible request parsing and validation for /v1/completions, /v1/chat/completions,
// /tokenize and /detokenize. Everything here works on untrusted bytes: every malformed input becomes
// an ApiError carrying the HTTP status and OpenAI's error object fields; nothing here throws anything
// else (except std::bad_alloc).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "pagellm/llm.h"

namespace pagellm::server {

// An error answered to the client as {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::string param = {},
           std::string code = {})
      : std::runtime_error(std::move(message)),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // offending field, empty = null
  std::string code;   // machine-readable code, empty = null
};

// 400 invalid_request_error naming `param`.
[[noreturn]] void throw_bad_request(const std::string& message, const std::string& param = {});
// Maps a pagellm::Error raised by the engine or tokenizer to the status a client should see: a
// client's mistake is 4xx, only kInternal is 500.
ApiError api_error_from(const Error& error);
// {"error": {...}} for an ApiError.
nlohmann::json error_body(const ApiError& error);
// JSON text with invalid UTF-8 replaced (user text may reach error messages), compact.
std::string dump_json(const nlohmann::json& value);

struct ProtocolLimits {
  int max_json_depth = 64;      // nesting of arrays/objects in a request body
  int max_n = 128;              // n and best_of
  int max_prompts = 1024;       // entries of a batched completion prompt
  int max_stop = 16;            // stop strings and stop_token_ids each
  size_t max_stop_bytes = 1024; // per stop string
  int max_messages = 4096;
  int max_logit_bias = 1024;    // logit_bias entries (OpenAI allows 300)
  int max_bad_words = 128;
  int max_logprobs = SamplingParams::kMaxLogprobs;  // --max-logprobs (at most kMaxLogprobs)
};

// Parses a request body into JSON: rejects deep nesting before parsing (so the parser's recursion
// and memory stay bounded), invalid JSON and invalid UTF-8 (400), and non-objects (400).
nlohmann::json parse_json_object(std::string_view body, const ProtocolLimits& limits);

// Fields shared by completions and chat completions.
struct GenerationRequest {
  std::string model;               // empty = the served model
  SamplingParams params;           // max_tokens filled in by the router when !max_tokens_set
  bool max_tokens_set = false;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool continuous_usage = false;   // stream_options.continuous_usage_stats
  RequestOptions options;          // priority
  std::string user;
};

struct CompletionRequest : GenerationRequest {
  std::vector<PromptInput> prompts;  // text or token ids, one engine request each
  bool echo = false;
  bool add_special_tokens = true;    // BOS for text prompts
  std::optional<int> logprobs;       // top-N per token (0..20)
};

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": ...}}.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatRequest : GenerationRequest {
  // Normalised messages: each {"role", "content": string|null, ...other fields kept for the template}.
  nlohmann::json messages;
  bool logprobs = false;
  int top_logprobs = 0;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;     // the template usually adds BOS itself
  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs (+ "tools")
  // Tools: each {"type": "function", "function": {"name", "description"?, "parameters"?}}, checked.
  nlohmann::json tools = nlohmann::json::array();
  ToolChoice tool_choice = ToolChoice::kNone;  // default: auto with tools, none without (OpenAI)
  std::string tool_choice_name;                // kNamed: the function, one of the tools
  bool parallel_tool_calls = true;             // false: "required" allows one call
};

// `defaults` supplies the sampling values a request leaves unset (the model's generation_config.json,
// as vLLM applies them); only temperature, top_p, top_k, min_p and repetition_penalty are taken.
CompletionRequest parse_completion_request(const nlohmann::json& body, const ProtocolLimits& limits,
                                           const SamplingParams& defaults = {});
ChatRequest parse_chat_request(const nlohmann::json& body, const ProtocolLimits& limits,
                               const SamplingParams& defaults = {});

// Tools (tool_request.cpp). parse_tools checks 'tools', 'tool_choice' and 'parallel_tool_calls'
// into `r` (and puts the tools into its template kwargs); normalise_tool_calls checks an assistant
// message's tool_calls and turns their JSON-text arguments into objects, as templates read them
// (and its null content into "");
// tool_choice_schema is the JSON schema of the output that tool_choice "required" (an array of
// {"name", "parameters"} calls) or a named function (its parameters) asks for, taken from the raw
// body so that properties keep their declared order.
void parse_tools(const nlohmann::json& body, ChatRequest& r);
void normalise_tool_calls(nlohmann::json& message, const std::string& param);
std::string tool_choice_schema(const ChatRequest& r, std::string_view raw_body);

// POST /tokenize: either a prompt or chat messages.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  std::optional<nlohmann::json> messages;  // normalised as in ChatRequest
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
  bool return_token_strs = false;
  nlohmann::json template_kwargs = nlohmann::json::object();  // chat_template_kwargs (+ "tools")
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const ProtocolLimits& limits);

// POST /detokenize.
struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(const nlohmann::json& body);

// The structured-output constraint of a request body: response_format (json_object, json_schema),
// structured_outputs {json, json_object, regex, choice, grammar} or guided_json / guided_regex /
// guided_choice / guided_grammar. 400 on a malformed field or on two constraints at once.
std::optional<StructuredOutputs> parse_structured_outputs(const nlohmann::json& body);
// nlohmann::json keeps object keys sorted, which would reorder a schema's properties (the output
// follows the declared order): with a JSON schema in params, takes it again from the raw body.
void restore_schema_order(SamplingParams& params, std::string_view raw_body);

// Checks token ids against the vocabulary (400 naming `param`).
void check_token_ids(const std::vector<int32_t>& ids, int32_t vocab_size, const std::string& param);

}  // namespace pagellm::server
