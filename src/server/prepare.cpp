// ApiServer's request preparation: OpenAI JSON → validated, tokenized PreparedRequest, and the
// /tokenize and /detokenize endpoints that share the same tokenization.
#include "server/routes.h"

#include "server/chat_output.h"

namespace pagellm::server {

using nlohmann::json;

void ApiServer::check_sampling_ids(const SamplingParams& params) const {
  const int32_t vocab = engine_.vocab_size();
  check_token_ids(params.stop_token_ids, vocab, "stop_token_ids");
  for (const auto& [id, bias] : params.logit_bias) check_token_ids({id}, vocab, "logit_bias");
  if (params.allowed_token_ids) check_token_ids(*params.allowed_token_ids, vocab, "allowed_token_ids");
}

void ApiServer::fit_context(PreparedRequest& prepared, bool max_tokens_set, const char* prompt_param) const {
  const int64_t max_len = engine_.model_info().max_model_len;
  SamplingParams& params = prepared.params;
  int64_t longest = 0;
  for (const auto& p : prepared.prompts) {
    if (p.ids.empty()) throw_bad_request("the prompt is empty after tokenization", prompt_param);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.ids.size()));
  }
  if (max_len <= 0) return;
  const int64_t wanted = max_tokens_set ? params.max_tokens : 1;
  if (longest + wanted > max_len) {
    const char* where = prepared.kind == ApiKind::kChat ? "messages" : "prompt";
    throw ApiError(400,
                   "this model's maximum context length is " + std::to_string(max_len) + " tokens, but " +
                       std::to_string(longest + wanted) + " were requested (" + std::to_string(longest) + " in the " +
                       where + ", " + std::to_string(wanted) + " in the completion); shorten the " + where +
                       " or lower max_tokens",
                   "invalid_request_error", max_tokens_set ? "max_tokens" : prompt_param, "context_length_exceeded");
  }
  if (!max_tokens_set) {
    // As vLLM does: without max_tokens a completion may fill the rest of the context, or up to
    // generation_config's max_new_tokens when that is smaller.
    params.max_tokens = static_cast<int>(max_len - longest);
    if (config_.default_max_tokens && *config_.default_max_tokens < params.max_tokens)
      params.max_tokens = *config_.default_max_tokens;
    if (params.min_tokens > params.max_tokens) {
      throw_bad_request("'min_tokens' (" + std::to_string(params.min_tokens) + ") exceeds the " +
                            std::to_string(params.max_tokens) + " tokens left in the context",
                        "min_tokens");
    }
  }
}

PreparedRequest ApiServer::prepare_completion(const json& body) {
  CompletionRequest r = parse_completion_request(body, config_.limits, config_.sampling_defaults);
  check_model(r.model);
  const int32_t vocab = engine_.vocab_size();
  check_sampling_ids(r.params);
  PreparedRequest p;
  p.kind = ApiKind::kCompletion;
  for (auto& prompt : r.prompts) {
    PreparedRequest::Prompt out;
    if (!prompt.token_ids.empty()) {
      check_token_ids(prompt.token_ids, vocab, "prompt");
      out.ids = std::move(prompt.token_ids);
      if (r.echo || config_.log_prompts) out.text = engine_.decode(out.ids, /*skip_special_tokens=*/false);
    } else {
      out.ids = engine_.encode(prompt.text, r.add_special_tokens);
      out.text = std::move(prompt.text);
    }
    p.prompts.push_back(std::move(out));
  }
  p.params = r.params;
  p.options = r.options;
  p.stream = r.stream;
  p.include_usage = r.include_usage;
  p.continuous_usage = r.continuous_usage;
  p.echo = r.echo;
  p.logprobs = r.logprobs.has_value();
  fit_context(p, r.max_tokens_set, "prompt");
  return p;
}

std::string ApiServer::render_chat(const json& messages, bool add_generation_prompt, bool continue_final_message,
                                   const json& template_kwargs) const {
  std::string text = engine_.render_chat(messages, add_generation_prompt, template_kwargs);
  if (!continue_final_message) return text;
  // Continue the last (assistant) message: cut the rendering right after its content, dropping the
  // end-of-turn markup the template appended.
  const json& last = messages.back();
  const std::string content = last["content"].is_string() ? last["content"].get<std::string>() : std::string();
  const size_t at = content.empty() ? std::string::npos : text.rfind(content);
  if (at == std::string::npos) {
    throw_bad_request("'continue_final_message': the final message's content was not found in the rendered chat",
                      "continue_final_message");
  }
  text.resize(at + content.size());
  return text;
}

