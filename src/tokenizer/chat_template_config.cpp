#include "tokenizer/chat_template_config.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace pagellm::tok {

namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kNotFound, path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token is a string, {"content": "..."} (AddedToken), or null.
std::optional<std::string> special_token(const nlohmann::ordered_json& config, const char* key,
                                         const fs::path& path) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  invalid_argument(path.string() + ": field '" + key + "' must be a string or {\"content\": string}");
}

void read_template_field(const nlohmann::ordered_json& field, const fs::path& path, ChatTemplateConfig& out) {
  if (field.is_null()) return;
  if (field.is_string()) {
    out.chat_template = field.get<std::string>();
    out.template_origin = path.string();
    return;
  }
  if (!field.is_array()) invalid_argument(path.string() + ": field 'chat_template' must be a string or a list");
  for (const auto& entry : field) {
    const auto name = entry.find("name");
    const auto text = entry.find("template");
    if (!entry.is_object() || name == entry.end() || text == entry.end() || !name->is_string() ||
        !text->is_string()) {
      invalid_argument(path.string() + ": 'chat_template' list entries must be {\"name\": string, \"template\": string}");
    }
    out.named_templates[name->get<std::string>()] = text->get<std::string>();
  }
  const auto def = out.named_templates.find("default");
  if (def != out.named_templates.end()) {
    out.chat_template = def->second;
    out.template_origin = path.string() + " (chat_template 'default')";
  }
}

}  // namespace

nlohmann::ordered_json read_json_file(const fs::path& path) {
  const std::string text = read_text(path);
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    invalid_argument(path.string() + ": invalid JSON: " + e.what());
  }
}

ChatTemplateConfig load_chat_template_config(const fs::path& dir) {
  ChatTemplateConfig out;
  const fs::path config_path = dir / "tokenizer_config.json";
  const fs::path jinja_path = dir / "chat_template.jinja";
  const fs::path json_path = dir / "chat_template.json";
  const bool has_config = fs::is_regular_file(config_path);
  if (!has_config && !fs::is_regular_file(jinja_path) && !fs::is_regular_file(json_path)) {
    throw_error(ErrorKind::kNotFound, dir.string() + ": no tokenizer_config.json or chat template file");
  }
  if (has_config) {
    const nlohmann::ordered_json config = read_json_file(config_path);
    if (!config.is_object()) invalid_argument(config_path.string() + ": expected a JSON object");
    out.bos_token = special_token(config, "bos_token", config_path);
    out.eos_token = special_token(config, "eos_token", config_path);
    if (const auto it = config.find("chat_template"); it != config.end()) read_template_field(*it, config_path, out);
  }
  if (out.chat_template.empty() && fs::is_regular_file(jinja_path)) {
    out.chat_template = read_text(jinja_path);
    out.template_origin = jinja_path.string();
  }
  if (out.chat_template.empty() && fs::is_regular_file(json_path)) {
    const nlohmann::ordered_json j = read_json_file(json_path);
    if (j.is_object() && j.contains("chat_template")) read_template_field(j["chat_template"], json_path, out);
  }
  return out;
}

std::string read_chat_template_arg(const std::string& path_or_template) {
  // The error_code form: template text longer than a file name would make the throwing one fail.
  std::error_code ec;
  if (fs::is_regular_file(path_or_template, ec)) return read_text(path_or_template);
  if (path_or_template.find("{{") != std::string::npos || path_or_template.find("{%") != std::string::npos) {
    return path_or_template;
  }
  throw_error(ErrorKind::kNotFound, "--chat-template: no such file: " + path_or_template);
}

nlohmann::ordered_json build_chat_context(const ChatTemplateConfig& config, const nlohmann::ordered_json& messages,
                                          const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                          const nlohmann::ordered_json& extra) {
  if (!messages.is_array()) invalid_argument("messages: expected a JSON array of {\"role\", \"content\"} objects");
  if (!tools.is_null() && !tools.is_array()) invalid_argument("tools: expected a JSON array");
  if (!extra.is_object()) invalid_argument("chat_template_kwargs: expected a JSON object");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  if (config.bos_token) context["bos_token"] = *config.bos_token;
  if (config.eos_token) context["eos_token"] = *config.eos_token;
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt") {
      invalid_argument("chat_template_kwargs: '" + it.key() + "' cannot be overridden");
    }
    context[it.key()] = it.value();
  }
  return context;
}

}  // namespace pagellm::tok
