#include "server/tool_parser.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "server/json_scan.h"

namespace pagellm::server {
namespace {

using json_scan::skip_ws;
using json_scan::Status;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralTag = "[TOOL_CALLS]";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// A JSON string token (already validated by the scanner) as its text; nullopt when nlohmann
// refuses it (invalid UTF-8).
std::optional<std::string> decode_string(std::string_view token) {
  try {
    const auto value = nlohmann::json::parse(token);
    if (value.is_string()) return value.get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

struct Scan {
  Status status = Status::kIncomplete;
  size_t end = 0;
};

// One call object {"name": "...", "arguments" | "parameters": VALUE, ...} at t[i] == '{'. Fills
// `call` with what the text holds so far; the arguments are their raw text.
Scan scan_call(std::string_view t, size_t i, bool at_end, ToolCallView& call) {
  size_t p = i + 1;
  bool have_args = false;
  for (bool first = true;; first = false) {
    p = skip_ws(t, p);
    if (p >= t.size()) return {Status::kIncomplete, t.size()};
    if (first && t[p] == '}') return {Status::kComplete, p + 1};  // {}: nameless, rejected later
    if (t[p] != '"') return {Status::kMalformed, p};
    const auto key_scan = json_scan::scan_value(t, p, at_end);
    if (key_scan.status != Status::kComplete) return {key_scan.status, key_scan.end};
    const auto key = decode_string(t.substr(p, key_scan.end - p));
    if (!key) return {Status::kMalformed, p};
    p = skip_ws(t, key_scan.end);
    if (p >= t.size()) return {Status::kIncomplete, t.size()};
    if (t[p] != ':') return {Status::kMalformed, p};
    p = skip_ws(t, p + 1);
    if (p >= t.size()) return {Status::kIncomplete, t.size()};
    const auto value = json_scan::scan_value(t, p, at_end);
    if (value.status == Status::kMalformed) return {value.status, value.end};
    const bool complete = value.status == Status::kComplete;
    if (*key == "name") {
      if (t[p] != '"' || call.name_known) return {Status::kMalformed, p};
      if (complete) {
        const auto name = decode_string(t.substr(p, value.end - p));
        if (!name) return {Status::kMalformed, p};
        call.name = *name;
        call.name_known = true;
      }
    } else if ((*key == "arguments" || *key == "parameters") && !have_args) {
      call.arguments.assign(t.substr(p, (complete ? value.end : t.size()) - p));
      have_args = complete;
    }
    if (!complete) return {Status::kIncomplete, t.size()};
    p = skip_ws(t, value.end);
    if (p >= t.size()) return {Status::kIncomplete, t.size()};
    if (t[p] == '}') {
      if (!have_args) call.arguments = "{}";
      return {Status::kComplete, p + 1};
    }
    if (t[p] != ',') return {Status::kMalformed, p};
    ++p;
  }
}

// Call objects from t[p]: optionally inside [ ], separated by ',' or ';'. Unbracketed, the list
// ends after the last object that no separator follows (which only the text's end or another
// character tells).
Scan scan_call_list(std::string_view t, size_t p, bool at_end, std::vector<ToolCallView>& calls) {
  p = skip_ws(t, p);
  if (p >= t.size()) return {Status::kIncomplete, t.size()};
  const bool bracketed = t[p] == '[';
  if (bracketed) p = skip_ws(t, p + 1);
  for (;;) {
    if (p >= t.size()) return {Status::kIncomplete, t.size()};
    if (bracketed && t[p] == ']' && calls.empty()) return {Status::kComplete, p + 1};
    if (t[p] != '{') return {Status::kMalformed, p};
    calls.emplace_back();
    const Scan call = scan_call(t, p, at_end, calls.back());
    if (call.status != Status::kComplete) return call;
    p = skip_ws(t, call.end);
    if (p >= t.size()) {
      if (bracketed || !at_end) return {Status::kIncomplete, t.size()};
      return {Status::kComplete, call.end};
    }
    if (t[p] == ',' || t[p] == ';') {
      p = skip_ws(t, p + 1);
      continue;
    }
    if (!bracketed) return {Status::kComplete, call.end};
    if (t[p] == ']') return {Status::kComplete, p + 1};
    return {Status::kMalformed, p};
  }
}

// `text` is a proper prefix of `tag`.
bool begins_tag(std::string_view text, std::string_view tag) {
  return text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

// The length of the longest proper suffix of `text`... that could still become `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

// Appends the content segment `seg` (text between calls): whitespace touching a call is not
// content, and while the text may grow, a segment's trailing whitespace and a possible start of
// `tag` wait (a call may follow them).
void add_content(ToolView& v, std::string_view seg, bool after_call, bool before_call, bool at_end,
                 std::string_view tag) {
  if (!before_call && !at_end) seg.remove_suffix(partial_tag_suffix(seg, tag));
  size_t b = 0, e = seg.size();
  if (after_call)
    while (b < e && is_ws(seg[b])) ++b;
  if (before_call || !at_end)
    while (e > b && is_ws(seg[e - 1])) --e;
  v.content.append(seg.substr(b, e - b));
}

// A call list from t[p] to the end of the text, with only whitespace after it.
void scan_tail_calls(std::string_view t, size_t p, bool at_end, ToolView& v) {
  const Scan list = scan_call_list(t, p, at_end, v.calls);
  if (list.status == Status::kMalformed || (at_end && list.status == Status::kIncomplete)) {
    v.malformed = true;
  } else if (list.status == Status::kComplete && skip_ws(t, list.end) < t.size()) {
    v.malformed = true;
  }
}

class HermesParser final : public ToolCallParser {
 public:
  ToolView view(std::string_view t, bool at_end) const override {
    ToolView v;
    size_t pos = 0;
    bool after_call = false;
    for (;;) {
      const size_t open = t.find(kHermesOpen, pos);
      if (open == std::string_view::npos) {
        add_content(v, t.substr(pos), after_call, false, at_end, kHermesOpen);
        return v;
      }
      add_content(v, t.substr(pos, open - pos), after_call, true, at_end, kHermesOpen);
      const Scan list = scan_call_list(t, open + kHermesOpen.size(), at_end, v.calls);
      if (list.status != Status::kComplete) {
        v.malformed = list.status == Status::kMalformed || at_end;
        return v;
      }
      const size_t p = skip_ws(t, list.end);
      if (t.substr(p).starts_with(kHermesClose)) {
        pos = p + kHermesClose.size();
        after_call = true;
        continue;
      }
      // The closing tag may be missing at the very end, or still be arriving.
      if (p >= t.size() || (!at_end && begins_tag(t.substr(p), kHermesClose))) return v;
      v.malformed = true;
      return v;
    }
  }
};

class Llama3JsonParser final : public ToolCallParser {
 public:
  bool needs_special_tokens() const override { return true; }
  ToolView view(std::string_view t, bool at_end) const override {
    ToolView v;
    const size_t p = skip_ws(t, 0);
    const std::string_view rest = t.substr(p);
    if (rest.starts_with(kPythonTag)) {
      scan_tail_calls(t, p + kPythonTag.size(), at_end, v);
    } else if (!rest.empty() && rest[0] == '{') {
      scan_tail_calls(t, p, at_end, v);
    } else if (at_end || !(rest.empty() || begins_tag(rest, kPythonTag))) {
      v.content.assign(t);  // not a call: all of it is content
    }
    return v;
  }
};

class MistralParser final : public ToolCallParser {
 public:
  bool needs_special_tokens() const override { return true; }
  bool short_ids() const override { return true; }
  ToolView view(std::string_view t, bool at_end) const override {
    ToolView v;
    const size_t tag = t.find(kMistralTag);
    if (tag == std::string_view::npos) {
      add_content(v, t, false, false, at_end, kMistralTag);
      return v;
    }
    add_content(v, t.substr(0, tag), false, true, at_end, kMistralTag);
    scan_tail_calls(t, tag + kMistralTag.size(), at_end, v);
    return v;
  }
};

class JsonArrayParser final : public ToolCallParser {
 public:
  ToolView view(std::string_view t, bool at_end) const override {
    ToolView v;
    const size_t p = skip_ws(t, 0);
    if (p < t.size() && t[p] != '[')
      v.malformed = true;
    else if (p < t.size() || at_end)
      scan_tail_calls(t, p, at_end, v);
    return v;
  }
};

}  // namespace

std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name) {
  if (name == "hermes") return std::make_unique<HermesParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonParser>();
  if (name == "mistral") return std::make_unique<MistralParser>();
  invalid_argument("--tool-call-parser '" + std::string(name) +
                   "': expected hermes, llama3_json or mistral");
}

std::unique_ptr<ToolCallParser> make_json_array_tool_parser() {
  return std::make_unique<JsonArrayParser>();
}

ToolView parse_tool_calls(const ToolCallParser& parser, std::string_view text) {
  ToolView v = parser.view(text, /*at_end=*/true);
  bool ok = !v.malformed;
  for (const ToolCallView& call : v.calls) ok = ok && call.name_known && !call.name.empty();
  if (ok) return v;
  ToolView fallback;
  fallback.content.assign(text);
  return fallback;
}

}  // namespace pagellm::server
