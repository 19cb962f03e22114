// ApiServer's request preparation: OpenAI JSON → validated, tokenized PreparedRequest, and the
// /tokenize and /detokenize endpoints that share the same tokenization.
#include "server/routes.h"

namespace pagellm::server {

using nlohmann::json;

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
  check_token_ids(r.params.stop_token_ids, vocab, "stop_token_ids");
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

PreparedRequest ApiServer::prepare_chat(const json& body) {
  ChatRequest r = parse_chat_request(body, config_.limits, config_.sampling_defaults);
  check_model(r.model);
  check_token_ids(r.params.stop_token_ids, engine_.vocab_size(), "stop_token_ids");
  PreparedRequest p;
  p.kind = ApiKind::kChat;
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
    ids = engine_.encode(render_chat(*r.messages, r.add_generation_prompt, false, json::object()), r.add_special_tokens);
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
