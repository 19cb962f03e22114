// The "pattern" field shared by Split, Replace normalizer and Replace decoder: {"String": s} matches a
// literal, {"Regex": r} a regular expression.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"

namespace pagellm::tok {

class Pattern {
 public:
  Pattern(const nlohmann::json& spec, const std::string& where);
  // Appends the non-overlapping, non-empty matches in `text` (left to right).
  void find_all(std::string_view text, std::vector<MatchRange>& out) const;
  // Bounded, resumable search (see Regex::find_some).
  size_t find_some(std::string_view text, size_t start, size_t max_matches, std::vector<MatchRange>& out) const;
  // Replaces every match with `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

}  // namespace pagellm::tok
