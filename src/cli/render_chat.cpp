// `pagellm render-chat`: renders a conversation with the model's chat template and prints the prompt
// exactly (no trailing newline added), as the server would feed it to the tokenizer.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "common/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_config.h"

namespace pagellm::cli {
namespace {

int run_render_chat(int argc, char** argv) {
  CLI::App app{"Render a conversation with a chat template and print the prompt"};
  std::string tokenizer_dir;
  std::string model_dir;
  std::string messages_path;
  std::string tools_path;
  std::string template_arg;
  std::string kwargs_text;
  bool add_generation_prompt = false;
  app.add_option("--tokenizer", tokenizer_dir, "folder with tokenizer_config.json (default: --model)");
  app.add_option("--model", model_dir, "model folder (used as --tokenizer when that is not given)");
  app.add_option("--messages", messages_path,
                 "JSON file: an array of messages, or an object with \"messages\" (and optionally \"tools\")")
      ->required();
  app.add_option("--tools", tools_path, "JSON file with an array of tool definitions");
  app.add_option("--chat-template", template_arg, "template file (or template text) overriding the folder's");
  app.add_option("--chat-template-kwargs", kwargs_text,
                 "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  app.add_flag("--add-generation-prompt", add_generation_prompt, "end with the assistant turn header");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const std::string dir = tokenizer_dir.empty() ? model_dir : tokenizer_dir;
  if (dir.empty() && template_arg.empty()) invalid_argument("render-chat: pass --tokenizer DIR, --model DIR or --chat-template FILE");
  tok::ChatTemplateConfig config;
  if (!dir.empty()) config = tok::load_chat_template_config(dir);
  if (!template_arg.empty()) {
    config.chat_template = tok::read_chat_template_arg(template_arg);
    config.template_origin = template_arg;
  }
  if (config.chat_template.empty()) {
    throw_error(ErrorKind::kNotFound, dir + ": the tokenizer has no chat template (pass --chat-template FILE)");
  }

  nlohmann::ordered_json messages = tok::read_json_file(messages_path);
  nlohmann::ordered_json tools = nullptr;
  if (messages.is_object()) {
    if (messages.contains("tools")) tools = messages["tools"];
    if (!messages.contains("messages")) invalid_argument(messages_path + ": expected an array or an object with \"messages\"");
    nlohmann::ordered_json inner = messages["messages"];
    messages = std::move(inner);
  }
  if (!tools_path.empty()) tools = tok::read_json_file(tools_path);
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (!kwargs_text.empty()) {
    try {
      kwargs = nlohmann::ordered_json::parse(kwargs_text);
    } catch (const nlohmann::json::exception& e) {
      invalid_argument(std::string("--chat-template-kwargs: invalid JSON: ") + e.what());
    }
  }

  const tok::ChatTemplate chat_template(config.chat_template);
  const std::string prompt =
      chat_template.render(tok::build_chat_context(config, messages, tools, add_generation_prompt, kwargs));
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

PAGELLM_COMMAND("render-chat", "render a conversation with the model's chat template", run_render_chat);

}  // namespace pagellm::cli
