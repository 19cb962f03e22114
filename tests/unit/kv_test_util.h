// Helpers of the KV manager tests.
#pragma once

#include <cstdint>
#include <numeric>
#include <vector>

namespace pagellm::kv::testing {

// Token ids offset, offset + 1, ..., offset + n - 1.
inline std::vector<int32_t> tokens(int n, int offset = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), offset);
  return t;
}

}  // namespace pagellm::kv::testing
