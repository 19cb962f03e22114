// The one interface between the engine and a backend. CPU and CUDA runners implement it; everything
// above (scheduler, KV manager, sampling parameters, server) is shared.
#pragma once

#include <memory>

#include "engine/scheduler_output.h"
#include "io/hf_config.h"

namespace pagellm::runner {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Number of KV blocks the runner allocated (fixed after construction).
  virtual int num_kv_blocks() const = 0;
  // Host blocks available for swapping (0 = swapping disabled).
  virtual int num_swap_blocks() const { return 0; }
  virtual int block_size() const = 0;
  virtual const io::ModelConfig& config() const = 0;

  // Runs the forward pass for every scheduled token, writes their K/V into the cache through the
  // block tables, and samples the next token of each seq with needs_sample.
  virtual engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) = 0;

  // False once the runner can no longer run steps (a parallel group aborted between steps, e.g. a
  // worker process that died while the engine was idle). Safe to call from any thread.
  virtual bool healthy() const { return true; }
};

}  // namespace pagellm::runner
