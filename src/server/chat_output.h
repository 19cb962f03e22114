// A chat completion's generated text as the OpenAI message it stands for: reasoning_content (with
// --reasoning-parser), content and tool_calls (tool_choice auto with --tool-call-parser, required,
// or a named function). parse_chat_output answers a finished text; ChatOutputStream turns the same
// text, arriving in pieces, into the deltas a stream sends, so that the deltas put together equal
// the non-streamed message (for well-formed output; a call found malformed only at its end has
// already been partly streamed, and its text then also arrives as content).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace pagellm::server {

enum class ToolMode {
  kNone,      // the text is content
  kAuto,      // the --tool-call-parser finds calls, if any
  kRequired,  // the output is a JSON array of calls (constrained decoding)
  kNamed,     // the output is the named function's arguments (constrained decoding)
};

struct ChatOutputConfig {
  std::shared_ptr<const ReasoningParser> reasoning;  // null: no reasoning split
  ToolMode tool_mode = ToolMode::kNone;
  std::shared_ptr<const ToolCallParser> tool_parser;  // kAuto / kRequired
  std::string named_function;                         // kNamed
  bool short_ids = false;                             // 9-character ids (Mistral)

  bool active() const { return reasoning || tool_mode != ToolMode::kNone; }
};

struct ToolCall {
  std::string id;  // "call_" + 24 random alphanumerics, or 9 of them with short_ids
  std::string name;
  std::string arguments;  // JSON text
};

struct ChatMessage {
  std::optional<std::string> reasoning;  // reasoning_content
  std::optional<std::string> content;    // null when empty and the message has calls or reasoning
  std::vector<ToolCall> tool_calls;
};

ChatMessage parse_chat_output(const ChatOutputConfig& config, std::string_view text);

// A fresh tool call id.
std::string make_tool_call_id(bool short_id);

struct ToolCallDelta {
  size_t index = 0;
  bool first = false;  // the call's first delta: id, type and name go with it
  std::string id;
  std::string name;
  std::string arguments;  // the next fragment of the arguments
};

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputStream {
 public:
  explicit ChatOutputStream(ChatOutputConfig config) : config_(std::move(config)) {}
  // Appends `text`; returns what is new. `at_end`: the generation is over (flushes what was held
  // back in case it began a tag).
  ChatDelta push(std::string_view text, bool at_end);
  bool has_tool_calls() const { return !calls_.empty(); }

 private:
  struct SentCall {
    std::string id;
    size_t num_argument_bytes = 0;
  };
  void diff_tools(const ToolView& view, ChatDelta& out);

  ChatOutputConfig config_;
  std::string text_;
  size_t num_reasoning_sent_ = 0;
  size_t num_content_sent_ = 0;
  std::vector<SentCall> calls_;
};

}  // namespace pagellm::server
