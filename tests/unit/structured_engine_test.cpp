// Structured outputs end to end through the engine on real models (CPU runner): greedy and sampled,
// n > 1, batched; every finished output parses and satisfies its constraint, and bad specs are
// rejected at add time with the problem named.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "pagellm/llm.h"

namespace pagellm {
namespace {

const std::string kStories = std::string(PAGELLM_SHARED_DIR) + "/models/stories260K";
const std::string kPycode = std::string(PAGELLM_SHARED_DIR) + "/models/pycode-25M";

EngineArgs args_for(const std::string& model) {
  EngineArgs a;
  a.model = model;
  a.num_threads = 2;
  return a;
}

SamplingParams params(float temperature, int n, int max_tokens, StructuredOutputs so) {
  SamplingParams p;
  p.temperature = temperature;
  p.n = n;
  p.seed = 42;
  p.max_tokens = max_tokens;
  p.structured_outputs = std::move(so);
  return p;
}

const char* kPersonSchema = R"({"type":"object","properties":{
    "name":{"type":"string","minLength":1,"maxLength":12},
    "age":{"type":"integer","minimum":0,"maximum":120},
    "pets":{"type":"array","items":{"enum":["cat","dog","fish"]},"maxItems":3},
    "happy":{"type":"boolean"}},
  "required":["name","age","happy"]})";

void expect_person(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);  // throws (fails the test) if invalid
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_TRUE(j["name"].is_string() && !j["name"].get<std::string>().empty()) << text;
  EXPECT_TRUE(j["age"].is_number_integer() && j["age"].get<int>() >= 0 &&
              j["age"].get<int>() <= 120)
      << text;
  EXPECT_TRUE(j["happy"].is_boolean()) << text;
  for (const auto& [key, value] : j.items()) {
    EXPECT_TRUE(key == "name" || key == "age" || key == "pets" || key == "happy") << text;
  }
  if (j.contains("pets")) {
    EXPECT_LE(j["pets"].size(), 3u) << text;
  }
}

std::vector<PromptInput> prompts(int num) {
  std::vector<PromptInput> out;
  for (int i = 0; i < num; ++i)
    out.push_back(PromptInput::from_text("Once upon a time " + std::to_string(i)));
  return out;
}

TEST(StructuredEngine, JsonSchemaGreedyAndSampledOnBothModels) {
  StructuredOutputs so;
  so.json = kPersonSchema;
  for (const std::string& model : {kStories, kPycode}) {
    LLM llm(args_for(model));
    for (float temperature : {0.0f, 1.0f}) {
      const auto outs = llm.generate(prompts(3), params(temperature, 2, 200, so));
      for (const RequestOutput& r : outs) {
        ASSERT_EQ(r.outputs.size(), 2u);
        for (const CompletionOutput& o : r.outputs) {
          EXPECT_EQ(o.finish_reason, FinishReason::kStop) << model << ": " << o.text;
          expect_person(o.text);
        }
      }
    }
  }
}

TEST(StructuredEngine, RegexChoiceAndGrammar) {
  LLM llm(args_for(kStories));
  StructuredOutputs re;
  re.regex = R"([A-Z][a-z]{2,8} (saw|had) \d{1,3} (cats|dogs)\.)";
  StructuredOutputs choice;
  choice.choice = std::vector<std::string>{"happy", "sad", "very sleepy"};
  StructuredOutputs gbnf;
  gbnf.grammar = "root ::= item (\", \" item){0,3}\nitem ::= (\"red\" | \"blue\") \" \" [a-z]{1,6}";
  const std::regex re_check(*re.regex);
  const std::regex gbnf_check("((red|blue) [a-z]{1,6})(, (red|blue) [a-z]{1,6}){0,3}");
  for (float temperature : {0.0f, 0.8f}) {
    for (const RequestOutput& r : llm.generate(prompts(4), params(temperature, 2, 64, re))) {
      for (const CompletionOutput& o : r.outputs)
        EXPECT_TRUE(std::regex_match(o.text, re_check)) << o.text;
    }
    for (const RequestOutput& r : llm.generate(prompts(4), params(temperature, 3, 16, choice))) {
      for (const CompletionOutput& o : r.outputs) {
        EXPECT_TRUE(o.text == "happy" || o.text == "sad" || o.text == "very sleepy") << o.text;
        EXPECT_EQ(o.finish_reason, FinishReason::kStop);
      }
    }
    for (const RequestOutput& r : llm.generate(prompts(4), params(temperature, 1, 96, gbnf))) {
      for (const CompletionOutput& o : r.outputs)
        EXPECT_TRUE(std::regex_match(o.text, gbnf_check)) << o.text;
    }
  }
}

