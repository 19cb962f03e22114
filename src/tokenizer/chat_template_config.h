// Where a model folder keeps its chat template and special tokens, and the variables a chat template
// is rendered with — shared by `pagellm render-chat` and the server's chat endpoint.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

struct ChatTemplateConfig {
  // The default template ("" when the folder has none). Read from tokenizer_config.json's
  // "chat_template" (a string, or a list of {"name", "template"} whose "default" entry is used),
  // else chat_template.jinja, else chat_template.json's "chat_template".
  std::string chat_template;
  std::map<std::string, std::string> named_templates;  // every entry of a list-form chat_template
  std::string template_origin;                         // file the template came from, for messages
  // tokenizer_config.json's special tokens (strings or {"content": ...}); nullopt when absent/null.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

// Reads `dir` (a tokenizer or model folder). Throws pagellm::Error(kNotFound) when the folder has
// neither tokenizer_config.json nor a chat_template file, kInvalidArgument for malformed fields.
ChatTemplateConfig load_chat_template_config(const std::filesystem::path& dir);

// --chat-template: a file path, or (like vLLM) the template text itself when no such file exists and
// the argument contains Jinja tags. Throws kNotFound otherwise.
std::string read_chat_template_arg(const std::string& path_or_template);

// The render context transformers builds in apply_chat_template: messages, tools (null when none),
// add_generation_prompt, bos_token/eos_token when the config has them, then `extra`
// (chat_template_kwargs such as enable_thinking), which may not override the first three.
nlohmann::ordered_json build_chat_context(const ChatTemplateConfig& config,
                                          const nlohmann::ordered_json& messages,
                                          const nlohmann::ordered_json& tools,
                                          bool add_generation_prompt,
                                          const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// Reads a JSON file (messages, tools, ...) keeping key order; errors name the file.
nlohmann::ordered_json read_json_file(const std::filesystem::path& path);

}  // namespace pagellm::tok
