#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

namespace {

// Chat templates are a few KiB; anything this large is not a chat template and is refused before
// any work is done on it.
constexpr size_t kMaxSourceBytes = 1 << 20;

// The source after Hugging Face's whitespace pre-pass, with the source offset of every byte kept so
// that errors point into the text the user wrote. origin: [text.size() + 1].
struct Preprocessed {
  std::string text;
  std::vector<uint32_t> origin;
};

// Maps a source byte offset to a 1-based line and byte column.
class PositionMap {
 public:
  explicit PositionMap(std::string_view source) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\n') line_starts_.push_back(static_cast<uint32_t>(i + 1));
    }
  }
  SourcePos at(uint32_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return SourcePos{static_cast<uint32_t>(line), offset - line_starts_[line - 1] + 1};
  }

 private:
  std::vector<uint32_t> line_starts_;
};

bool is_line_break(char c) { return c == '\n' || c == '\r'; }

Preprocessed preprocess(std::string_view source) {
  // Jinja drops one trailing newline (keep_trailing_newline=False).
  size_t n = source.size();
  if (n > 0 && source[n - 1] == '\n') --n;

  // lstrip_blocks: spaces/tabs between a line start and "{%" or "{#" are dropped. The reference also
  // matches "{-"; done the same way so that the two renderings never differ.
  Preprocessed stripped;
  stripped.text.reserve(n);
  stripped.origin.reserve(n + 1);
  for (size_t i = 0; i < n;) {
    if (i == 0 || is_line_break(source[i - 1])) {
      size_t j = i;
      while (j < n && (source[j] == ' ' || source[j] == '\t')) ++j;
      if (j + 1 < n && source[j] == '{' &&
          (source[j + 1] == '%' || source[j + 1] == '#' || source[j + 1] == '-')) {
        i = j;
      }
    }
    stripped.text += source[i];
    stripped.origin.push_back(static_cast<uint32_t>(i));
    ++i;
  }

  // trim_blocks: the newline right after "%}", "#}" (and the reference's "-}") is dropped.
  Preprocessed out;
  out.text.reserve(stripped.text.size());
  out.origin.reserve(stripped.text.size() + 1);
  const std::string& t = stripped.text;
  for (size_t i = 0; i < t.size(); ++i) {
    out.text += t[i];
    out.origin.push_back(stripped.origin[i]);
    if (i + 2 < t.size() && (t[i] == '%' || t[i] == '#' || t[i] == '-') && t[i + 1] == '}' &&
        t[i + 2] == '\n') {
      out.text += t[i + 1];
      out.origin.push_back(stripped.origin[i + 1]);
      i += 2;
    }
  }
  out.origin.push_back(static_cast<uint32_t>(n));
  return out;
}

struct Rule {
  std::string_view text;
  TokenType type;
};

