#include "structured/regex.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include "common/error.h"

namespace pagellm::structured {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // code point ranges, inclusive

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.push_back({lo, hi});
    }
  }
  return out;
}

Ranges negated(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalized(r)) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, GrammarBuilder& b, const RegexOptions& o)
      : p_(p), b_(b), opt_(o) {}

  ExprPtr parse() {
    if (p_.size() > b_.limits().max_spec_bytes) {
      invalid_argument("regex: longer than " + std::to_string(b_.limits().max_spec_bytes) +
                       " bytes (limit)");
    }
    if (peek('^')) ++i_;
    ExprPtr e = parse_alt(0);
    if (i_ < p_.size()) fail("unbalanced ')'");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    invalid_argument("regex: " + what + " at offset " + std::to_string(i_));
  }
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }
  bool at_end() const { return i_ >= p_.size(); }

  ExprPtr parse_alt(int depth) {
    if (depth > b_.limits().max_nesting) {
      fail("groups nested deeper than " + std::to_string(b_.limits().max_nesting) + " (limit)");
    }
    std::vector<ExprPtr> alts{parse_concat(depth)};
    while (peek('|')) {
      ++i_;
      alts.push_back(parse_concat(depth));
    }
    return alt(std::move(alts));
  }

  ExprPtr parse_concat(int depth) {
    std::vector<ExprPtr> items;
    while (!at_end() && !peek('|') && !peek(')')) {
      b_.deadline().check();
      if (peek('$') && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      items.push_back(parse_repeat(depth));
    }
    return seq(std::move(items));
  }

  int parse_int() {
    if (at_end() || p_[i_] < '0' || p_[i_] > '9') fail("expected a number in {}");
    long v = 0;
    while (!at_end() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_++] - '0');
      if (v > b_.limits().max_repeat) {
        fail("repetition bound larger than " + std::to_string(b_.limits().max_repeat) + " (limit)");
      }
    }
    return int(v);
  }

  ExprPtr parse_repeat(int depth) {
    ExprPtr e = parse_atom(depth);
    while (!at_end()) {
      int lo = 0, hi = -1;
      const char c = p_[i_];
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        ++i_, lo = 1;
      } else if (c == '?') {
        ++i_, hi = 1;
      } else if (c == '{' && i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9') {
        ++i_;
        lo = hi = parse_int();
        if (peek(',')) {
          ++i_;
          hi = peek('}') ? -1 : parse_int();
        }
        if (!peek('}')) fail("expected '}'");
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
      } else {
        break;
      }
      if (peek('?') || peek('+')) ++i_;  // lazy / possessive: same language
      e = repeat(e, lo, hi);
    }
    return e;
  }

  ExprPtr parse_atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (peek('?')) {
        ++i_;
        if (peek(':')) {
          ++i_;
        } else if (peek('<') && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
          skip_name('>');
        } else if (peek('P') && i_ + 1 < p_.size() && p_[i_ + 1] == '<') {
          ++i_;
          skip_name('>');
        } else {
          fail("unsupported group (lookaround and inline flags are not supported)");
        }
      }
      ExprPtr e = parse_alt(depth + 1);
      if (!peek(')')) fail("missing ')'");
      ++i_;
      return e;
    }
    if (c == '[') return ranges_expr(parse_class());
    if (c == '.') {
      ++i_;
      return ranges_expr(negated({{'\n', '\n'}}));
    }
    if (c == '\\') return parse_escape_atom();
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    if (c == '{') {
      ++i_;
      return ranges_expr({{'{', '{'}});
    }
    const uint32_t cp = next_code_point();
    return ranges_expr({{cp, cp}});
  }

  void skip_name(char close) {
    ++i_;
    while (!at_end() && p_[i_] != close) ++i_;
    if (at_end()) fail("unterminated group name");
    ++i_;
  }

  // One UTF-8 encoded code point of the pattern.
  uint32_t next_code_point() {
    const auto b0 = uint8_t(p_[i_]);
    if (b0 < 0x80) {
      ++i_;
      return b0;
    }
    const int len = b0 >= 0xF8 ? 0 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 ? 2 : 0;
    if (len == 0 || i_ + size_t(len) > p_.size()) fail("invalid UTF-8");
    uint32_t cp = b0 & (0x3F >> (len - 1));
    for (int k = 1; k < len; ++k) {
      const auto b = uint8_t(p_[i_ + size_t(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMinOfLen[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMinOfLen[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      fail("invalid UTF-8");
    i_ += size_t(len);
    return cp;
  }

  uint32_t parse_hex(size_t num_digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < num_digits; ++k, ++i_) {
      if (at_end() || !std::isxdigit(uint8_t(p_[i_]))) fail("bad hex escape");
      const char h = p_[i_];
      v = v * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash: the class it names, as ranges.
  Ranges parse_escape() {
    if (at_end()) fail("trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd':
        return {{'0', '9'}};
      case 'D':
        return negated({{'0', '9'}});
      case 'w':
        return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
      case 'W':
        return negated({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
      case 's':
        return {{'\t', '\r'}, {' ', ' '}};
      case 'S':
        return negated({{'\t', '\r'}, {' ', ' '}});
      case 'n':
        return {{'\n', '\n'}};
      case 't':
        return {{'\t', '\t'}};
      case 'r':
        return {{'\r', '\r'}};
      case 'f':
        return {{'\f', '\f'}};
      case 'v':
        return {{'\v', '\v'}};
      case '0':
        return {{0, 0}};
      case 'x': {
        const uint32_t v = parse_hex(2);
        return {{v, v}};
      }
      case 'u': {
        const uint32_t v = parse_hex(4);
        return {{v, v}};
      }
      case 'b':
      case 'B':
      case 'A':
      case 'z':
      case 'Z':
        fail("unsupported anchor '\\" + std::string(1, c) + "'");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        if (std::isalnum(uint8_t(c))) fail("unknown escape '\\" + std::string(1, c) + "'");
        return {{uint8_t(c), uint8_t(c)}};
    }
  }

  ExprPtr parse_escape_atom() {
    ++i_;
    return ranges_expr(parse_escape());
  }

  Ranges parse_class() {
    ++i_;  // '['
    const bool negate = peek('^');
    if (negate) ++i_;
    Ranges r;
    bool first = true;
    while (!at_end() && (first || !peek(']'))) {
      first = false;
      b_.deadline().check();
      Ranges item;
      if (peek('\\')) {
        ++i_;
        item = parse_escape();
      } else {
        const uint32_t cp = next_code_point();
        item = {{cp, cp}};
      }
      if (item.size() == 1 && item[0].first == item[0].second && peek('-') && i_ + 1 < p_.size() &&
          p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        if (peek('\\')) {
          ++i_;
          const Ranges h = parse_escape();
          if (h.size() != 1 || h[0].first != h[0].second) fail("bad class range");
          hi = h[0].first;
        } else {
          hi = next_code_point();
        }
        if (hi < item[0].first) fail("class range out of order");
        item[0].second = hi;
      }
      r.insert(r.end(), item.begin(), item.end());
    }
    if (!peek(']')) fail("missing ']'");
    ++i_;
    return negate ? negated(r) : normalized(r);
  }

  ExprPtr ranges_expr(Ranges r) {
    r = normalized(std::move(r));
    ByteSet ascii;
    std::vector<ExprPtr> alts;
    for (const auto& [lo, hi] : r) {
      if (lo < 0x80) ascii.set_range(uint8_t(lo), uint8_t(std::min<uint32_t>(hi, 0x7F)));
      if (hi >= 0x80) alts.push_back(utf8_range(std::max<uint32_t>(lo, 0x80), hi));
    }
    if (opt_.json_string) {
      ByteSet bad;
      bad.set_range(0, 0x1F);
      bad.set('"');
      bad.set('\\');
      ascii.subtract(bad);
    }
    if (!ascii.empty()) alts.insert(alts.begin(), bytes_expr(ascii));
    if (alts.empty()) fail("character class matches nothing");
    return alt(std::move(alts));
  }

  std::string_view p_;
  GrammarBuilder& b_;
  RegexOptions opt_;
  size_t i_ = 0;
};

}  // namespace

ExprPtr compile_regex(std::string_view pattern, GrammarBuilder& builder,
                      const RegexOptions& options) {
  return RegexParser(pattern, builder, options).parse();
}

}  // namespace pagellm::structured
