// The EngineArgs flags shared by `pagellm generate`, `serve` and `bench` (vLLM's names).
#pragma once

#include <CLI/CLI.hpp>

#include "io/hf_config.h"
#include "pagellm/engine_args.h"
#include "pagellm/sampling_params.h"

namespace pagellm::cli {

// Adds every EngineArgs flag to `app`, writing into `args` (which must outlive parsing).
void add_engine_flags(CLI::App& app, EngineArgs& args);

// Sampling defaults from the model's generation_config.json (temperature, top_p, top_k, min_p,
// repetition_penalty, max_new_tokens), as vLLM applies them; an empty model means none.
SamplingParams default_sampling_params(const EngineArgs& args);
SamplingParams default_sampling_params(const io::GenerationConfig& generation);

}  // namespace pagellm::cli
