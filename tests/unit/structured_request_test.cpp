// The structured-output fields of OpenAI / vLLM requests (server/structured_request.cpp).
#include <gtest/gtest.h>

#include "server/openai_protocol.h"

namespace pagellm::server {
namespace {

using nlohmann::json;

std::optional<StructuredOutputs> parse(const std::string& body) {
  return parse_structured_outputs(json::parse(body));
}

std::string error_of(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.what();
  }
  return "";
}

TEST(StructuredRequest, EveryFieldMapsToOneSpec) {
  EXPECT_FALSE(parse(R"({"prompt":"x"})"));
  EXPECT_FALSE(parse(R"({"response_format":{"type":"text"}})"));
  EXPECT_TRUE(parse(R"({"response_format":{"type":"json_object"}})")->json_object);
  EXPECT_EQ(
      *parse(
           R"({"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"integer"},"strict":true}}})")
           ->json,
      R"({"type":"integer"})");
  EXPECT_EQ(*parse(R"({"structured_outputs":{"json":"{\"type\":\"null\"}"}})")->json,
            R"({"type":"null"})");
  EXPECT_EQ(*parse(R"({"structured_outputs":{"regex":"a+"}})")->regex, "a+");
  EXPECT_EQ(*parse(R"({"structured_outputs":{"choice":["a","b"]}})")->choice,
            (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(*parse(R"({"structured_outputs":{"grammar":"root ::= \"a\""}})")->grammar,
            "root ::= \"a\"");
  EXPECT_TRUE(parse(R"({"structured_outputs":{"json_object":true}})")->json_object);
  EXPECT_EQ(*parse(R"({"guided_json":{"type":"string"}})")->json, R"({"type":"string"})");
  EXPECT_EQ(*parse(R"({"guided_regex":"x"})")->regex, "x");
  EXPECT_EQ(parse(R"({"guided_choice":["y"]})")->choice->size(), 1u);
  EXPECT_EQ(*parse(R"({"guided_grammar":"g"})")->grammar, "g");
}

TEST(StructuredRequest, MalformedOrConflictingFieldsAre400) {
  EXPECT_NE(error_of(R"({"response_format":{"type":"yaml"}})").find("json_schema"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"response_format":{"type":"json_schema"}})").find("json_schema"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"response_format":{"type":"json_schema","json_schema":{"name":"a"}}})")
                .find("schema' is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"response_format":"json"})").find("must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"guided_choice":[]})").find("non-empty list"), std::string::npos);
  EXPECT_NE(error_of(R"({"guided_choice":[1]})").find("non-empty list of strings"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"guided_regex":5})").find("must be a string"), std::string::npos);
  EXPECT_NE(error_of(R"({"guided_json":5})").find("JSON schema"), std::string::npos);
  EXPECT_NE(error_of(R"({"structured_outputs":{"regex":"a","choice":["a"]}})").find("conflicts"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"response_format":{"type":"json_object"},"guided_regex":"a"})")
                .find("conflicts"),
            std::string::npos);
}

TEST(StructuredRequest, SchemaPropertyOrderComesFromTheRawBody) {
  const std::string body =
      R"({"prompt":"x","guided_json":{"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string"}}}})";
  SamplingParams p;
  p.structured_outputs = parse(body);
  EXPECT_LT(p.structured_outputs->json->find("alpha"),
            p.structured_outputs->json->find("zeta"));  // sorted
  restore_schema_order(p, body);
  EXPECT_LT(p.structured_outputs->json->find("zeta"),
            p.structured_outputs->json->find("alpha"));  // declared
  SamplingParams none;
  restore_schema_order(none, body);  // no spec in params: nothing to do
  EXPECT_FALSE(none.structured_outputs);
}

}  // namespace
}  // namespace pagellm::server
