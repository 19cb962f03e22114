// The one error type of pagellm. Load-time and request-validation failures throw pagellm::Error with a
// kind (mapped to exit codes by the CLI and to HTTP statuses by the server) and a one-line message that
// names the file or field and what was expected. Never thrown from per-token hot loops.
#pragma once

#include <stdexcept>
#include <string>

namespace pagellm {

enum class ErrorKind {
  kInvalidArgument,    // bad user input: flags, request fields, malformed files
  kNotFound,           // missing file, unknown model or request id
  kUnsupported,        // valid but not implemented: architecture, dtype, tokenizer component
  kResourceExhausted,  // out of KV blocks, queue full, too large
  kInternal,           // a broken invariant inside pagellm
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

// Shorthands for the common kinds.
[[noreturn]] inline void invalid_argument(const std::string& message) {
  throw_error(ErrorKind::kInvalidArgument, message);
}
[[noreturn]] inline void unsupported(const std::string& message) {
  throw_error(ErrorKind::kUnsupported, message);
}

}  // namespace pagellm
