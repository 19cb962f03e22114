// Builds a model runner from EngineArgs: reads config.json / generation_config.json and the weights
// (safetensors, or random with --load-format dummy), or the built-in demo model when args.model is
// empty. The tokenizer is loaded separately by the engine.
#pragma once

#include <memory>
#include <optional>
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

// Throws pagellm::Error (naming the file and the problem) on any malformed input. In a multi-process
// group (parallel/launch.h) this is the leader's side: it waits at the rendezvous for the workers.
LoadedModel load_model(const EngineArgs& args);

// The config the engine would serve (config.json or the demo model's, with --quantization and the
// flag checks applied), without loading any weight.
io::ModelConfig served_model_config(const EngineArgs& args);

// In a multi-process group, a process other than the leader runs here instead of building an
// engine: it joins the rendezvous, loads its ranks and executes the leader's steps until the
// leader shuts the group down (returns 0) or goes away (returns 1). Returns nullopt in the leader
// and in single-process runs. Throws pagellm::Error for bad flags or a failed rendezvous.
std::optional<int> run_worker_process(const EngineArgs& args);

// Throws pagellm::Error (kInvalidArgument, one line) when --device cuda has fewer visible GPUs
// than --data-parallel-size x --tensor-parallel-size x --pipeline-parallel-size ranks.
void check_data_parallel_devices(const EngineArgs& args);

// How many batches the runner keeps in flight: --max-batches-in-flight, 0 meaning one per pipeline
// stage, capped at the number of stages.
int batches_in_flight(const EngineArgs& args);

// The built-in demo model's config: a tiny Llama over the byte-level demo tokenizer's 258 ids.
io::ModelConfig demo_model_config();

}  // namespace pagellm::runner
