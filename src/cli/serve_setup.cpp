#include "cli/serve_setup.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cli/engine_flags.h"
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

void apply_model_settings(const std::string& served_model_name, const std::string& model_as_given,
                          const EngineArgs& args, const io::GenerationConfig& generation,
                          const server::EngineClient& client, server::ServerConfig& config) {
  config.served_model_name = served_model_name.empty() ? model_as_given : served_model_name;
  if (served_model_name.empty() && !model_as_given.empty())
    config.model_aliases.push_back(client.model_info().name);
  config.pooling = args.default_pooling;
  config.normalize = args.default_normalize;
  config.sampling_defaults = default_sampling_params(generation);
  if (generation.max_new_tokens && *generation.max_new_tokens >= 1)
    config.default_max_tokens = int(std::min<int64_t>(*generation.max_new_tokens, INT32_MAX));
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
