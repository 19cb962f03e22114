// Tool-call parsers: find the function calls in a chat model's generated text, in the formats the
// common model families are trained on (vLLM's --tool-call-parser names):
//   hermes       Qwen2.5 / Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//   llama3_json  Llama 3.x: {"name": ..., "parameters": {...}} (calls separated by ';'), the whole
//                output, optionally after <|python_tag|>
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]
// and the JSON array that tool_choice "required" constrains the output to
// ([{"name": ..., "parameters": {...}}, ...]).
//
// A parser answers with a *view* of a text that may still grow: what of it is surely content and
// which calls (name, and the raw text of the arguments so far) it holds. Views of successive
// prefixes only grow, so a stream sends their differences; the view of the complete text
// (at_end) is the non-streamed answer. Everything here runs on model output, i.e. untrusted text:
// no input makes it throw, recurse without bound or take more than linear time per view.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::server {

struct ToolCallView {
  std::string name;         // valid once name_known
  bool name_known = false;  // the name string is complete
  std::string arguments;    // the arguments' JSON text as generated (so far); "{}" when absent
};

struct ToolView {
  std::string content;  // text outside the calls (surely content, so far)
  std::vector<ToolCallView> calls;
  bool malformed = false;  // a call's JSON is broken: the whole text is content
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // The view of `text` (the generated content so far); `at_end`: nothing more will come.
  virtual ToolView view(std::string_view text, bool at_end) const = 0;
  // The format starts with a special token (<|python_tag|>, [TOOL_CALLS]) that detokenization must
  // keep.
  virtual bool needs_special_tokens() const { return false; }
  // Mistral's templates take only 9-character alphanumeric tool call ids.
  virtual bool short_ids() const { return false; }
};

// "hermes", "llama3_json", "mistral"; anything else throws pagellm::Error(kInvalidArgument).
std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name);
// The parser of tool_choice "required" outputs: one JSON array of {"name", "parameters"} objects.
std::unique_ptr<ToolCallParser> make_json_array_tool_parser();

// The final answer for `text`: the view at its end, or, when a call is malformed or nameless, all
// of `text` as content and no calls.
ToolView parse_tool_calls(const ToolCallParser& parser, std::string_view text);

}  // namespace pagellm::server
