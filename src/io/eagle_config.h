// An EAGLE draft head's config.json (speculative decoding, method "eagle"). Heads name their
// architecture LlamaForCausalLM, or after EAGLE (EagleLlamaForCausalLM, LlamaForCausalLMEagle;
// EAGLE-3 heads carry "Eagle3"): their layers are Llama's either way, so the file is read as a
// Llama config.
#pragma once

#include <filesystem>

#include "io/hf_config.h"

namespace pagellm::io {

// Throws pagellm::Error (naming the file) for a malformed file or an unsupported config; sets
// *eagle3 when an architecture names EAGLE-3.
ModelConfig load_eagle_head_config(const std::filesystem::path& dir, bool* eagle3);

}  // namespace pagellm::io