TEST(StructuredEngine, MixedBatchLeavesUnconstrainedRequestsAlone) {
  LLM llm(args_for(kStories));
  SamplingParams plain;
  plain.temperature = 0.0f;
  plain.max_tokens = 24;
  const auto solo = llm.generate(prompts(1), plain)[0].outputs[0].token_ids;
  StructuredOutputs obj;
  obj.json_object = true;
  std::vector<SamplingParams> mixed = {plain, params(0.0f, 1, 24, obj), params(1.0f, 2, 24, obj)};
  const auto outs = llm.generate({prompts(1)[0], prompts(2)[1], prompts(3)[2]}, mixed);
  EXPECT_EQ(outs[0].outputs[0].token_ids, solo);
  for (size_t i = 1; i < outs.size(); ++i) {
    for (const CompletionOutput& o : outs[i].outputs) {
      ASSERT_FALSE(o.text.empty());
      EXPECT_EQ(o.text[0], '{') << o.text;
      if (o.finish_reason == FinishReason::kStop) {
        EXPECT_TRUE(nlohmann::json::parse(o.text).is_object()) << o.text;
      }
    }
  }
}

TEST(StructuredEngine, BadSpecsAreRejectedAtAddTime) {
  LLM llm(args_for(kStories));
  auto message = [&](StructuredOutputs so) -> std::string {
    try {
      llm.generate(prompts(1), params(0.0f, 1, 8, std::move(so)));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return e.what();
    }
    return "";
  };
  StructuredOutputs a;
  a.json = R"({"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}})";
  EXPECT_NE(message(a).find("points nowhere"), std::string::npos);
  StructuredOutputs b;
  b.regex = "(a|b)\\2";
  EXPECT_NE(message(b).find("backreferences"), std::string::npos);
  StructuredOutputs c;
  c.grammar = "root ::= root \"a\"";
  EXPECT_NE(message(c).find("grammar"), std::string::npos);
  StructuredOutputs two;
  two.regex = "a";
  two.json_object = true;
  EXPECT_NE(message(two).find("exactly one"), std::string::npos);
  // The engine still serves after the rejections.
  StructuredOutputs ok;
  ok.regex = "ok";
  EXPECT_EQ(llm.generate(prompts(1), params(0.0f, 1, 8, ok))[0].outputs[0].text, "ok");
}

}  // namespace
}  // namespace pagellm

namespace pagellm {
namespace {

// With speculative decoding on, constrained sequences take no drafts (their mask would be needed at
// every draft position) and keep their constraint; unconstrained ones in the same batch still
// speculate and give the text they give without speculation.
TEST(StructuredEngine, SpeculativeDecodingLeavesConstrainedSequencesUndrafted) {
  EngineArgs spec = args_for(kStories);
  spec.speculative = SpeculativeConfig::from_json(R"({"method": "ngram", "num_speculative_tokens": 3})");
  LLM with_spec(spec), plain(args_for(kStories));
  StructuredOutputs re;
  re.regex = R"([A-Z][a-z]{2,8} (saw|had) \d{1,3} (cats|dogs)\.)";
  const std::regex re_check(*re.regex);
  SamplingParams free_params;
  free_params.temperature = 0.0f;
  free_params.max_tokens = 48;
  free_params.ignore_eos = true;
  for (float temperature : {0.0f, 0.8f})
    for (const RequestOutput& r : with_spec.generate(prompts(3), params(temperature, 2, 64, re)))
      for (const CompletionOutput& o : r.outputs) EXPECT_TRUE(std::regex_match(o.text, re_check)) << o.text;
  const auto a = with_spec.generate(prompts(3), free_params);
  const auto b = plain.generate(prompts(3), free_params);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].outputs.at(0).token_ids, b[i].outputs.at(0).token_ids);
}

}  // namespace
}  // namespace pagellm
