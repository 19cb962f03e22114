#include "parallel/fault_injection.h"

#include <chrono>
#include <charconv>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/logging.h"

namespace pagellm::parallel {

namespace {

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out >= 0;
}

}  // namespace

InjectedFault parse_injected_fault(std::string_view spec) {
  const std::string message = "PAGELLM_INJECT_FAULT must be RANK:STEP or RANK:STEP:hang, got '" +
                              std::string(spec.substr(0, 64)) + "'";
  InjectedFault f;
  const size_t a = spec.find(':');
  if (a == std::string_view::npos) invalid_argument(message);
  std::string_view rest = spec.substr(a + 1);
  const size_t b = rest.find(':');
  if (b != std::string_view::npos) {
    if (rest.substr(b + 1) != "hang") invalid_argument(message);
    f.hang = true;
    rest = rest.substr(0, b);
  }
  if (!parse_number(spec.substr(0, a), f.rank) || !parse_number(rest, f.step)) invalid_argument(message);
  return f;
}

std::optional<InjectedFault> injected_fault_from_env() {
  const char* v = std::getenv("PAGELLM_INJECT_FAULT");
  if (v == nullptr || *v == '\0') return std::nullopt;
  const InjectedFault f = parse_injected_fault(v);
  log::warning("PAGELLM_INJECT_FAULT: rank " + std::to_string(f.rank) + " will " +
            (f.hang ? "hang" : "fail") + " at step " + std::to_string(f.step) + " (a test hook)");
  return f;
}

void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t step) {
  if (!fault || fault->rank != rank || fault->step != step) return;
  if (!fault->hang)
    throw_error(ErrorKind::kInternal, "injected fault on rank " + std::to_string(rank) + " at step " +
                                          std::to_string(step) + " (PAGELLM_INJECT_FAULT)");
  log::warning("PAGELLM_INJECT_FAULT: rank " + std::to_string(rank) + " hangs from now on");
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace pagellm::parallel
