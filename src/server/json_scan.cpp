#include "server/json_scan.h"

#include <cstring>

namespace pagellm::server::json_scan {
namespace {

// What the scanner expects next inside the innermost container.
enum class Expect { kValue, kValueOrClose, kKey, kKeyOrClose, kColon, kCommaOrClose };

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// A string starting at the quote t[i].
Result scan_string(std::string_view t, size_t i) {
  for (++i; i < t.size(); ++i) {
    const auto c = static_cast<unsigned char>(t[i]);
    if (c == '"') return {Status::kComplete, i + 1};
    if (c < 0x20) return {Status::kMalformed, i};  // raw control characters must be escaped
    if (c != '\\') continue;
    if (++i >= t.size()) break;
    if (t[i] == 'u') {
      for (int k = 0; k < 4; ++k) {
        if (++i >= t.size()) return {Status::kIncomplete, t.size()};
        if (!is_hex(t[i])) return {Status::kMalformed, i};
      }
    } else if (!std::strchr("\"\\/bfnrt", t[i]) || t[i] == '\0') {
      return {Status::kMalformed, i};
    }
  }
  return {Status::kIncomplete, t.size()};
}

// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? starting at t[i].
Result scan_number(std::string_view t, size_t i, bool at_end) {
  // Each part needs at least one digit; `need_digit` is false once the number so far is whole.
  bool need_digit = true;
  const auto ended = [&](size_t at) {
    if (at >= t.size() && !at_end) return Result{Status::kIncomplete, t.size()};
    return need_digit ? Result{at >= t.size() ? Status::kIncomplete : Status::kMalformed, at}
                      : Result{Status::kComplete, at};
  };
  if (t[i] == '-') ++i;
  if (i >= t.size()) return ended(i);
  if (t[i] == '0') {
    ++i;
    need_digit = false;
  } else {
    while (i < t.size() && is_digit(t[i])) ++i, need_digit = false;
  }
  if (need_digit || i >= t.size()) return ended(i);
  if (t[i] == '.') {
    need_digit = true;
    for (++i; i < t.size() && is_digit(t[i]); ++i) need_digit = false;
    if (need_digit || i >= t.size()) return ended(i);
  }
  if (t[i] == 'e' || t[i] == 'E') {
    need_digit = true;
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    for (; i < t.size() && is_digit(t[i]); ++i) need_digit = false;
  }
  return ended(i);
}

Result scan_literal(std::string_view t, size_t i) {
  const char* word = t[i] == 't' ? "true" : t[i] == 'f' ? "false" : "null";
  const size_t n = std::strlen(word);
  for (size_t k = 0; k < n; ++k) {
    if (i + k >= t.size()) return {Status::kIncomplete, t.size()};
    if (t[i + k] != word[k]) return {Status::kMalformed, i + k};
  }
  return {Status::kComplete, i + n};
}

}  // namespace

size_t skip_ws(std::string_view text, size_t pos) {
  while (pos < text.size() &&
         (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n' || text[pos] == '\r'))
    ++pos;
  return pos;
}

Result scan_value(std::string_view t, size_t begin, bool at_end) {
  char stack[kMaxDepth];  // [depth] '{' or '[' of each open container
  int depth = 0;
  Expect expect = Expect::kValue;
  size_t i = begin;
  for (;;) {
    if (depth > 0) i = skip_ws(t, i);
    if (i >= t.size()) return {Status::kIncomplete, t.size()};
    const char c = t[i];
    bool value_done = false;
    if (expect == Expect::kColon) {
      if (c != ':') return {Status::kMalformed, i};
      ++i;
      expect = Expect::kValue;
      continue;
    }
    const bool closing =
        (expect == Expect::kValueOrClose && c == ']') ||
        (expect == Expect::kKeyOrClose && c == '}') ||
        (expect == Expect::kCommaOrClose && c == (stack[depth - 1] == '{' ? '}' : ']'));
    if (closing) {
      --depth;
      ++i;
      value_done = true;
    } else if (expect == Expect::kCommaOrClose) {
      if (c != ',') return {Status::kMalformed, i};
      ++i;
      expect = stack[depth - 1] == '{' ? Expect::kKey : Expect::kValue;
      continue;
    } else if (expect == Expect::kKey || expect == Expect::kKeyOrClose) {
      if (c != '"') return {Status::kMalformed, i};
      const Result r = scan_string(t, i);
      if (r.status != Status::kComplete) return r;
      i = r.end;
      expect = Expect::kColon;
      continue;
    } else if (c == '{' || c == '[') {
      if (depth == kMaxDepth) return {Status::kMalformed, i};
      stack[depth++] = c;
      ++i;
      expect = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
      continue;
    } else {
      Result r;
      if (c == '"')
        r = scan_string(t, i);
      else if (c == '-' || is_digit(c))
        r = scan_number(t, i, at_end && depth == 0);
      else if (c == 't' || c == 'f' || c == 'n')
        r = scan_literal(t, i);
      else
        return {Status::kMalformed, i};
      if (r.status != Status::kComplete) return r;
      i = r.end;
      value_done = true;
    }
    if (value_done) {
      if (depth == 0) return {Status::kComplete, i};
      expect = Expect::kCommaOrClose;
    }
  }
}

}  // namespace pagellm::server::json_scan
