// Helpers of the checkpoint checks in quant/: shapes written into messages, and the one-line error
// that names a tensor and its problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/safetensors.h"

namespace pagellm::quant {

// "[n, k]".
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Throws "FILE: tensor 'NAME' <what>" (kInvalidArgument).
[[noreturn]] inline void bad_tensor(const io::TensorView& t, const std::string& what) {
  invalid_argument(t.file + ": tensor '" + t.name + "' " + what);
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace pagellm::quant