// Longest operators first where one is a prefix of another ("**" before "*", "//" before "/").
constexpr std::array<Rule, 29> kRules = {{
    {"{%", TokenType::kOpenStatement},  {"%}", TokenType::kCloseStatement},
    {"{{", TokenType::kOpenExpression}, {"}}", TokenType::kCloseExpression},
    {"(", TokenType::kOpenParen},       {")", TokenType::kCloseParen},
    {"{", TokenType::kOpenBrace},       {"}", TokenType::kCloseBrace},
    {"[", TokenType::kOpenBracket},     {"]", TokenType::kCloseBracket},
    {",", TokenType::kComma},           {".", TokenType::kDot},
    {":", TokenType::kColon},           {"|", TokenType::kPipe},
    {"<=", TokenType::kComparison},     {">=", TokenType::kComparison},
    {"==", TokenType::kComparison},     {"!=", TokenType::kComparison},
    {"<", TokenType::kComparison},      {">", TokenType::kComparison},
    {"+", TokenType::kAdditive},        {"-", TokenType::kAdditive},
    {"~", TokenType::kAdditive},        {"**", TokenType::kPower},
    {"*", TokenType::kMultiplicative},  {"//", TokenType::kMultiplicative},
    {"/", TokenType::kMultiplicative},  {"%", TokenType::kMultiplicative},
    {"=", TokenType::kEquals},
}};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) {
  return is_digit(c) || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source) : map_(source), pre_(preprocess(source)), src_(pre_.text) {}

  std::vector<Token> run() {
    while (cur_ < src_.size()) step();
    return std::move(tokens_);
  }

 private:
  SourcePos pos_at(size_t i) const { return map_.at(pre_.origin[std::min(i, src_.size())]); }
  [[noreturn]] void fail(size_t i, const std::string& message) const { template_error(pos_at(i), message); }
  bool starts_with(std::string_view s) const { return src_.substr(cur_, s.size()) == s; }
  void push(TokenType type, std::string value, size_t at) {
    tokens_.push_back(Token{type, std::move(value), pos_at(at)});
  }
  bool last_is(std::initializer_list<TokenType> types) const {
    if (tokens_.empty()) return false;
    return std::find(types.begin(), types.end(), tokens_.back().type) != types.end();
  }

  void skip_whitespace() {
    while (cur_ < src_.size()) {
      size_t len = 0;
      if (!is_js_whitespace(decode_utf8(src_, cur_, &len))) break;
      cur_ += len;
    }
  }

  // `{%-`, `{{-`, `{#-`: the text before the tag loses its trailing whitespace.
  void strip_trailing_text() {
    if (tokens_.empty() || tokens_.back().type != TokenType::kText) return;
    std::string& text = tokens_.back().value;
    text.resize(trim_whitespace(text, false, true).size());
    if (text.empty()) tokens_.pop_back();
  }

  void step() {
    if (tokens_.empty() || last_is({TokenType::kCloseStatement, TokenType::kCloseExpression,
                                    TokenType::kComment})) {
      const size_t start = cur_;
      while (cur_ < src_.size() &&
             !(src_[cur_] == '{' && cur_ + 1 < src_.size() &&
               (src_[cur_ + 1] == '%' || src_[cur_ + 1] == '{' || src_[cur_ + 1] == '#'))) {
        ++cur_;
      }
      if (cur_ > start) {
        push(TokenType::kText, std::string(src_.substr(start, cur_ - start)), start);
        return;
      }
    }
    if (starts_with("{#")) return lex_comment();
    if (starts_with("{%-") || starts_with("{{-")) {
      strip_trailing_text();
      const bool statement = src_[cur_ + 1] == '%';
      push(statement ? TokenType::kOpenStatement : TokenType::kOpenExpression,
           statement ? "{%" : "{{", cur_);
      if (!statement) curly_depth_ = 0;
      cur_ += 3;
      return;
    }
    skip_whitespace();
    if (cur_ >= src_.size()) return;
    if (starts_with("-%}") || starts_with("-}}")) {
      const bool statement = src_[cur_ + 1] == '%';
      push(statement ? TokenType::kCloseStatement : TokenType::kCloseExpression,
           statement ? "%}" : "}}", cur_);
      cur_ += 3;
      skip_whitespace();
      return;
    }
    const char c = src_[cur_];
    if ((c == '-' || c == '+') && lex_sign()) return;
    for (const Rule& rule : kRules) {
      if (rule.text == "}}" && curly_depth_ > 0) continue;
      if (!starts_with(rule.text)) continue;
      push(rule.type, std::string(rule.text), cur_);
      if (rule.type == TokenType::kOpenExpression) curly_depth_ = 0;
      if (rule.type == TokenType::kOpenBrace) ++curly_depth_;
      if (rule.type == TokenType::kCloseBrace) --curly_depth_;
      cur_ += rule.text.size();
      return;
    }
    if (c == '\'' || c == '"') return lex_string(c);
    if (is_digit(c)) {
      const size_t start = cur_;
      std::string num = digits();
      if (!last_is({TokenType::kDot}) && cur_ + 1 < src_.size() && src_[cur_] == '.' &&
          is_digit(src_[cur_ + 1])) {
        ++cur_;
        num += '.';
        num += digits();
      }
      push(TokenType::kNumber, std::move(num), start);
      return;
    }
    if (is_word(c)) {
      const size_t start = cur_;
      while (cur_ < src_.size() && is_word(src_[cur_])) ++cur_;
      push(TokenType::kIdentifier, std::string(src_.substr(start, cur_ - start)), start);
      return;
    }
    size_t len = 0;
    decode_utf8(src_, cur_, &len);
    fail(cur_, "unexpected character '" + std::string(src_.substr(cur_, len)) + "'");
  }

  std::string digits() {
    const size_t start = cur_;
    while (cur_ < src_.size() && is_digit(src_[cur_])) ++cur_;
    return std::string(src_.substr(start, cur_ - start));
  }

  // A sign after an operand is a binary operator (returns false); elsewhere it is unary and, when
  // digits follow, part of a number literal.
  bool lex_sign() {
    if (tokens_.empty() || last_is({TokenType::kText})) fail(cur_, "unexpected sign outside a tag");
    if (last_is({TokenType::kIdentifier, TokenType::kNumber, TokenType::kString,
                 TokenType::kCloseParen, TokenType::kCloseBracket})) {
      return false;
    }
    const size_t start = cur_;
    const char sign = src_[cur_++];
    std::string num(1, sign);
    num += digits();
    if (num.size() > 1 && cur_ + 1 < src_.size() && src_[cur_] == '.' && is_digit(src_[cur_ + 1])) {
      ++cur_;
      num += '.';
      num += digits();
    }
    push(num.size() == 1 ? TokenType::kUnary : TokenType::kNumber, std::move(num), start);
    return true;
  }

  void lex_comment() {
    const size_t start = cur_;
    cur_ += 2;
    const bool strip_before = cur_ < src_.size() && src_[cur_] == '-';
    if (strip_before) ++cur_;
    const size_t end = src_.find("#}", cur_);
    if (end == std::string_view::npos) fail(start, "comment is not closed with #}");
    std::string body(src_.substr(cur_, end - cur_));
    const bool strip_after = !body.empty() && body.back() == '-';
    if (strip_after) body.pop_back();
    if (strip_before) strip_trailing_text();
    push(TokenType::kComment, std::move(body), start);
    cur_ = end + 2;
    if (strip_after) skip_whitespace();
  }

  void lex_string(char quote) {
    const size_t start = cur_++;
    std::string value;
    while (true) {
      if (cur_ >= src_.size()) fail(start, "string literal is not closed");
      const char c = src_[cur_];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++cur_;
        continue;
      }
      if (++cur_ >= src_.size()) fail(start, "string literal is not closed");
      const char e = src_[cur_++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\\': value += '\\'; break;
        case 'x':
        case 'u': {
          const size_t num_digits = e == 'x' ? 2 : 4;
          char32_t cp = 0;
          for (size_t k = 0; k < num_digits; ++k) {
            const int h = cur_ + k < src_.size() ? hex_value(src_[cur_ + k]) : -1;
            if (h < 0) fail(cur_ - 2, std::string("invalid \\") + e + " escape in string literal");
            cp = cp * 16 + static_cast<char32_t>(h);
          }
          cur_ += num_digits;
          append_utf8(value, cp);
          break;
        }
        default: fail(cur_ - 2, std::string("unknown escape \\") + e + " in string literal");
      }
    }
    ++cur_;  // closing quote
    push(TokenType::kString, std::move(value), start);
  }

  PositionMap map_;
  Preprocessed pre_;
  std::string_view src_;
  size_t cur_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

