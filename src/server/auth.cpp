#include "server/auth.h"

#include <cctype>

namespace pagellm::server {

bool constant_time_equals(std::string_view a, std::string_view b) {
  // Walk the whole of `a` whatever happens, folding differences and the length mismatch into one
  // accumulator, so the time taken leaks nothing about a matching prefix.
  unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) {
    unsigned char cb = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(static_cast<unsigned char>(a[i]) ^ cb);
  }
  // A volatile read keeps the compiler from turning the loop into an early-exit comparison.
  volatile unsigned char result = diff;
  return result == 0;
}

bool authorized(std::string_view authorization, std::string_view api_key) {
  if (api_key.empty()) return true;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
  // The presented token drives the loop length, so the key's length is not probed byte by byte.
  return constant_time_equals(token, api_key);
}

}  // namespace pagellm::server
