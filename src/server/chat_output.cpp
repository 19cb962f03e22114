#include "server/chat_output.h"

#include <random>

namespace pagellm::server {
namespace {

// The tool part of a message's text (after the reasoning split). `at_end` with the fallback of
// parse_tool_calls; otherwise the view so far.
ToolView tool_view(const ChatOutputConfig& config, std::string_view text, bool at_end) {
  switch (config.tool_mode) {
    case ToolMode::kNone:
      break;
    case ToolMode::kAuto:
    case ToolMode::kRequired:
      if (config.tool_parser) {
        return at_end ? parse_tool_calls(*config.tool_parser, text)
                      : config.tool_parser->view(text, false);
      }
      break;
    case ToolMode::kNamed: {
      // Constrained decoding made the whole text the function's arguments.
      ToolView v;
      v.calls.push_back({config.named_function, true, std::string(text)});
      return v;
    }
  }
  ToolView v;
  v.content.assign(text);
  return v;
}

ReasoningView reasoning_view(const ChatOutputConfig& config, std::string_view text, bool at_end) {
  if (config.reasoning) return config.reasoning->view(text, at_end);
  ReasoningView v;
  v.content.assign(text);
  return v;
}

}  // namespace

std::string make_tool_call_id(bool short_id) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (static_cast<uint64_t>(std::random_device{}()) << 32)};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = short_id ? "" : "call_";
  for (int i = 0; i < (short_id ? 9 : 24); ++i) id += kAlphabet[pick(rng)];
  return id;
}

ChatMessage parse_chat_output(const ChatOutputConfig& config, std::string_view text) {
  ChatMessage m;
  const ReasoningView r = reasoning_view(config, text, true);
  ToolView t = tool_view(config, r.content, true);
  for (ToolCallView& call : t.calls) {
    m.tool_calls.push_back(
        {make_tool_call_id(config.short_ids), std::move(call.name), std::move(call.arguments)});
  }
  if (r.has_reasoning && !r.reasoning.empty()) m.reasoning = r.reasoning;
  if (!t.content.empty() || (m.tool_calls.empty() && !m.reasoning))
    m.content = std::move(t.content);
  return m;
}

ChatDelta ChatOutputStream::push(std::string_view text, bool at_end) {
  text_.append(text);
  ChatDelta out;
  const ReasoningView r = reasoning_view(config_, text_, at_end);
  // Views only grow (see tool_parser.h); a size that went back (output found malformed at its end)
  // sends nothing more of that part.
  if (r.reasoning.size() > num_reasoning_sent_) {
    out.reasoning = r.reasoning.substr(num_reasoning_sent_);
    num_reasoning_sent_ = r.reasoning.size();
  }
  diff_tools(tool_view(config_, r.content, at_end), out);
  return out;
}

void ChatOutputStream::diff_tools(const ToolView& view, ChatDelta& out) {
  if (view.content.size() > num_content_sent_) {
    out.content = view.content.substr(num_content_sent_);
    num_content_sent_ = view.content.size();
  }
  for (size_t i = 0; i < view.calls.size(); ++i) {
    const ToolCallView& call = view.calls[i];
    if (!call.name_known) break;  // a call is announced with its name; later ones wait for it
    ToolCallDelta d;
    d.index = i;
    if (i >= calls_.size()) {
      calls_.push_back({make_tool_call_id(config_.short_ids), 0});
      d.first = true;
      d.id = calls_[i].id;
      d.name = call.name;
    }
    SentCall& sent = calls_[i];
    if (call.arguments.size() > sent.num_argument_bytes) {
      d.arguments = call.arguments.substr(sent.num_argument_bytes);
      sent.num_argument_bytes = call.arguments.size();
    }
    if (d.first || !d.arguments.empty()) out.tool_calls.push_back(std::move(d));
  }
}

}  // namespace pagellm::server
