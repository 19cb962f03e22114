// Chat templates: the Jinja subset that real Hugging Face chat templates use (Llama-2, Llama-3,
// Mistral, Qwen3 with tools and thinking). Parsed once at load; an unknown construct is a clear
// pagellm::Error at parse time. Rendering is const and thread-safe, and bounded (steps, bytes,
// recursion) so that a hostile template fails with an error instead of hanging.
//
// Rendering matches @huggingface/jinja (transformers.js) byte for byte on the supported subset,
// including HF's whitespace handling (trim_blocks and lstrip_blocks on) and tojson's layout.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

namespace jinja {
struct Program;
struct RenderLimits;
}  // namespace jinja

class ChatTemplate {
 public:
  // Throws pagellm::Error(kInvalidArgument, "chat template: <line>:<col>: <problem>").
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // `context` holds the template variables: messages, add_generation_prompt, bos_token, eos_token,
  // tools, ... (see build_chat_context in chat_template_config.h). It is an ordered_json so that
  // tool schemas keep their key order in `tojson` (plain nlohmann::json converts implicitly, with
  // its keys sorted). raise_exception(msg) in the template throws
  // pagellm::Error(kInvalidArgument, "chat template: <msg>"); runtime errors name line:col.
  std::string render(const nlohmann::ordered_json& context) const;
  // The same with explicit budgets (the fuzzer uses small ones).
  std::string render(const nlohmann::ordered_json& context, const jinja::RenderLimits& limits) const;

 private:
  std::unique_ptr<jinja::Program> program_;
};

}  // namespace pagellm::tok
