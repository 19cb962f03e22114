// Rotary inverse frequencies as transformers' rope initialisers compute them, in fp32: the one
// formula of both backends (the CPU model and the CUDA runner's tables). Needs only io's config
// structs, so the GPU kernel tests compile it in directly.
#pragma once

#include <cstdint>
#include <vector>

#include "io/hf_config.h"

namespace pagellm::cpu {

// [head_dim / 2] frequencies for theta and the config's scaling: default, linear, llama3, longrope
// (with the factors scaling.use_long picks).
std::vector<float> rope_inv_freq(const io::RopeScaling& scaling, double theta, int64_t head_dim);

}  // namespace pagellm::cpu
