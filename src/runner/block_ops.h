// Validation of a step's block operations (swap out, swap in, copy), shared by the CPU and CUDA
// runners: both check every id before moving anything, so a bad list leaves the pools untouched.
#pragma once

#include <cstdint>
#include <string>

#include "engine/scheduler_output.h"

namespace pagellm::runner {

// Throws pagellm::Error(kInternal) "<runner>: ..." naming the first invalid pair: device blocks must
// lie in [0, num_blocks), host blocks in [0, num_swap_blocks).
void check_block_ops(const engine::SchedulerOutput& batch, int64_t num_blocks,
                     int64_t num_swap_blocks, const std::string& runner);

}  // namespace pagellm::runner
