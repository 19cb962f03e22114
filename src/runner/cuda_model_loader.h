// Building the CUDA runner from EngineArgs (model_loader.cpp dispatches here for --device cuda):
// one GPU, or a tensor/pipeline-parallel group in this process, or this process's share of a
// multi-process group (parallel/launch.h) — the leader's side in load_cuda_model, a worker's in
// run_cuda_worker.
#pragma once

#include <chrono>

#include "io/safetensors.h"
#include "pagellm/engine_args.h"
#include "parallel/launch.h"
#include "runner/model_loader.h"

namespace pagellm::runner {

// CUDA devices this process sees (0 when the driver answers nothing).
int num_visible_gpus();
// Whether GPU 0 has 70+ GiB and is no A100 (vLLM's test for its larger default step budget).
bool large_gpu();

// m: the model as model_loader described it (name, config); fills m.runner and logs the startup.
LoadedModel load_cuda_model(const EngineArgs& args, LoadedModel m, const parallel::LaunchPlan& plan,
                            std::chrono::steady_clock::time_point start);

// An EAGLE head's runner (spec/eagle_proposer.cpp) on the target's GPU, with a KV pool of as many
// tokens as the target's and the target's embedding and LM head (from target_store, or its dummy
// weights when null).
std::unique_ptr<ModelRunner> load_cuda_eagle_head(const EngineArgs& args,
                                                  const io::ModelConfig& head,
                                                  const io::WeightStore& store,
                                                  const ModelRunner& target,
                                                  const io::WeightStore* target_store);

// A worker process of a multi-process group (see run_worker_process); returns its exit code.
int run_cuda_worker(const EngineArgs& args, const LoadedModel& m, const parallel::LaunchPlan& plan);

}  // namespace pagellm::runner
