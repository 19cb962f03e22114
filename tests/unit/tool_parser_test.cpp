// Tool-call and reasoning parsers on literal model output: the full text, the same text streamed
// one character at a time and in token-sized pieces (the deltas put together must equal the full
// parse), malformed calls falling back to content, several calls in one output.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/json_scan.h"

namespace pagellm::server {
namespace {

struct Call {
  std::string name;
  std::string arguments;
  bool operator==(const Call&) const = default;
};

struct Assembled {
  std::string reasoning;
  std::string content;
  std::vector<Call> calls;
  std::vector<std::string> ids;
};

ChatOutputConfig config_for(const char* tool_parser, const char* reasoning = nullptr) {
  ChatOutputConfig c;
  if (tool_parser) {
    c.tool_mode = ToolMode::kAuto;
    c.tool_parser = make_tool_call_parser(tool_parser);
    c.short_ids = c.tool_parser->short_ids();
  }
  if (reasoning) c.reasoning = make_reasoning_parser(reasoning);
  return c;
}

// The non-streamed message in the form of a stream's reassembly (null content as "").
Assembled full(const ChatOutputConfig& config, const std::string& text) {
  const ChatMessage m = parse_chat_output(config, text);
  Assembled a;
  a.reasoning = m.reasoning.value_or("");
  a.content = m.content.value_or("");
  for (const ToolCall& t : m.tool_calls) {
    a.calls.push_back({t.name, t.arguments});
    a.ids.push_back(t.id);
  }
  return a;
}

// Streams `text` in pieces of the given sizes (cycled) and puts the deltas together as a client
// does.
Assembled streamed(const ChatOutputConfig& config, const std::string& text,
                   const std::vector<size_t>& sizes) {
  ChatOutputStream stream(config);
  Assembled a;
  size_t pos = 0;
  for (size_t k = 0; pos < text.size() || k == 0; ++k) {
    const size_t n = std::min(sizes[k % sizes.size()], text.size() - pos);
    const bool last = pos + n >= text.size();
    const ChatDelta d = stream.push(std::string_view(text).substr(pos, n), last);
    pos += n;
    a.reasoning += d.reasoning;
    a.content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.first) {
        EXPECT_EQ(t.index, a.calls.size()) << "calls are announced in order";
        a.calls.push_back({t.name, ""});
        a.ids.push_back(t.id);
      }
      EXPECT_LT(t.index, a.calls.size()) << "a fragment for an unannounced call";
      if (t.index < a.calls.size()) a.calls[t.index].arguments += t.arguments;
    }
    if (last) break;
  }
  return a;
}

void expect_same(const Assembled& a, const Assembled& b, const std::string& what) {
  EXPECT_EQ(a.reasoning, b.reasoning) << what;
  EXPECT_EQ(a.content, b.content) << what;
  EXPECT_EQ(a.calls, b.calls) << what;
}

// Full parse == char-by-char stream == token-sized pieces (several random splits).
void check_streaming(const ChatOutputConfig& config, const std::string& text) {
  const Assembled f = full(config, text);
  expect_same(streamed(config, text, {1}), f, "char by char: " + text);
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<size_t> sizes;
    for (int i = 0; i < 16; ++i) sizes.push_back(1 + rng() % 7);
    expect_same(streamed(config, text, sizes), f, "pieces: " + text);
  }
  expect_same(streamed(config, text, {text.size() + 1}), f, "one piece: " + text);
}

TEST(ToolParser, HermesSingleCall) {
  const auto config = config_for("hermes");
  const std::string text =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, "
      "2]}}\n</tool_call>";
  const Assembled a = full(config, text);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\", \"days\": [1, 2]}");
  EXPECT_EQ(a.content, "");
  EXPECT_EQ(a.ids[0].rfind("call_", 0), 0u);
  EXPECT_EQ(a.ids[0].size(), 5u + 24u);
  EXPECT_EQ(parse_chat_output(config, text).content, std::nullopt) << "no text: null content";
  check_streaming(config, text);
}

