// Builds a model runner from EngineArgs: reads config.json / generation_config.json and the weights
// (safetensors, or random with --load-format dummy), or the built-in demo model when args.model is
// empty. The tokenizer is loaded separately by the engine.
#pragma once

#include <memory>
#include <string>

#include "io/hf_config.h"
#include "pagellm/engine_args.h"
#include "runner/model_runner.h"

namespace pagellm::runner {

struct LoadedModel {
  std::string name;  // folder name, or "demo"
  io::ModelConfig config;
  io::GenerationConfig generation_config;
  std::unique_ptr<ModelRunner> runner;
};

// Throws pagellm::Error (naming the file and the problem) on any malformed input.
LoadedModel load_model(const EngineArgs& args);

// The built-in demo model's config: a tiny Llama over the byte-level demo tokenizer's 258 ids.
io::ModelConfig demo_model_config();

}  // namespace pagellm::runner
