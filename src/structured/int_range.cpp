#include "structured/int_range.h"

#include <algorithm>
#include <string>
#include <vector>

namespace pagellm::structured {
namespace {

ExprPtr digits(size_t n) { return repeat(byte_range('0', '9'), int32_t(n), int32_t(n)); }

// Digit strings of x's length between x and y (x <= y, equal lengths).
ExprPtr same_length(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (n == 0) return seq({});
  if (x.find_first_not_of('0') == std::string::npos &&
      y.find_first_not_of('9') == std::string::npos)
    return digits(n);
  const std::string head_x = x.substr(0, 1), head_y = y.substr(0, 1);
  if (x[0] == y[0]) return seq({literal(head_x), same_length(x.substr(1), y.substr(1))});
  std::vector<ExprPtr> alts;
  alts.push_back(seq({literal(head_x), same_length(x.substr(1), std::string(n - 1, '9'))}));
  if (x[0] + 1 <= y[0] - 1)
    alts.push_back(seq({byte_range(uint8_t(x[0] + 1), uint8_t(y[0] - 1)), digits(n - 1)}));
  alts.push_back(seq({literal(head_y), same_length(std::string(n - 1, '0'), y.substr(1))}));
  return alt(std::move(alts));
}

// Non-negative integers in [a, b] (unbounded: no b, up to max_digits digits, at least a's).
// (Plain integers rather than std::optional: GCC 12 misreports optionals here as uninitialized.)
ExprPtr magnitude_range(uint64_t a, bool bounded, uint64_t b, int max_digits) {
  const std::string sa = std::to_string(a);
  const std::string sb = bounded ? std::to_string(b) : std::string();
  const size_t len_a = sa.size();
  const size_t len_b = bounded ? sb.size() : std::max(size_t(max_digits), len_a);
  if (len_a == len_b) return same_length(sa, bounded ? sb : std::string(len_a, '9'));
  std::vector<ExprPtr> alts;
  alts.push_back(same_length(sa, std::string(len_a, '9')));
  if (len_b > len_a + 1) {  // every number with a length strictly between
    alts.push_back(seq(
        {byte_range('1', '9'), repeat(byte_range('0', '9'), int32_t(len_a), int32_t(len_b - 2))}));
  }
  std::string smallest(len_b, '0');
  smallest[0] = '1';
  alts.push_back(same_length(smallest, bounded ? sb : std::string(len_b, '9')));
  return alt(std::move(alts));
}

// |v| for a negative v, without overflow at INT64_MIN.
uint64_t magnitude(int64_t v) { return uint64_t(-(v + 1)) + 1; }

}  // namespace

ExprPtr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi, int max_digits) {
  const bool has_lo = lo.has_value(), has_hi = hi.has_value();
  const int64_t l = lo.value_or(0), h = hi.value_or(0);
  std::vector<ExprPtr> alts;
  if (!has_lo || l < 0) {  // negative part: "-" and a magnitude in [max(1, -hi), -lo]
    const uint64_t min_mag = has_hi && h < 0 ? magnitude(h) : 1;
    alts.push_back(seq(
        {literal("-"), magnitude_range(min_mag, has_lo, has_lo ? magnitude(l) : 0, max_digits)}));
  }
  if (!has_hi || h >= 0) {
    alts.push_back(magnitude_range(has_lo && l > 0 ? uint64_t(l) : 0, has_hi,
                                   has_hi ? uint64_t(h) : 0, max_digits));
  }
  return alt(std::move(alts));
}

}  // namespace pagellm::structured
