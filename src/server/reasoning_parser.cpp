#include "server/reasoning_parser.h"

#include "common/error.h"

namespace pagellm::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// `text` is a proper prefix of `tag` (more text may complete it).
bool begins_tag(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

// Reasoning from the start of `t` up to </think>, the answer after it. While the text may grow,
// a possible start of </think> at its end waits, and so does whitespace that might open the answer.
ReasoningView split_at_close(std::string_view t, bool at_end) {
  ReasoningView v;
  v.has_reasoning = true;
  const size_t close = t.find(kClose);
  if (close == std::string_view::npos) {
    size_t keep = t.size();
    if (!at_end) {
      for (size_t n = std::min(t.size(), kClose.size() - 1); n > 0; --n) {
        if (t.substr(t.size() - n) == kClose.substr(0, n)) {
          keep = t.size() - n;
          break;
        }
      }
    }
    v.reasoning.assign(t.substr(0, keep));
    return v;
  }
  v.reasoning.assign(t.substr(0, close));
  size_t b = close + kClose.size();
  while (b < t.size() && is_ws(t[b])) ++b;
  v.content.assign(t.substr(b));
  return v;
}

class DeepSeekR1Parser final : public ReasoningParser {
 public:
  bool implicit_start() const override { return true; }
  ReasoningView view(std::string_view t, bool at_end) const override {
    if (!at_end && begins_tag(t, kOpen)) {
      ReasoningView v;
      v.has_reasoning = true;
      return v;
    }
    if (t.starts_with(kOpen)) t.remove_prefix(kOpen.size());
    return split_at_close(t, at_end);
  }
};

class Qwen3Parser final : public ReasoningParser {
 public:
  ReasoningView view(std::string_view t, bool at_end) const override {
    if (t.starts_with(kOpen)) return split_at_close(t.substr(kOpen.size()), at_end);
    ReasoningView v;
    if (at_end || !begins_tag(t, kOpen)) v.content.assign(t);
    return v;
  }
};

}  // namespace

std::unique_ptr<ReasoningParser> make_reasoning_parser(std::string_view name) {
  if (name == "deepseek_r1") return std::make_unique<DeepSeekR1Parser>();
  if (name == "qwen3") return std::make_unique<Qwen3Parser>();
  invalid_argument("--reasoning-parser '" + std::string(name) + "': expected deepseek_r1 or qwen3");
}

}  // namespace pagellm::server
