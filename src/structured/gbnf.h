// GBNF grammars (llama.cpp's EBNF dialect): `name ::= alternatives`, "literals" with \n \t \r \\ \"
// \xHH \uHHHH escapes, [character classes], rule references, ( groups ), `.` (any character), and
// the postfix operators * + ? {m} {m,} {m,n}. '#' starts a comment. The start rule is `root`.
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace pagellm::structured {

// Defines the grammar's rules in `builder`; returns the root rule. Throws kInvalidArgument naming
// the line and problem.
int32_t compile_gbnf(std::string_view text, GrammarBuilder& builder);

}  // namespace pagellm::structured
