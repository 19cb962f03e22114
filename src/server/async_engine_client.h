// EngineClient over the real AsyncEngine, its tokenizer and a chat template.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "server/engine_client.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_config.h"

namespace pagellm::server {

class AsyncEngineClient : public EngineClient {
 public:
  // `chat` holds the template (the model folder's, or --chat-template's) and special tokens; with no
  // template, chat requests get a 400 naming the flag.
  AsyncEngineClient(AsyncEngine& engine, tok::ChatTemplateConfig chat);
  ~AsyncEngineClient() override;

  void add_request(const std::string& request_id, const PromptInput& prompt, const SamplingParams& params,
                   OutputCallback on_output, const RequestOptions& options) override;
  void abort_request(const std::string& request_id) override;
  bool healthy() const override;
  EngineStats take_stats() override;
  const ModelInfo& model_info() const override;
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override;
  std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt,
                          const nlohmann::json& extra_context) const override;
  void shutdown(double timeout_s) override;

 private:
  AsyncEngine& engine_;
  tok::ChatTemplateConfig chat_;
  std::unique_ptr<tok::ChatTemplate> template_;  // null when the model has none
};

}  // namespace pagellm::server