TEST(ToolParser, HermesContentAndSeveralCalls) {
  const auto config = config_for("hermes");
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
      "{}}\n</tool_call>\n<tool_call>\n"
      "{\"arguments\": {\"q\": \"x \\\"y\\\" </tool_call>\"}, \"name\": \"b\"}\n</tool_call>\n";
  const Assembled a = full(config, text);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.content, "Let me check.");
  EXPECT_EQ(a.calls[0], (Call{"a", "{}"}));
  EXPECT_EQ(a.calls[1], (Call{"b", "{\"q\": \"x \\\"y\\\" </tool_call>\"}"}));
  check_streaming(config, text);
}

TEST(ToolParser, HermesMissingCloseTagAtEndAndPlainText) {
  const auto config = config_for("hermes");
  const std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"n\": 1.5e3}}";
  EXPECT_EQ(full(config, text).calls, (std::vector<Call>{{"f", "{\"n\": 1.5e3}"}}));
  check_streaming(config, text);
  const std::string plain = "No tools needed <tool or <tool_ here.  ";
  const Assembled p = full(config, plain);
  EXPECT_EQ(p.content, plain);
  EXPECT_TRUE(p.calls.empty());
  check_streaming(config, plain);
}

TEST(ToolParser, HermesMalformedFallsBackToContent) {
  const auto config = config_for("hermes");
  for (const std::string text : {
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}</tool_call>",
           "<tool_call>{\"arguments\": {}}</tool_call>",              // no name
           "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}",  // truncated
           "<tool_call>{\"name\": \"f\"} trailing</tool_call>",
           "ok <tool_call>{\"name\": 3}</tool_call>",
       }) {
    const Assembled a = full(config, text);
    EXPECT_TRUE(a.calls.empty()) << text;
    EXPECT_EQ(a.content, text);
    // A stream cannot take back what it sent, but it ends with all the text as content.
    EXPECT_EQ(streamed(config, text, {1}).content.size() <= text.size(), true);
  }
}

TEST(ToolParser, Llama3Json) {
  const auto config = config_for("llama3_json");
  const std::string one = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}";
  EXPECT_EQ(full(config, one).calls, (std::vector<Call>{{"get_weather", "{\"city\": \"Oslo\"}"}}));
  check_streaming(config, one);
  const std::string two =
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": true}}; {\"name\": \"b\", "
      "\"parameters\": null}";
  EXPECT_EQ(full(config, two).calls, (std::vector<Call>{{"a", "{\"x\": true}"}, {"b", "null"}}));
  check_streaming(config, two);
  const std::string plain = "The weather in {city} is fine.";
  EXPECT_EQ(full(config, plain).content, plain);
  check_streaming(config, plain);
  const std::string json_content = "{\"answer\": 42}";  // JSON, but not a call
  EXPECT_EQ(full(config, json_content).content, json_content);
  EXPECT_TRUE(full(config, json_content).calls.empty());
  EXPECT_EQ(full(config, "{\"name\": \"a\"} and more").content, "{\"name\": \"a\"} and more");
  EXPECT_TRUE(config.tool_parser->needs_special_tokens());
}

TEST(ToolParser, Mistral) {
  const auto config = config_for("mistral");
  const std::string text =
      "Sure.[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": -2}}, {\"name\": "
      "\"neg\", \"arguments\": {\"x\": 0}}]";
  const Assembled a = full(config, text);
  EXPECT_EQ(a.content, "Sure.");
  EXPECT_EQ(a.calls, (std::vector<Call>{{"add", "{\"a\": 1, \"b\": -2}"}, {"neg", "{\"x\": 0}"}}));
  ASSERT_EQ(a.ids.size(), 2u);
  EXPECT_EQ(a.ids[0].size(), 9u) << "Mistral templates take 9-character ids";
  check_streaming(config, text);
  const std::string broken = "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1}";
  EXPECT_EQ(full(config, broken).content, broken);
  const std::string plain = "Just text [TOOL";
  EXPECT_EQ(full(config, plain).content, plain);
  check_streaming(config, plain);
}

TEST(ToolParser, RequiredJsonArray) {
  ChatOutputConfig config;
  config.tool_mode = ToolMode::kRequired;
  config.tool_parser = make_json_array_tool_parser();
  const std::string text =
      "[{\"name\": \"f\", \"parameters\": {\"s\": \"\\u00e9\\n\"}}, {\"name\": \"g\", "
      "\"parameters\": {}}]";
  EXPECT_EQ(full(config, text).calls,
            (std::vector<Call>{{"f", "{\"s\": \"\\u00e9\\n\"}"}, {"g", "{}"}}));
  check_streaming(config, text);
}

