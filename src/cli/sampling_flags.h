// Sampling flags of `pagellm generate` and `bench`, and the per-line fields of a prompts JSONL file.
// Flags override the model's generation_config defaults only when given.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "pagellm/sampling_params.h"

namespace pagellm::cli {

class SamplingFlags {
 public:
  void add_to(CLI::App& app);
  // Writes every flag the user gave into `params`.
  void apply(SamplingParams& params) const;

 private:
  SamplingParams values_;
  std::vector<std::pair<CLI::Option*, void (*)(const SamplingParams&, SamplingParams&)>> options_;
};

// Overrides `params` with the sampling fields of a JSON object (max_tokens, temperature, top_p, top_k,
// min_p, seed, n, best_of, stop, stop_token_ids, ignore_eos, min_tokens, logprobs, prompt_logprobs,
// presence/frequency/repetition_penalty, include_stop_str_in_output, skip_special_tokens). `where`
// names the source (file:line) in errors.
void apply_sampling_json(const nlohmann::json& obj, SamplingParams& params, const std::string& where);

}  // namespace pagellm::cli
