// Finds where one JSON value ends in a text that may still grow (model output read while it is
// generated), validating it on the way. One pass with an explicit stack: linear time, no recursion.
#pragma once

#include <cstddef>
#include <string_view>

namespace pagellm::server::json_scan {

enum class Status {
  kComplete,    // a whole value: text[begin, end)
  kIncomplete,  // a valid prefix of a value that the text ends inside
  kMalformed,   // not JSON: end is where it broke
};

struct Result {
  Status status = Status::kIncomplete;
  size_t end = 0;
};

constexpr int kMaxDepth = 64;  // nesting of arrays / objects; deeper is malformed

// Scans the value starting exactly at `begin` (no leading whitespace). With `at_end`, a number or
// literal running to the end of the text is complete; otherwise more digits could follow.
Result scan_value(std::string_view text, size_t begin, bool at_end);

// The first position at or after `pos` that is not JSON whitespace.
size_t skip_ws(std::string_view text, size_t pos);

}  // namespace pagellm::server::json_scan