TEST(ToolParser, NamedFunctionWrapsTheWholeOutput) {
  ChatOutputConfig config;
  config.tool_mode = ToolMode::kNamed;
  config.named_function = "lookup";
  const std::string text = "{\"id\": 7, \"tags\": [\"a\"]}";
  EXPECT_EQ(full(config, text).calls, (std::vector<Call>{{"lookup", text}}));
  check_streaming(config, text);
  // The first delta announces the call before any argument arrives.
  ChatOutputStream stream(config);
  const ChatDelta d = stream.push("", false);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_calls[0].first);
  EXPECT_EQ(d.tool_calls[0].name, "lookup");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
}

TEST(ReasoningParser, DeepSeekR1) {
  const auto config = config_for(nullptr, "deepseek_r1");
  const std::string text = "Let me think about 2+2.\n</think>\n\nIt is 4.";
  const Assembled a = full(config, text);
  EXPECT_EQ(a.reasoning, "Let me think about 2+2.\n");
  EXPECT_EQ(a.content, "It is 4.");
  check_streaming(config, text);
  EXPECT_EQ(full(config, "<think>x</think>y").reasoning, "x");
  EXPECT_EQ(full(config, "still thinking </thi").reasoning, "still thinking </thi");
  check_streaming(config, "<think>a</think>b");
  check_streaming(config, "unfinished </thin");
}

TEST(ReasoningParser, Qwen3) {
  const auto config = config_for(nullptr, "qwen3");
  const std::string text = "<think>\nThe user greets me.\n</think>\n\nHello!";
  const Assembled a = full(config, text);
  EXPECT_EQ(a.reasoning, "\nThe user greets me.\n");
  EXPECT_EQ(a.content, "Hello!");
  check_streaming(config, text);
  // enable_thinking=false: no think block in the output, all of it is the answer.
  EXPECT_EQ(full(config, "Hello!").content, "Hello!");
  EXPECT_EQ(full(config, "Hello!").reasoning, "");
  EXPECT_EQ(parse_chat_output(config, "Hello!").reasoning, std::nullopt);
  check_streaming(config, "<thin");
  check_streaming(config, "Hello!");
}

TEST(ReasoningParser, ThenToolCalls) {
  const auto config = config_for("hermes", "qwen3");
  const std::string text =
      "<think>\nI need the weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
      "{\"c\": \"Rome\"}}\n</tool_call>";
  const Assembled a = full(config, text);
  EXPECT_EQ(a.reasoning, "\nI need the weather.\n");
  EXPECT_EQ(a.content, "");
  EXPECT_EQ(a.calls, (std::vector<Call>{{"w", "{\"c\": \"Rome\"}"}}));
  check_streaming(config, text);
}

TEST(JsonScan, FindsValueEndsAndPrefixes) {
  using json_scan::Status;
  const auto status = [](std::string_view t, bool at_end) {
    return json_scan::scan_value(t, 0, at_end).status;
  };
  EXPECT_EQ(status("{\"a\": [1, 2.5e-3, true, null, \"x\\u0041\"]}", false), Status::kComplete);
  EXPECT_EQ(json_scan::scan_value("{\"a\": 1} tail", 0, false).end, 8u);
  EXPECT_EQ(status("{\"a\": [1, 2", false), Status::kIncomplete);
  EXPECT_EQ(status("12", false), Status::kIncomplete);
  EXPECT_EQ(status("12", true), Status::kComplete);
  EXPECT_EQ(status("-", true), Status::kIncomplete);
  EXPECT_EQ(status("tru", false), Status::kIncomplete);
  EXPECT_EQ(status("{\"a\" 1}", false), Status::kMalformed);
  EXPECT_EQ(status("[1,]", false), Status::kMalformed);
  EXPECT_EQ(status("01", true), Status::kComplete) << "0, then a separate 1";
  EXPECT_EQ(status("\"\\x\"", false), Status::kMalformed);
  EXPECT_EQ(status("\"a\nb\"", false), Status::kMalformed);
  EXPECT_EQ(status(std::string(100, '['), false), Status::kMalformed) << "deeper than kMaxDepth";
}

}  // namespace
}  // namespace pagellm::server
