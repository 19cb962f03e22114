// The per-line sampling fields of a prompts JSONL file (cli/sampling_flags.cpp,
// cli/prompts_file.cpp): integers arrive as 3 or 3.0 and must fit their field; anything else is a
// one-line error naming the field, never a conversion out of range (a libFuzzer find:
// "best_of": 8.9e55).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "cli/prompts_file.h"
#include "cli/sampling_flags.h"
#include "common/error.h"

namespace pagellm::cli {
namespace {

SamplingParams apply(const std::string& json_text) {
  SamplingParams p;
  apply_sampling_json(nlohmann::json::parse(json_text), p, "prompts.jsonl:1");
  return p;
}

std::string error_of(const std::string& json_text) {
  try {
    apply(json_text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(PromptsFile, IntegerFieldsTakeIntegersAndWholeFloats) {
  const SamplingParams p = apply(
      R"({"max_tokens": 3.0, "n": 2, "best_of": 4, "top_k": -1, "seed": 18446744073709551615,
          "logprobs": 5.0, "stop_token_ids": [1, 2.0, 2147483647]})");
  EXPECT_EQ(p.max_tokens, 3);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.best_of, 4);
  EXPECT_EQ(p.top_k, -1);
  EXPECT_EQ(p.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(p.logprobs, 5);
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{1, 2, std::numeric_limits<int32_t>::max()}));
}

TEST(PromptsFile, IntegerFieldsRefuseFractionsAndValuesOutOfRange) {
  for (const char* bad :
       {R"({"best_of": 8.8888888888888888e55})", R"({"max_tokens": 2.5})",
        R"({"max_tokens": 4294967296})", R"({"top_k": -1e10})", R"({"seed": 1e300})",
        R"({"seed": 18446744073709551616})", R"({"n": "2"})", R"({"logprobs": true})",
        R"({"stop_token_ids": [1, 1e300]})", R"({"stop_token_ids": [1, 2147483648]})",
        R"({"stop_token_ids": 3})"}) {
    const std::string message = error_of(bad);
    EXPECT_NE(message.find("prompts.jsonl:1: field '"), std::string::npos)
        << bad << ": " << message;
    EXPECT_NE(message.find("integer"), std::string::npos) << bad << ": " << message;
  }
}

TEST(PromptsFile, NegativeSeedsWrapAsInTheServer) {
  EXPECT_EQ(apply(R"({"seed": -1})").seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(apply(R"({"seed": -2.0})").seed, std::numeric_limits<uint64_t>::max() - 1);
}

TEST(PromptsFile, OtherFieldsKeepTheirChecks) {
  const SamplingParams p = apply(R"({"temperature": 0.5, "stop": "x", "ignore_eos": true})");
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_NE(error_of(R"({"temperature": "hot"})").find("wrong type"), std::string::npos);
}

TEST(PromptsFile, TheFuzzersLineIsAnError) {
  const std::string line =
      R"({"prompt": "x", "n": 2, "best_of": 88888888888888888888888888888888888888888888888888888881, "mialty": 1.1})";
  EXPECT_THROW(parse_prompt_line(line, SamplingParams{}, "f.jsonl:1"), Error);
}

}  // namespace
}  // namespace pagellm::cli
