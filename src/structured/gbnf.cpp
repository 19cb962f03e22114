#include "structured/gbnf.h"

#include <cctype>
#include <string>
#include <vector>

#include "common/error.h"
#include "structured/regex.h"

namespace pagellm::structured {
namespace {

bool name_char(char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.'; }

class GbnfParser {
 public:
  GbnfParser(std::string_view t, GrammarBuilder& b) : t_(t), b_(b) {}

  int32_t parse() {
    if (t_.size() > b_.limits().max_spec_bytes) {
      invalid_argument("grammar: longer than " + std::to_string(b_.limits().max_spec_bytes) +
                       " bytes (limit)");
    }
    skip_space(true);
    if (at_end()) fail("empty grammar");
    while (!at_end()) {
      const std::string name = parse_name();
      skip_space(true);
      if (t_.substr(i_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const int32_t id = b_.rule(name);
      if (b_.defined(id)) fail("rule '" + name + "' defined twice");
      b_.define(id, parse_alt(0));
      skip_space(true);
    }
    const int32_t root = b_.rule("root");
    if (!b_.defined(root)) invalid_argument("grammar: no 'root' rule");
    return root;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    invalid_argument("grammar: " + what + " (line " + std::to_string(line) + ")");
  }
  bool at_end() const { return i_ >= t_.size(); }

  // Skips blanks and comments; newlines too when `newlines` (or inside parentheses).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = t_[i_];
      if (c == '#') {
        while (!at_end() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = i_;
    while (!at_end() && name_char(t_[i_])) ++i_;
    if (i_ == start) fail("expected a rule name");
    return std::string(t_.substr(start, i_ - start));
  }

  // A newline ends the rule unless the next line continues it (starts with '|' or the rule is
  // inside parentheses); a line holding "name ::=" starts the next rule.
  bool rule_continues(int depth) {
    const size_t save = i_;
    skip_space(true);
    if (at_end()) return false;
    if (depth > 0) return true;
    size_t k = i_;
    while (k < t_.size() && name_char(t_[k])) ++k;
    size_t j = k;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t')) ++j;
    const bool next_rule = k > i_ && t_.substr(j, 3) == "::=";
    if (next_rule) i_ = save;
    return !next_rule;
  }

  ExprPtr parse_alt(int depth) {
    if (depth > b_.limits().max_nesting)
      fail("parentheses nested deeper than " + std::to_string(b_.limits().max_nesting) +
           " (limit)");
    std::vector<ExprPtr> alts{parse_seq(depth)};
    while (!at_end() && t_[i_] == '|') {
      ++i_;
      alts.push_back(parse_seq(depth));
    }
    return alt(std::move(alts));
  }

  ExprPtr parse_seq(int depth) {
    std::vector<ExprPtr> items;
    for (;;) {
      b_.deadline().check();
      skip_space(depth > 0);
      if (!at_end() && t_[i_] == '\n') {
        if (!rule_continues(depth)) break;
        continue;
      }
      if (at_end() || t_[i_] == '|' || t_[i_] == ')') break;
      items.push_back(parse_postfix(parse_atom(depth)));
    }
    return seq(std::move(items));
  }

  ExprPtr parse_atom(int depth) {
    const char c = t_[i_];
    if (c == '"') return parse_literal();
    if (c == '[') {
      const size_t start = i_++;
      while (!at_end() && t_[i_] != ']') i_ += t_[i_] == '\\' ? 2 : 1;
      if (at_end()) fail("missing ']'");
      ++i_;
      return regex_piece(t_.substr(start, i_ - start));
    }
    if (c == '.') {
      ++i_;
      return regex_piece(".");
    }
    if (c == '(') {
      ++i_;
      ExprPtr e = parse_alt(depth + 1);
      skip_space(true);
      if (at_end() || t_[i_] != ')') fail("missing ')'");
      ++i_;
      return e;
    }
    if (name_char(c)) return ref(b_.rule(parse_name()));
    fail(std::string("unexpected '") + c + "'");
  }

  ExprPtr regex_piece(std::string_view piece) {
    try {
      return compile_regex(piece, b_);
    } catch (const Error& e) {
      fail(std::string("bad character class ") + std::string(piece) + ": " + e.what());
    }
  }

  ExprPtr parse_literal() {
    const size_t start = i_++;
    std::string bytes;
    while (!at_end() && t_[i_] != '"') {
      if (t_[i_] == '\n') fail("unterminated string");
      if (t_[i_] != '\\') {
        bytes += t_[i_++];
        continue;
      }
      if (i_ + 1 >= t_.size()) fail("unterminated string");
      const char e = t_[i_ + 1];
      i_ += 2;
      switch (e) {
        case 'n':
          bytes += '\n';
          break;
        case 't':
          bytes += '\t';
          break;
        case 'r':
          bytes += '\r';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i_ + n > t_.size()) fail("bad escape");
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = t_[i_ + k];
            if (!std::isxdigit(uint8_t(h))) fail("bad escape");
            cp = cp * 16 + uint32_t(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          i_ += n;
          append_utf8(bytes, cp);
          break;
        }
        default:
          bytes += e;
      }
    }
    if (at_end()) {
      i_ = start;
      fail("unterminated string");
    }
    ++i_;
    return literal(bytes);
  }

  void append_utf8(std::string& out, uint32_t cp) {
    if (cp > 0x10FFFF) fail("code point out of range");
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)),
          out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    }
  }

  int parse_int() {
    if (at_end() || !std::isdigit(uint8_t(t_[i_]))) fail("expected a number in {}");
    long v = 0;
    while (!at_end() && std::isdigit(uint8_t(t_[i_]))) {
      v = v * 10 + (t_[i_++] - '0');
      if (v > b_.limits().max_repeat)
        fail("repetition bound larger than " + std::to_string(b_.limits().max_repeat) + " (limit)");
    }
    return int(v);
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (at_end()) return e;
      const char c = t_[i_];
      if (c == '*') {
        ++i_, e = repeat(e, 0, -1);
      } else if (c == '+') {
        ++i_, e = repeat(e, 1, -1);
      } else if (c == '?') {
        ++i_, e = repeat(e, 0, 1);
      } else if (c == '{') {
        ++i_;
        skip_space(false);
        const int lo = parse_int();
        int hi = lo;
        skip_space(false);
        if (!at_end() && t_[i_] == ',') {
          ++i_;
          skip_space(false);
          hi = !at_end() && t_[i_] == '}' ? -1 : parse_int();
          skip_space(false);
        }
        if (at_end() || t_[i_] != '}') fail("expected '}'");
        ++i_;
        if (hi >= 0 && hi < lo) fail("repetition {m,n} with n < m");
        e = repeat(e, lo, hi);
      } else {
        return e;
      }
    }
  }

  std::string_view t_;
  GrammarBuilder& b_;
  size_t i_ = 0;
};

}  // namespace

int32_t compile_gbnf(std::string_view text, GrammarBuilder& builder) {
  return GbnfParser(text, builder).parse();
}

}  // namespace pagellm::structured
