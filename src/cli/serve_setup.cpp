#include "cli/serve_setup.h"

#include <string>

#include "common/error.h"
#include "common/logging.h"
#include "engine/dp_router.h"
#include "runner/model_loader.h"
#include "server/async_engine_client.h"
#include "server/dp_engine_client.h"

namespace pagellm::cli {

tok::ChatTemplateConfig chat_config(const EngineArgs& args) {
  tok::ChatTemplateConfig config;
  try {
    config = tok::load_chat_template_config(args.tokenizer.empty() ? args.model : args.tokenizer);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kNotFound) throw;  // a folder without any template is fine
  }
  if (!args.chat_template.empty()) {
    config.chat_template = tok::read_chat_template_arg(args.chat_template);
    config.template_origin = args.chat_template;
  }
  return config;
}

EngineClients start_engines(const EngineArgs& args, const tok::ChatTemplateConfig& chat) {
  runner::check_data_parallel_devices(args);
  EngineClients e;
  for (int r = 0; r < args.data_parallel_size; ++r)
    e.engines.push_back(std::make_unique<AsyncEngine>(args.for_replica(r)));
  if (e.engines.size() == 1) {
    e.client = std::make_unique<server::AsyncEngineClient>(*e.engines[0], chat);
    return e;
  }
  std::vector<std::unique_ptr<server::EngineClient>> replicas;
  for (const auto& engine : e.engines)
    replicas.push_back(std::make_unique<server::AsyncEngineClient>(*engine, chat));
  engine::RouterConfig config;
  config.block_size = args.block_size;
  log::info("data parallel: " + std::to_string(e.engines.size()) +
            " engine replicas behind one server");
  e.client = std::make_unique<server::DataParallelClient>(std::move(replicas), config);
  return e;
}

}  // namespace pagellm::cli
