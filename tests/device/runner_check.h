// Shared by cuda_runner_check's translation units (runner_check.cpp, runner_check_spec.cpp).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "io/hf_config.h"
#include "runner/model_runner.h"

namespace pagellm {

inline int g_failed = 0;  // checks failed so far

inline void report(bool ok, const std::string& what) {
  std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++g_failed;
}

// Llama-3.1-8B's configuration (dummy weights: the performance checks).
io::ModelConfig llama31_8b();

// runner_check_spec.cpp: speculative decoding on the CUDA runner.
// Verification of drafts through execute() against the CPU runner's (uniform: every seq the same
// number of drafts, a graph shape).
void check_spec_verify(runner::ModelRunner& cpu, runner::ModelRunner& gpu, bool uniform,
                       const std::string& mode);
// The GPU's greedy chains (the draft model's rounds) against the CPU runner's and its own
// step-by-step chain.
void check_greedy_chains(runner::ModelRunner& cpu, runner::ModelRunner& gpu,
                         const std::string& mode);
// The cost of a verification step against a decode step, Llama-3.1-8B shapes at batch 1.
void perf_spec_cost();
// A draft-model round's costs at batch 1 (the configs of two model folders, dummy weights): the
// target's decode and 1 + 4 verification steps, the draft's decode step and its 4-step greedy
// chain, chained on the GPU and step by step. target "-": the draft alone.
void perf_draft_cost(const std::filesystem::path& target, const std::filesystem::path& draft);

}  // namespace pagellm
