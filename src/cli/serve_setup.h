// What `pagellm serve` and `pagellm run-batch` both set up before their routes take requests: the
// chat template, and the engines (one per --data-parallel-size replica) behind one client.
#pragma once

#include <memory>
#include <vector>

#include "io/hf_config.h"
#include "pagellm/engine_args.h"
#include "pagellm/llm.h"
#include "server/engine_client.h"
#include "server/routes.h"
#include "tokenizer/chat_template_config.h"

namespace pagellm::cli {

// The folder's template and special tokens, with --chat-template (file or text) taking precedence.
tok::ChatTemplateConfig chat_config(const EngineArgs& args);

struct EngineClients {
  // Declared before the client: the client's destructor stops them before they go.
  std::vector<std::unique_ptr<AsyncEngine>> engines;
  // One engine's client, or with --data-parallel-size N the router over the N replicas' clients.
  std::unique_ptr<server::EngineClient> client;
};

// The routes' settings that come from the model: as vLLM, the API's model name is
// served_model_name, else the model as given (a path or a Hub id), and requests may then also name
// the model folder; the pooler; sampling defaults and the max_tokens cap from the generation
// config.
void apply_model_settings(const std::string& served_model_name, const std::string& model_as_given,
                          const EngineArgs& args, const io::GenerationConfig& generation,
                          const server::EngineClient& client, server::ServerConfig& config);

// Loads the model on every replica (checking their devices first) and makes the client.
EngineClients start_engines(const EngineArgs& args, const tok::ChatTemplateConfig& chat);

}  // namespace pagellm::cli
