#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/error.h"
#include "pagellm/sampling_params.h"

namespace pagellm {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  const char* name;
  std::function<void(SamplingParams&)> edit;
  const char* param;  // expected in the message; nullptr = valid
};

std::vector<Case> cases() {
  return {
      {"defaults", [](SamplingParams&) {}, nullptr},
      // n / best_of
      {"n_zero", [](SamplingParams& p) { p.n = 0; }, "'n'"},
      {"n_negative", [](SamplingParams& p) { p.n = -3; }, "'n'"},
      {"n_four", [](SamplingParams& p) { p.n = 4; }, nullptr},
      {"best_of_below_n",
       [](SamplingParams& p) {
         p.n = 3;
         p.best_of = 2;
       },
       "'best_of'"},
      {"best_of_zero", [](SamplingParams& p) { p.best_of = 0; }, "'best_of'"},
      {"best_of_equal_n",
       [](SamplingParams& p) {
         p.n = 3;
         p.best_of = 3;
       },
       nullptr},
      {"best_of_above_n",
       [](SamplingParams& p) {
         p.n = 2;
         p.best_of = 5;
       },
       nullptr},
      {"greedy_n_gt_1",
       [](SamplingParams& p) {
         p.temperature = 0;
         p.n = 2;
         p.best_of = 4;
       },
       nullptr},
      // temperature
      {"temperature_negative", [](SamplingParams& p) { p.temperature = -0.5f; }, "'temperature'"},
      {"temperature_nan", [](SamplingParams& p) { p.temperature = kNan; }, "'temperature'"},
      {"temperature_inf", [](SamplingParams& p) { p.temperature = kInf; }, "'temperature'"},
      {"temperature_zero", [](SamplingParams& p) { p.temperature = 0.0f; }, nullptr},
      {"temperature_large", [](SamplingParams& p) { p.temperature = 5.0f; }, nullptr},
      // top_p
      {"top_p_zero", [](SamplingParams& p) { p.top_p = 0.0f; }, "'top_p'"},
      {"top_p_negative", [](SamplingParams& p) { p.top_p = -0.1f; }, "'top_p'"},
      {"top_p_above_one", [](SamplingParams& p) { p.top_p = 1.01f; }, "'top_p'"},
      {"top_p_nan", [](SamplingParams& p) { p.top_p = kNan; }, "'top_p'"},
      {"top_p_one", [](SamplingParams& p) { p.top_p = 1.0f; }, nullptr},
      {"top_p_tiny", [](SamplingParams& p) { p.top_p = 1e-6f; }, nullptr},
      // top_k
      {"top_k_minus_two", [](SamplingParams& p) { p.top_k = -2; }, "'top_k'"},
      {"top_k_minus_one", [](SamplingParams& p) { p.top_k = -1; }, nullptr},
      {"top_k_zero", [](SamplingParams& p) { p.top_k = 0; }, nullptr},
      {"top_k_fifty", [](SamplingParams& p) { p.top_k = 50; }, nullptr},
      // min_p
      {"min_p_negative", [](SamplingParams& p) { p.min_p = -0.01f; }, "'min_p'"},
      {"min_p_above_one", [](SamplingParams& p) { p.min_p = 1.5f; }, "'min_p'"},
      {"min_p_nan", [](SamplingParams& p) { p.min_p = kNan; }, "'min_p'"},
      {"min_p_one", [](SamplingParams& p) { p.min_p = 1.0f; }, nullptr},
      // penalties
      {"presence_low", [](SamplingParams& p) { p.presence_penalty = -2.01f; },
       "'presence_penalty'"},
      {"presence_high", [](SamplingParams& p) { p.presence_penalty = 2.5f; }, "'presence_penalty'"},
      {"presence_nan", [](SamplingParams& p) { p.presence_penalty = kNan; }, "'presence_penalty'"},
      {"presence_bounds", [](SamplingParams& p) { p.presence_penalty = -2.0f; }, nullptr},
      {"frequency_low", [](SamplingParams& p) { p.frequency_penalty = -3.0f; },
       "'frequency_penalty'"},
      {"frequency_high", [](SamplingParams& p) { p.frequency_penalty = 2.01f; },
       "'frequency_penalty'"},
      {"frequency_nan", [](SamplingParams& p) { p.frequency_penalty = kNan; },
       "'frequency_penalty'"},
      {"frequency_bounds", [](SamplingParams& p) { p.frequency_penalty = 2.0f; }, nullptr},
      {"repetition_zero", [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       "'repetition_penalty'"},
      {"repetition_negative", [](SamplingParams& p) { p.repetition_penalty = -1.0f; },
       "'repetition_penalty'"},
      {"repetition_nan", [](SamplingParams& p) { p.repetition_penalty = kNan; },
       "'repetition_penalty'"},
      {"repetition_inf", [](SamplingParams& p) { p.repetition_penalty = kInf; },
       "'repetition_penalty'"},
      {"repetition_small", [](SamplingParams& p) { p.repetition_penalty = 0.5f; }, nullptr},
      {"repetition_large", [](SamplingParams& p) { p.repetition_penalty = 3.0f; }, nullptr},
      // lengths
      {"max_tokens_zero", [](SamplingParams& p) { p.max_tokens = 0; }, "'max_tokens'"},
      {"max_tokens_one", [](SamplingParams& p) { p.max_tokens = 1; }, nullptr},
      {"min_tokens_negative", [](SamplingParams& p) { p.min_tokens = -1; }, "'min_tokens'"},
      {"min_tokens_above_max",
       [](SamplingParams& p) {
         p.max_tokens = 5;
         p.min_tokens = 6;
       },
       "'min_tokens'"},
      {"min_tokens_equal_max",
       [](SamplingParams& p) {
         p.max_tokens = 5;
         p.min_tokens = 5;
       },
       nullptr},
      // logprobs
      {"logprobs_negative", [](SamplingParams& p) { p.logprobs = -1; }, "'logprobs'"},
      {"logprobs_21", [](SamplingParams& p) { p.logprobs = 21; }, "'logprobs'"},
      {"logprobs_0", [](SamplingParams& p) { p.logprobs = 0; }, nullptr},
      {"logprobs_20", [](SamplingParams& p) { p.logprobs = 20; }, nullptr},
      {"prompt_logprobs_21", [](SamplingParams& p) { p.prompt_logprobs = 21; },
       "'prompt_logprobs'"},
      {"prompt_logprobs_neg", [](SamplingParams& p) { p.prompt_logprobs = -5; },
       "'prompt_logprobs'"},
      {"prompt_logprobs_20", [](SamplingParams& p) { p.prompt_logprobs = 20; }, nullptr},
      // stops
      {"stop_empty_string",
       [](SamplingParams& p) {
         p.stop = {"end", ""};
       },
       "'stop'"},
      {"stop_strings",
       [](SamplingParams& p) {
         p.stop = {"end", "\n\n"};
       },
       nullptr},
      {"stop_token_negative",
       [](SamplingParams& p) {
         p.stop_token_ids = {2, -1};
       },
       "'stop_token_ids'"},
      {"stop_token_ids",
       [](SamplingParams& p) {
         p.stop_token_ids = {0, 2, 128001};
       },
       nullptr},
      {"seed_any", [](SamplingParams& p) { p.seed = ~0ULL; }, nullptr},
  };
}

TEST(SamplingParamsValidate, TableOfRules) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    SamplingParams p;
    c.edit(p);
    if (c.param == nullptr) {
      EXPECT_NO_THROW(p.validate());
      continue;
    }
    try {
      p.validate();
      ADD_FAILURE() << "expected a rejection naming " << c.param;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      const std::string message = e.what();
      EXPECT_NE(message.find(c.param), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << "one-line message: " << message;
    }
  }
}

TEST(SamplingParamsValidate, MessageShowsTheValue) {
  SamplingParams p;
  p.temperature = -1.0f;
  try {
    p.validate();
    FAIL() << "temperature -1 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sampling parameter 'temperature' must be finite and >= 0, got -1");
  }
  p = SamplingParams{};
  p.n = 4;
  p.best_of = 2;
  try {
    p.validate();
    FAIL() << "best_of < n accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "sampling parameter 'best_of' must be >= n (4), got 2");
  }
}

}  // namespace
}  // namespace pagellm
