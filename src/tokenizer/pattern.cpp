#include "tokenizer/pattern.h"

#include "common/error.h"

namespace pagellm::tok {

Pattern::Pattern(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_object() && spec.contains("String") && spec["String"].is_string()) {
    literal_ = spec["String"].get<std::string>();
  } else if (spec.is_object() && spec.contains("Regex") && spec["Regex"].is_string()) {
    regex_ = std::make_unique<Regex>(spec["Regex"].get<std::string>(), where);
  } else {
    invalid_argument(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
}

void Pattern::find_all(std::string_view text, std::vector<MatchRange>& out) const {
  find_some(text, 0, SIZE_MAX, out);
}

size_t Pattern::find_some(std::string_view text, size_t start, size_t max_matches, std::vector<MatchRange>& out) const {
  if (regex_) return regex_->find_some(text, start, max_matches, out);
  if (literal_.empty()) return text.size();
  size_t pos = start;
  for (size_t num_found = 0; num_found < max_matches; ++num_found) {
    pos = text.find(literal_, pos);
    if (pos == std::string_view::npos) return text.size();
    out.push_back({pos, pos + literal_.size()});
    pos += literal_.size();
  }
  return pos;
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<MatchRange> matches;
  find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t prev = 0;
  for (const MatchRange& m : matches) {
    out.append(text.substr(prev, m.begin - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace pagellm::tok
