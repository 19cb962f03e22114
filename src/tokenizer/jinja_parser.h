// Parses Jinja source into a Program. Everything the engine cannot render is rejected here, with the
// line:col of the construct: unknown statements, filters and tests, malformed expressions, unclosed
// blocks, `break` outside a loop. Nesting depth is capped so that hostile input cannot exhaust the stack.
#pragma once

#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace pagellm::tok::jinja {

// Throws pagellm::Error(kInvalidArgument, "chat template: L:C: ...").
Program parse_template(std::string_view source);

}  // namespace pagellm::tok::jinja
