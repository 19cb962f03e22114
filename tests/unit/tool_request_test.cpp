// The tool fields of chat requests (tools, tool_choice, parallel_tool_calls, assistant tool_calls)
// and the token controls of both endpoints (logit_bias, allowed_token_ids, bad_words).
#include <gtest/gtest.h>

#include "server/openai_protocol.h"

namespace pagellm::server {
namespace {

using nlohmann::json;

ChatRequest chat(const std::string& body) {
  return parse_chat_request(parse_json_object(body, ProtocolLimits{}), ProtocolLimits{});
}

void expect_bad(const std::string& body, const std::string& param) {
  try {
    chat(body);
    FAIL() << "expected a 400 for " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << e.what();
    EXPECT_EQ(e.param, param) << e.what();
  }
}

const char* kTools =
    R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
  "properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"],
  "$defs":{"d":{"type":"integer"}}}}},{"type":"function","function":{"name":"ping"}}])";

std::string with_tools(const std::string& extra) {
  return std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":)") + kTools + extra +
         "}";
}

TEST(ToolRequest, ToolChoiceDefaultsAndForms) {
  EXPECT_EQ(chat(with_tools("")).tool_choice, ToolChoice::kAuto);
  EXPECT_EQ(chat(R"({"messages":[{"role":"user","content":"hi"}]})").tool_choice,
            ToolChoice::kNone);
  EXPECT_EQ(chat(with_tools(R"(,"tool_choice":"none")")).tool_choice, ToolChoice::kNone);
  EXPECT_EQ(chat(with_tools(R"(,"tool_choice":"required")")).tool_choice, ToolChoice::kRequired);
  const ChatRequest named =
      chat(with_tools(R"(,"tool_choice":{"type":"function","function":{"name":"ping"}})"));
  EXPECT_EQ(named.tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named.tool_choice_name, "ping");
  EXPECT_TRUE(named.template_kwargs.contains("tools"));
  EXPECT_FALSE(chat(with_tools(R"(,"parallel_tool_calls":false)")).parallel_tool_calls);
}

TEST(ToolRequest, RejectsMalformedTools) {
  expect_bad(with_tools(R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})"),
             "tool_choice");
  expect_bad(with_tools(R"(,"tool_choice":"maybe")"), "tool_choice");
  expect_bad(with_tools(R"(,"tool_choice":{"function":{"name":"ping"}})"), "tool_choice");
  expect_bad(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"required"})",
             "tool_choice");
  expect_bad(R"({"messages":[{"role":"user","content":"hi"}],"tools":{}})", "tools");
  expect_bad(R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]})",
             "tools[0]");
  expect_bad(
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"function":{"name":"a b"}}]})",
      "tools[0]");
  expect_bad(
      R"({"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"code","function":{"name":"a"}}]})",
      "tools[0]");
  expect_bad(with_tools(R"(,"parallel_tool_calls":"yes")"), "parallel_tool_calls");
}

TEST(ToolRequest, AssistantToolCallArgumentsBecomeObjects) {
  const ChatRequest r = chat(R"({"messages":[{"role":"user","content":"hi"},
    {"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\": [1]}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"3"}]})");
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"a": [1]})"));
  EXPECT_EQ(r.messages[1]["content"], "")
      << "templates get \"\" for a tool-calling turn's null content";
  EXPECT_EQ(r.messages[2]["tool_call_id"], "call_1");
  expect_bad(
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{x"}}]}]})",
      "messages[0].tool_calls[0]");
  expect_bad(R"({"messages":[{"role":"assistant","tool_calls":[{"function":{}}]}]})",
             "messages[0].tool_calls[0]");
}

TEST(ToolRequest, SchemaForRequiredAndNamed) {
  const std::string raw = with_tools(R"(,"tool_choice":"required","parallel_tool_calls":false)");
  const ChatRequest r = chat(raw);
  const auto schema = nlohmann::ordered_json::parse(tool_choice_schema(r, raw));
  EXPECT_EQ(schema["type"], "array");
  EXPECT_EQ(schema["minItems"], 1);
  EXPECT_EQ(schema["maxItems"], 1);
  EXPECT_EQ(schema["$defs"]["d"]["type"], "integer") << "definitions move to the root";
  const auto& first = schema["items"]["anyOf"][0];
  EXPECT_EQ(first["properties"]["name"]["enum"][0], "get_weather");
  EXPECT_FALSE(first["properties"]["parameters"].contains("$defs"));
  // Declared property order survives (the raw body is read again).
  auto props = first["properties"]["parameters"]["properties"].items().begin();
  EXPECT_EQ(props.key(), "city");
  EXPECT_EQ(schema["items"]["anyOf"][1]["properties"]["parameters"]["type"], "object");

  const std::string named_raw =
      with_tools(R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})");
  const auto named = nlohmann::ordered_json::parse(tool_choice_schema(chat(named_raw), named_raw));
  EXPECT_EQ(named["required"][0], "city");
  EXPECT_EQ(named["properties"].items().begin().key(), "city");
}

TEST(ToolRequest, TokenControls) {
  const ChatRequest r =
      chat(R"({"messages":[{"role":"user","content":"hi"}],"logit_bias":{"5":-100,"05":2.5,"7":100},
    "allowed_token_ids":[1,2],"bad_words":["foo","bar baz"]})");
  ASSERT_EQ(r.params.logit_bias.size(), 2u);
  EXPECT_EQ(r.params.logit_bias[0].first, 5) << "\"5\" and \"05\" are one token";
  EXPECT_EQ(r.params.logit_bias[1], (std::pair<int32_t, float>{7, 100.0f}));
  EXPECT_EQ(*r.params.allowed_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.params.bad_words, (std::vector<std::string>{"foo", "bar baz"}));
  const std::string msgs = R"({"messages":[{"role":"user","content":"hi"}],)";
  expect_bad(msgs + R"("logit_bias":{"5":100.5}})", "logit_bias");
  expect_bad(msgs + R"("logit_bias":{"x":1}})", "logit_bias");
  expect_bad(msgs + R"("logit_bias":[1]})", "logit_bias");
  expect_bad(msgs + R"("allowed_token_ids":[]})", "allowed_token_ids");
  expect_bad(msgs + R"("allowed_token_ids":[-1]})", "allowed_token_ids");
  expect_bad(msgs + R"("bad_words":[""]})", "bad_words");
  expect_bad(msgs + R"("bad_words":"foo"})", "bad_words");
}

}  // namespace
}  // namespace pagellm::server
