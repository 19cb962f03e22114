// vLLM's command line on `pagellm serve` (issue 19): the model as a positional argument, flags a
// vLLM launch script carries that mean nothing here (accepted, said once in the log), and flags
// that only vLLM's Python runtime understands (refused, naming the flag and why).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "io/hf_config.h"
#include "pagellm/engine_args.h"
#include "server/routes.h"

namespace pagellm::cli {

struct VllmCompatFlags {
  std::string model_tag;  // `pagellm serve MODEL`
  bool trust_remote_code = false;
  bool disable_log_stats = false;
  bool enable_log_requests = false;
  // Server behaviour flags with vLLM's names and defaults.
  int max_logprobs = 20;
  size_t max_log_len = 4096;
  std::string response_role = "assistant";
  std::string root_path;
  std::string generation_config = "auto";  // auto (the model folder's) | vllm (none) | DIR
  std::string override_generation_config;  // JSON object over the chosen config
  bool return_tokens_as_token_ids = false;
  std::string ssl_certfile, ssl_keyfile;  // HTTPS
  // Chat output parsing: tool calls and reasoning.
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  std::string reasoning_parser;
};

void add_vllm_compat_flags(CLI::App& app, VllmCompatFlags& f);

// Folds the compatibility flags into args: MODEL becomes --model (both given and different: a
// one-line error), --disable-log-stats turns the periodic stats off, and --trust-remote-code is
// logged as a no-op.
void apply_vllm_compat_flags(const VllmCompatFlags& f, EngineArgs& args);

// The server settings of the flags above (checked: one-line errors for bad values).
void apply_vllm_server_flags(const VllmCompatFlags& f, server::ServerConfig& config);

// The generation config the server takes its sampling defaults from: --generation-config auto reads
// MODEL/generation_config.json, vllm none (vLLM's own defaults), DIR that folder's; then
// --override-generation-config's fields replace the ones they name.
io::GenerationConfig resolve_generation_config(const VllmCompatFlags& f, const EngineArgs& args);

}  // namespace pagellm::cli
