#include "server/async_engine_client.h"

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::server {

AsyncEngineClient::AsyncEngineClient(AsyncEngine& engine, tok::ChatTemplateConfig chat)
    : engine_(engine), chat_(std::move(chat)) {
  if (!chat_.chat_template.empty()) template_ = std::make_unique<tok::ChatTemplate>(chat_.chat_template);
}

AsyncEngineClient::~AsyncEngineClient() = default;

void AsyncEngineClient::add_request(const std::string& request_id, const PromptInput& prompt,
                                    const SamplingParams& params, OutputCallback on_output,
                                    const RequestOptions& options) {
  engine_.add_request(request_id, prompt, params, std::move(on_output), options);
}

void AsyncEngineClient::abort_request(const std::string& request_id) { engine_.abort_request(request_id); }
bool AsyncEngineClient::healthy() const { return engine_.healthy(); }
EngineStats AsyncEngineClient::take_stats() { return engine_.take_stats(); }
const ModelInfo& AsyncEngineClient::model_info() const { return engine_.model_info(); }

std::vector<int32_t> AsyncEngineClient::encode(std::string_view text, bool add_special_tokens) const {
  return engine_.tokenizer().encode(text, add_special_tokens);
}

std::string AsyncEngineClient::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return engine_.tokenizer().decode(ids, skip_special_tokens);
}

int32_t AsyncEngineClient::vocab_size() const {
  // The model's embedding table may be larger than the tokenizer's vocabulary; ids past the
  // tokenizer cannot be decoded, so the smaller bound is the valid one.
  const int32_t tok = engine_.tokenizer().vocab_size();
  const int32_t model = engine_.model_info().vocab_size;
  return model > 0 ? std::min(tok, model) : tok;
}

std::string AsyncEngineClient::render_chat(const nlohmann::json& messages, bool add_generation_prompt,
                                           const nlohmann::json& extra_context) const {
  if (!template_) {
    throw Error(ErrorKind::kInvalidArgument,
                "this model has no chat template: start the server with --chat-template FILE");
  }
  using ordered = nlohmann::ordered_json;
  ordered extra = ordered::object();
  ordered tools = nullptr;
  if (extra_context.is_object()) {
    for (const auto& [key, value] : extra_context.items()) {
      if (key == "tools") tools = ordered::parse(value.dump());
      else extra[key] = ordered::parse(value.dump());
    }
  }
  const ordered context =
      tok::build_chat_context(chat_, ordered::parse(messages.dump()), tools, add_generation_prompt, extra);
  return template_->render(context);
}

void AsyncEngineClient::shutdown(double timeout_s) { engine_.shutdown(timeout_s); }

}  // namespace pagellm::server
