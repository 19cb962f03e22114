// A test hook for the failure paths of parallel groups: PAGELLM_INJECT_FAULT=RANK:STEP[:hang]
// makes world rank RANK throw (or, with `hang`, block for good, as a rank on a lost GPU would) at
// the start of its STEP-th step (0-based, counting execute calls), so tests can check that one
// rank's failure takes the whole group down within a bounded time. Unset, it costs one branch per
// step. A malformed value is a one-line error at startup.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pagellm::parallel {

struct InjectedFault {
  int rank = 0;
  int64_t step = 0;
  bool hang = false;
};

// Throws pagellm::Error (kInvalidArgument) on a malformed spec.
InjectedFault parse_injected_fault(std::string_view spec);
// $PAGELLM_INJECT_FAULT, parsed; nullopt when unset or empty.
std::optional<InjectedFault> injected_fault_from_env();
// Called by each rank at the start of each step: fails or hangs when the fault names this
// (rank, step); otherwise does nothing.
void maybe_inject_fault(const std::optional<InjectedFault>& fault, int rank, int64_t step);

}  // namespace pagellm::parallel
