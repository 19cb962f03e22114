// What `pagellm serve` and `pagellm run-batch` both set up before their routes take requests: the
// chat template, and the engines (one per --data-parallel-size replica) behind one client.
#pragma once

#include <memory>
#include <vector>

#include "pagellm/engine_args.h"
#include "pagellm/llm.h"
#include "server/engine_client.h"
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

// Loads the model on every replica (checking their devices first) and makes the client.
EngineClients start_engines(const EngineArgs& args, const tok::ChatTemplateConfig& chat);

}  // namespace pagellm::cli