// How the generated text becomes a message: the reasoning split (--reasoning-parser) and the tool
// calls tool_choice asks for. "required" and a named function constrain the output to the tools'
// JSON schemas; "auto" needs --enable-auto-tool-choice and a --tool-call-parser (as in vLLM).
ChatOutputConfig ApiServer::chat_output_config(const ChatRequest& r, std::string_view raw_body,
                                               SamplingParams& params) const {
  ChatOutputConfig c;
  if (!config_.reasoning_parser.empty()) c.reasoning = make_reasoning_parser(config_.reasoning_parser);
  std::shared_ptr<const ToolCallParser> parser;
  if (!config_.tool_call_parser.empty()) parser = make_tool_call_parser(config_.tool_call_parser);
  c.short_ids = parser && parser->short_ids();
  switch (r.tool_choice) {
    case ToolChoice::kNone:
      break;
    case ToolChoice::kAuto:
      if (!config_.enable_auto_tool_choice || !parser) {
        throw_bad_request("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set",
                          "tool_choice");
      }
      c.tool_mode = ToolMode::kAuto;
      c.tool_parser = parser;
      // Its markers are special tokens that the text must keep.
      if (parser->needs_special_tokens()) params.skip_special_tokens = false;
      break;
    case ToolChoice::kRequired:
    case ToolChoice::kNamed:
      if (params.structured_outputs) {
        throw_bad_request("tool_choice \"required\" or a named function cannot be combined with another structured "
                          "output constraint (response_format, structured_outputs, guided_*)",
                          "tool_choice");
      }
      params.structured_outputs = StructuredOutputs{};
      params.structured_outputs->json = tool_choice_schema(r, raw_body);
      c.tool_mode = r.tool_choice == ToolChoice::kRequired ? ToolMode::kRequired : ToolMode::kNamed;
      if (c.tool_mode == ToolMode::kRequired) c.tool_parser = make_json_array_tool_parser();
      c.named_function = r.tool_choice_name;
      break;
  }
  if (c.reasoning && c.reasoning->implicit_start() && params.structured_outputs) c.reasoning = nullptr;
  return c;
}

PreparedRequest ApiServer::prepare_chat(const json& body, std::string_view raw_body) {
  ChatRequest r = parse_chat_request(body, config_.limits, config_.sampling_defaults);
  check_model(r.model);
  check_sampling_ids(r.params);
  PreparedRequest p;
  p.kind = ApiKind::kChat;
  p.chat_output = chat_output_config(r, raw_body, r.params);
  PreparedRequest::Prompt prompt;
  prompt.text = render_chat(r.messages, r.add_generation_prompt, r.continue_final_message, r.template_kwargs);
  prompt.ids = engine_.encode(prompt.text, r.add_special_tokens);
  p.prompts.push_back(std::move(prompt));
  p.params = r.params;
  p.options = r.options;
  p.stream = r.stream;
  p.include_usage = r.include_usage;
  p.continuous_usage = r.continuous_usage;
  p.logprobs = r.logprobs;
  fit_context(p, r.max_tokens_set, "messages");
  return p;
}

json ApiServer::tokenize(const json& body) {
  TokenizeRequest r = parse_tokenize_request(body, config_.limits);
  check_model(r.model);
  std::vector<int32_t> ids;
  if (r.messages) {
    ids = engine_.encode(render_chat(*r.messages, r.add_generation_prompt, false, r.template_kwargs),
                         r.add_special_tokens);
  } else {
    ids = engine_.encode(*r.prompt, r.add_special_tokens);
  }
  json out = {{"count", ids.size()}, {"max_model_len", engine_.model_info().max_model_len}, {"tokens", ids}};
  if (r.return_token_strs) {
    json strs = json::array();
    for (int32_t id : ids) strs.push_back(token_text(id));
    out["token_strs"] = std::move(strs);
  }
  return out;
}

json ApiServer::detokenize(const json& body) {
  DetokenizeRequest r = parse_detokenize_request(body);
  check_model(r.model);
  check_token_ids(r.tokens, engine_.vocab_size(), "tokens");
  return json{{"prompt", engine_.decode(r.tokens, /*skip_special_tokens=*/false)}};
}

}  // namespace pagellm::server
