// Jinja lexer with the whitespace rules Hugging Face renders chat templates with: trim_blocks and
// lstrip_blocks on, a single trailing newline dropped, `{%- -%}` / `{{- -}}` / `{#- -#}` stripping.
// Token positions refer to the original source even though the whitespace pre-pass edits it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace pagellm::tok::jinja {

enum class TokenType : uint8_t {
  kText,            // raw text between tags
  kComment,         // {# ... #}
  kNumber,          // 12, 1.5, -3 (a sign directly before digits in operand position)
  kString,          // 'abc' / "abc", escapes resolved
  kIdentifier,      // names and keywords (if, for, in, not, and, ...)
  kEquals,          // =
  kOpenParen,       // (
  kCloseParen,      // )
  kOpenStatement,   // {%
  kCloseStatement,  // %}
  kOpenExpression,  // {{
  kCloseExpression, // }}
  kOpenBracket,     // [
  kCloseBracket,    // ]
  kOpenBrace,       // {
  kCloseBrace,      // }
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,        // + - ~
  kMultiplicative,  // * / // %
  kPower,           // **
  kComparison,      // < > <= >= == !=
  kUnary,           // + or - in operand position not followed by a digit
};

struct Token {
  TokenType type;
  std::string value;
  SourcePos pos;
};

const char* token_type_name(TokenType type);

// Throws pagellm::Error(kInvalidArgument, "chat template: L:C: ...") on malformed input.
std::vector<Token> tokenize(std::string_view source);

}  // namespace pagellm::tok::jinja
