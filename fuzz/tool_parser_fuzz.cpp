// libFuzzer target: model output through every tool-call parser and reasoning parser, whole and
// streamed in pieces. Nothing may throw or crash; a stream never announces a call twice nor sends
// a fragment for an unannounced call, and for output that parses cleanly its deltas put together
// equal the non-streamed message.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/chat_output.h"

namespace {

using namespace pagellm::server;

ChatOutputConfig make_config(uint8_t selector) {
  ChatOutputConfig c;
  static const char* const kParsers[] = {"hermes", "llama3_json", "mistral"};
  switch (selector % 5) {
    case 0:
    case 1:
    case 2:
      c.tool_mode = ToolMode::kAuto;
      c.tool_parser = make_tool_call_parser(kParsers[selector % 5]);
      break;
    case 3:
      c.tool_mode = ToolMode::kRequired;
      c.tool_parser = make_json_array_tool_parser();
      break;
    default:
      c.tool_mode = ToolMode::kNamed;
      c.named_function = "f";
  }
  if (selector & 0x10)
    c.reasoning = make_reasoning_parser((selector & 0x20) ? "qwen3" : "deepseek_r1");
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const ChatOutputConfig config = make_config(data[0]);
  const size_t piece = 1 + data[1] % 8;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  const ChatMessage whole = parse_chat_output(config, text);
  ChatOutputStream stream(config);
  std::string reasoning, content;
  std::vector<std::string> names, args;
  for (size_t pos = 0;;) {
    const size_t n = std::min(piece, text.size() - pos);
    const bool last = pos + n >= text.size();
    const ChatDelta d = stream.push(text.substr(pos, n), last);
    pos += n;
    reasoning += d.reasoning;
    content += d.content;
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.first) {
        if (t.index != names.size()) std::abort();
        names.push_back(t.name);
        args.emplace_back();
      }
      if (t.index >= args.size()) std::abort();
      args[t.index] += t.arguments;
    }
    if (last) break;
  }
  // A clean parse (calls found, or plain content) streams to the same message.
  if (!whole.tool_calls.empty()) {
    if (whole.tool_calls.size() != names.size()) std::abort();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] != whole.tool_calls[i].name || args[i] != whole.tool_calls[i].arguments)
        std::abort();
    }
    if (content != whole.content.value_or("")) std::abort();
  }
  if (reasoning != whole.reasoning.value_or("")) std::abort();
  return 0;
}
