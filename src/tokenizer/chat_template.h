// Chat templates: the Jinja subset that real Hugging Face chat templates use (Llama-2, Llama-3,
// Mistral, Qwen3 with tools and thinking). Parsed once at load; an unknown construct is a clear
// pagellm::Error at parse time. Rendering is const and thread-safe.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

class TemplateProgram;

class ChatTemplate {
 public:
  // Throws pagellm::Error(kInvalidArgument, "chat template: <line>:<col>: <problem>").
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // `context` holds the template variables: messages, add_generation_prompt, bos_token, eos_token,
  // tools, ... raise_exception() in the template throws pagellm::Error(kInvalidArgument, message).
  std::string render(const nlohmann::json& context) const;

 private:
  std::unique_ptr<TemplateProgram> program_;
};

}  // namespace pagellm::tok
