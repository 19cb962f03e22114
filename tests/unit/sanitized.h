// The sanitizer build (PAGELLM_SANITIZE: Debug, -O0, ASan + UBSan) runs model code ~50x slower than
// Release. Tests that run trained models give it a smaller workload (fewer prompts and tokens):
// the same code paths, which is what the sanitizers check; Release runs the full workload.
#pragma once

namespace pagellm::testing {

#ifdef PAGELLM_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace pagellm::testing
