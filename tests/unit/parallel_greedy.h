// Greedy continuations through the offline API with tp x pp ranks of the CPU backend: the run that
// every parallel layout's test compares against one rank's.
#pragma once

#include <string>
#include <vector>

#include "pagellm/llm.h"

namespace pagellm::testing {

// `logprobs` > 0 also returns that many top candidates per step (for the closeness rule).
inline std::vector<RequestOutput> parallel_greedy(const std::string& model, int tp, int pp,
                                                  const std::vector<PromptInput>& prompts,
                                                  int max_tokens, double kv_cache_gib,
                                                  int logprobs = 0) {
  EngineArgs args;
  args.model = model;
  args.tensor_parallel_size = tp;
  args.pipeline_parallel_size = pp;
  args.kv_cache_memory_gib = kv_cache_gib;
  LLM llm(args);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  if (logprobs > 0) p.logprobs = logprobs;
  return llm.generate(prompts, p);
}

}  // namespace pagellm::testing
