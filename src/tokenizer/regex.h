// PCRE2 regular expressions as the tokenizer uses them: patterns written for Oniguruma (what Hugging
// Face's Rust tokenizers compile) run with UTF + UCP semantics and the JIT. Compiled once at load;
// matching is const and thread-safe (match data and JIT stack are per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::tok {

struct MatchRange {
  size_t begin;
  size_t end;
};

class Regex {
 public:
  // Throws pagellm::Error(kInvalidArgument) naming `where` when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-empty, non-overlapping leftmost matches in `text` (valid UTF-8) to `out`.
  void find_all(std::string_view text, std::vector<MatchRange>& out) const { find_some(text, 0, SIZE_MAX, out); }
  // Like find_all, but starts at byte `start` (lookarounds still see the whole text) and stops after
  // `max_matches`. Returns where to resume: the end of the last match, or text.size() when done.
  size_t find_some(std::string_view text, size_t start, size_t max_matches, std::vector<MatchRange>& out) const;

 private:
  struct Code;
  std::unique_ptr<Code> code_;
};

// Rewrites Oniguruma-only escapes to PCRE2: \s and \S become the White_Space property (PCRE2's \s also
// matches U+180E, Oniguruma's does not). Exposed for tests.
std::string oniguruma_to_pcre2(const std::string& pattern);

}  // namespace pagellm::tok
