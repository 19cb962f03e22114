// Regular expressions (the usual syntax: literals, escapes \d \w \s \D \W \S \xHH \uHHHH, classes
// with ranges and negation, ., groups (capturing, (?:), named), |, * + ? {m} {m,} {m,n}, lazy and
// possessive suffixes accepted and ignored, ^ and $ at the ends) compiled to an Expr that matches
// the whole output. Backreferences and lookaround are rejected: matching stays linear-time.
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace pagellm::structured {

struct RegexOptions {
  // Inside a JSON string: never produce '"', '\' or control characters (they would need escaping).
  bool json_string = false;
};

// Throws kInvalidArgument naming the position and problem ("regex: ... at offset N").
ExprPtr compile_regex(std::string_view pattern, GrammarBuilder& builder,
                      const RegexOptions& options = {});

}  // namespace pagellm::structured
