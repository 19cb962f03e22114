// The sanitizer build (PAGELLM_SANITIZE: ASan + UBSan, the library at -O1, the tests at -O0) runs
// model code several times slower than Release. Tests that run trained models give it a smaller
// workload (fewer prompts and tokens): the same code paths, which is what the sanitizers check;
// Release runs the full workload.
#pragma once

namespace pagellm::testing {

#ifdef PAGELLM_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace pagellm::testing
