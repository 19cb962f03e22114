// Shared by cuda_runner_check's translation units (runner_check.cpp, runner_check_spec.cpp,
// runner_check_fp8_moe.cpp, runner_check_quantized.cpp).
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "runner/model_runner.h"

namespace pagellm {

inline int g_failed = 0;  // checks failed so far

inline void report(bool ok, const std::string& what) {
  std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++g_failed;
}

// Llama-3.1-8B's configuration (dummy weights: the performance checks).
io::ModelConfig llama31_8b();

// Chunked prefill of three prompts together, then decode steps with all three batched; compares
// GPU logits with the CPU runner's at every sampled row. Weights: the checkpoint `store`, else
// random (seed 7 on both). kv_fp8: both runners with that FP8 KV cache (scales 1.0, or calculated
// from the first batch). num_seqs (1 to 4) sequences decode together: 1 and 2 reach the GEMV
// paths of one and two rows.
void check_tiny_model(const io::ModelConfig& c, const std::string& label, DType dtype,
                      std::optional<DType> kv_fp8 = std::nullopt, bool calculate = false,
                      const io::WeightStore* store = nullptr, int num_seqs = 3);

// runner_check_fp8_moe.cpp: FP8 checkpoints of the tiny Qwen3-MoE and Mixtral references (found
// under MODELS_DIR/hf_reference), GPU against CPU.
void check_fp8_moe(const std::filesystem::path& models_dir);

// runner_check_quantized.cpp: INT and FP8 checkpoints of the tiny MoE, Phi-3 and Gemma references,
// and Phi-3's longrope, GPU against CPU.
void check_quantized_families(const std::filesystem::path& models_dir);

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
