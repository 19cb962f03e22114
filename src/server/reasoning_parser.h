// Reasoning parsers (vLLM's --reasoning-parser names) for models that think inside
// <think>...</think> before answering:
//   deepseek_r1  the chat template opens <think> in the prompt, so the output is reasoning up to
//                </think> (a leading <think> is dropped), then the answer;
//   qwen3        reasoning only when the output opens with <think> (enable_thinking: false makes
//   the
//                template close an empty think block in the prompt, and the output is all answer).
// As tool_parser.h: a view of a text that may still grow, whose successive views only grow.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace pagellm::server {

struct ReasoningView {
  std::string reasoning;       // the thinking so far (tags removed)
  std::string content;         // the answer so far (leading whitespace after </think> removed)
  bool has_reasoning = false;  // the output is in thinking form (reasoning may still be empty)
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  virtual ReasoningView view(std::string_view text, bool at_end) const = 0;
  // Reasoning starts without a tag (the prompt opened it): output constrained from its first token
  // (a structured output, a required or named tool choice) then has no reasoning to split off.
  virtual bool implicit_start() const { return false; }
};

// "deepseek_r1", "qwen3"; anything else throws pagellm::Error(kInvalidArgument).
std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name);

}  // namespace pagellm::server
