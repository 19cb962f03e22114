// Where an engine step's wall time goes: PAGELLM_PHASE_TIMES=1 sums the time spent in each phase of
// the engine loop (scheduling, mask building, the runner's host work, waiting for the device, the
// outputs) and prints one table to stderr when the process exits. A diagnostic for comparing two
// workloads (a structured-output run against an unconstrained one, say); off by default, when a
// Scope costs one predictable branch.
//
//   { phase::Scope s(phase::kSchedule); scheduler.schedule(); }
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pagellm::phase {

enum Id : int {
  kSchedule,       // EngineCore: drafts proposed, the next batch scheduled
  kMaskStart,      // EngineCore: the allowed-token mask jobs listed and started
  kRunnerSubmit,   // EngineCore: runner->submit
  kRunnerWait,     // EngineCore: runner->wait_next (with a synchronous runner: the whole step)
  kApplyOutput,    // EngineCore: tokens applied to the sequences, grammars advanced, stops checked
  kMakeOutputs,    // EngineCore: RequestOutputs built (detokenization)
  kRunnerPrepare,  // CUDA runner: the step validated and flattened, sampler rows packed
  kRunnerStage,    // CUDA runner: the inputs staged (attention planned) and their upload queued
  kRunnerLaunch,   // CUDA runner: the forward pass queued (a graph launched, or eager kernels)
  kMaskWait,       // CUDA runner: waiting for the mask builder before the sampler's upload
  kSampleUpload,   // CUDA runner: the masks put into the sampler's id lists, those uploaded
  kDeviceWait,     // CUDA runner: waiting for the device (the forward pass and the sampler)
  kMaskBuild,      // mask builder: every mask of a step (wall time, on the builder's threads)
  kNumPhases,
};

// Whether PAGELLM_PHASE_TIMES is set (and not "0"); read once.
bool enabled();
// Adds `ns` nanoseconds and one call to phase `id` (thread safe).
void add(Id id, int64_t ns);
// The table of every phase that ran: calls, total ms, µs per call.
std::string report();

// Times its own lifetime into phase `id` when enabled().
class Scope {
 public:
  explicit Scope(Id id) : id_(enabled() ? id : kNumPhases) {
    if (id_ != kNumPhases) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (id_ != kNumPhases)
      add(id_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now() - start_)
                   .count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Id id_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace pagellm::phase
