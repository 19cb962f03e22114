// The engine's tokenizer and chat template as one Python object (_pagellm.Tokenizer), wrapped by
// pagellm.tokenizer.Tokenizer with Hugging Face's method names.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <pybind11/pybind11.h>

#include "pagellm/llm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_config.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::python {

namespace py = pybind11;

class TokenizerHandle {
 public:
  // The chat template comes from the engine's tokenizer folder, or from args.chat_template (a file,
  // or the template text) when given, as in `pagellm serve --chat-template`.
  TokenizerHandle(std::shared_ptr<const tok::Tokenizer> tokenizer, const EngineArgs& args);

  const tok::Tokenizer& tokenizer() const { return *tokenizer_; }
  // Renders `messages_json` (a JSON array of messages) with the default template, or with
  // `chat_template` (a file path or template text) when given. Throws ValueError when there is
  // none.
  std::string render_chat(const std::string& messages_json, bool add_generation_prompt,
                          const std::optional<std::string>& chat_template,
                          const std::string& tools_json, const std::string& kwargs_json) const;
  bool has_chat_template() const { return default_template_ != nullptr; }

 private:
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  tok::ChatTemplateConfig config_;
  std::shared_ptr<const tok::ChatTemplate> default_template_;  // null when the folder has none
};

void bind_tokenizer(py::module_& m);

}  // namespace pagellm::python
