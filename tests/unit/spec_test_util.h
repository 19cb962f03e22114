// Helpers of the speculative-decoding tests (spec_decode_test.cpp, spec_eagle_test.cpp): configs
// of each method, the test prompts, runs through LLM, and the checks (identical outputs,
// consistent counters, the sampled law by a two-sample chi-square over many seeds).
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/engine_core.h"
#include "pagellm/llm.h"

namespace pagellm::spec_test {

inline const std::string kModels = std::string(PAGELLM_SHARED_DIR) + "/models/";
inline const std::string kPycode = kModels + "pycode-25M";
inline const std::string kDraft = kModels + "pycode-draft-10M";
inline const std::string kStories = kModels + "stories260K";
// The EAGLE head trained for pycode-25M by tools/train_eagle.py.
inline const std::string kEagle = std::string(PAGELLM_SOURCE_DIR) + "/tests/data/pycode-25M-eagle";

inline EngineArgs base_args(const std::string& model) {
  EngineArgs a;
  a.model = model;
  a.num_threads = 2;
  return a;
}

inline SpeculativeConfig ngram(int k, int min_n, int max_n) {
  SpeculativeConfig c;
  c.method = "ngram";
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = min_n;
  c.prompt_lookup_max = max_n;
  return c;
}

inline SpeculativeConfig eagle(int k) {
  SpeculativeConfig c;
  c.method = "eagle";
  c.num_speculative_tokens = k;
  c.model = kEagle;
  return c;
}

inline SpeculativeConfig draft(int k) {
  SpeculativeConfig c;
  c.method = "draft_model";
  c.num_speculative_tokens = k;
  c.model = kDraft;
  return c;
}

inline SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

inline std::vector<PromptInput> code_prompts() {
  const char* texts[] = {
      "def parse_args(argv):\n",
      "class Config:\n    def __init__(self, path):\n",
      "import os\nimport sys\n\n\ndef main():\n",
      "def read_file(path):\n    with open(path) as f:\n",
      "for i in range(10):\n    if i % 2 == 0:\n",
      "class Node:\n    def __init__(self, value, children=None):\n        self.value = value\n",
      "def test_add():\n    assert add(1, 2) == 3\n\n\ndef test_sub():\n",
      "    def __repr__(self):\n        return",
  };
  std::vector<PromptInput> out;
  for (const char* t : texts) out.push_back(PromptInput::from_text(t));
  return out;
}

inline std::vector<PromptInput> story_prompts(int num) {
  const char* names[] = {"Lily", "Tom", "Sue", "Max", "Ben", "Anna", "Sam", "Mia"};
  const char* things[] = {"a red ball", "a big tree", "a little dog", "the park"};
  std::vector<PromptInput> prompts;
  for (int i = 0; i < num; ++i)
    prompts.push_back(PromptInput::from_text(std::string("Once upon a time, ") + names[i % 8] +
                                             " saw " + things[(i / 8) % 4] +
                                             (i % 3 == 0 ? "." : " and")));
  return prompts;
}

struct SpecRun {
  std::vector<RequestOutput> outputs;
  EngineStats stats;
};

inline SpecRun generate(EngineArgs args, const std::vector<PromptInput>& prompts,
                        const std::vector<SamplingParams>& params) {
  LLM llm(args);
  SpecRun r;
  r.outputs = llm.generate(prompts, params);
  r.stats = llm.engine().take_stats();
  return r;
}

inline void expect_same_outputs(const SpecRun& plain, const SpecRun& spec,
                                bool same_counts = true) {
  ASSERT_EQ(plain.outputs.size(), spec.outputs.size());
  for (size_t i = 0; i < plain.outputs.size(); ++i) {
    const CompletionOutput& a = plain.outputs[i].outputs.at(0);
    const CompletionOutput& b = spec.outputs[i].outputs.at(0);
    EXPECT_EQ(a.token_ids, b.token_ids) << "prompt " << i;
    EXPECT_EQ(a.text, b.text) << "prompt " << i;
    EXPECT_EQ(a.finish_reason, b.finish_reason) << "prompt " << i;
    EXPECT_EQ(a.stop_reason, b.stop_reason) << "prompt " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "prompt " << i;
    for (size_t t = 0; t < a.logprobs.size(); ++t) {
      EXPECT_EQ(a.logprobs[t].token_id, b.logprobs[t].token_id);
      EXPECT_NEAR(a.logprobs[t].logprob, b.logprobs[t].logprob, 1e-5)
          << "prompt " << i << " token " << t;
    }
  }
  if (same_counts) {
    EXPECT_EQ(plain.stats.generation_tokens, spec.stats.generation_tokens);
  }
}

// Counters are consistent: acceptances per position never rise with the position and add up.
inline void expect_consistent_counters(const EngineStats& s, int k) {
  EXPECT_GT(s.spec_num_drafts, 0u);
  EXPECT_GT(s.spec_num_accepted_tokens, 0u) << "nothing accepted: speculation did not work";
  EXPECT_LE(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
  EXPECT_LE(s.spec_num_draft_tokens, s.spec_num_drafts * static_cast<uint64_t>(k));
  EXPECT_LE(s.spec_accepted_per_pos.size(), static_cast<size_t>(k));
  uint64_t sum = 0;
  for (size_t i = 0; i < s.spec_accepted_per_pos.size(); ++i) {
    sum += s.spec_accepted_per_pos[i];
    if (i > 0) {
      EXPECT_LE(s.spec_accepted_per_pos[i], s.spec_accepted_per_pos[i - 1]);
    }
  }
  EXPECT_EQ(sum, s.spec_num_accepted_tokens);
}

// ---- The sampled distribution with speculation equals the one without ----

// Two-sample chi-square of token counts at one position (equal sample sizes): tokens seen fewer
// than 10 times in both runs together are pooled. Returns (statistic, degrees of freedom).
inline std::pair<double, int> two_sample_chi_square(const std::map<int32_t, int>& a,
                                                    const std::map<int32_t, int>& b) {
  std::map<int32_t, std::pair<int, int>> cells;
  for (const auto& [t, n] : a) cells[t].first += n;
  for (const auto& [t, n] : b) cells[t].second += n;
  double stat = 0;
  int df = -1;
  std::pair<int, int> rare{0, 0};
  auto add = [&](int x, int y) {
    stat += double(x - y) * double(x - y) / double(x + y);
    ++df;
  };
  for (const auto& [t, c] : cells) {
    if (c.first + c.second >= 10) {
      add(c.first, c.second);
    } else {
      rare.first += c.first;
      rare.second += c.second;
    }
  }
  if (rare.first + rare.second > 0) add(rare.first, rare.second);
  return {stat, df};
}

// Upper 0.999 quantile of chi-square(df) (Wilson-Hilferty).
inline double chi_square_999(int df) {
  const double d = df, z = 3.0902;
  return d * std::pow(1 - 2 / (9 * d) + z * std::sqrt(2 / (9 * d)), 3);
}

// The token at output positions 1..num_positions-1 over many seeds, with and without speculation.
// `base` gives the sampling parameters but the seed and length.
inline void expect_same_distribution(const std::string& model, const SpeculativeConfig& sc,
                                     const std::string& prompt, const SamplingParams& base,
                                     int num_seeds, int num_positions) {
  std::vector<PromptInput> prompts(static_cast<size_t>(num_seeds), PromptInput::from_text(prompt));
  std::vector<SamplingParams> params;
  for (int s = 0; s < num_seeds; ++s) {
    SamplingParams p = base;
    p.max_tokens = num_positions;
    p.ignore_eos = true;
    p.seed = 1000 + static_cast<uint64_t>(s);
    params.push_back(p);
  }
  const SpecRun plain = generate(base_args(model), prompts, params);
  EngineArgs a = base_args(model);
  a.speculative = sc;
  a.speculative.disable_by_batch_size = num_seeds;  // every seed's sequence speculates
  const SpecRun spec = generate(a, prompts, params);
  EXPECT_GT(spec.stats.spec_num_accepted_tokens, 0u);
  int num_different = 0;
  for (int pos = 1; pos < num_positions; ++pos) {
    std::map<int32_t, int> x, y;
    for (int s = 0; s < num_seeds; ++s) {
      ++x[plain.outputs[size_t(s)].outputs[0].token_ids.at(size_t(pos))];
      ++y[spec.outputs[size_t(s)].outputs[0].token_ids.at(size_t(pos))];
      num_different += plain.outputs[size_t(s)].outputs[0].token_ids[size_t(pos)] !=
                       spec.outputs[size_t(s)].outputs[0].token_ids[size_t(pos)];
    }
    const auto [stat, df] = two_sample_chi_square(x, y);
    if (df > 0) {
      EXPECT_LT(stat, chi_square_999(df)) << sc.method << " position " << pos << " df " << df;
    }
  }
  // The runs draw differently (a test of two identical runs would prove nothing).
  EXPECT_GT(num_different, num_seeds / 4);
}

inline SamplingParams at_temperature(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

// ---- Bad drafts ----

inline std::string load_error(const SpeculativeConfig& sc) {
  EngineArgs a = base_args(kPycode);
  a.speculative = sc;
  try {
    LLM llm(a);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace pagellm::spec_test