const char* token_type_name(TokenType type) {
  switch (type) {
    case TokenType::kText: return "text";
    case TokenType::kComment: return "comment";
    case TokenType::kNumber: return "number";
    case TokenType::kString: return "string";
    case TokenType::kIdentifier: return "name";
    case TokenType::kEquals: return "'='";
    case TokenType::kOpenParen: return "'('";
    case TokenType::kCloseParen: return "')'";
    case TokenType::kOpenStatement: return "'{%'";
    case TokenType::kCloseStatement: return "'%}'";
    case TokenType::kOpenExpression: return "'{{'";
    case TokenType::kCloseExpression: return "'}}'";
    case TokenType::kOpenBracket: return "'['";
    case TokenType::kCloseBracket: return "']'";
    case TokenType::kOpenBrace: return "'{'";
    case TokenType::kCloseBrace: return "'}'";
    case TokenType::kComma: return "','";
    case TokenType::kDot: return "'.'";
    case TokenType::kColon: return "':'";
    case TokenType::kPipe: return "'|'";
    case TokenType::kAdditive: return "operator";
    case TokenType::kMultiplicative: return "operator";
    case TokenType::kPower: return "'**'";
    case TokenType::kComparison: return "comparison";
    case TokenType::kUnary: return "sign";
  }
  return "token";
}

std::vector<Token> tokenize(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    template_error(SourcePos{1, 1}, "template is larger than " + std::to_string(kMaxSourceBytes) + " bytes");
  }
  return Lexer(source).run();
}

}  // namespace pagellm::tok::jinja
