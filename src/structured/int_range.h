// Decimal integers within bounds, as a grammar expression: canonical JSON integers (no leading
// zeros, no "-0") between lo and hi inclusive, either side open when absent. Built digit by digit
// (the classic range-to-regex construction), so the size is quadratic in the number of digits
// whatever the width of the range.
#pragma once

#include <cstdint>
#include <optional>

#include "structured/grammar.h"

namespace pagellm::structured {

// max_digits: the longest magnitude allowed on an open side.
ExprPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi, int max_digits);

}  // namespace pagellm::structured
