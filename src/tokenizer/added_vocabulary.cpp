#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace pagellm::tok {

void TokenMatcher::build(const std::vector<std::string>& patterns) {
  nodes_.assign(1, Node{});
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  for (size_t p = 0; p < patterns.size(); ++p) {
    const std::string& s = patterns[p];
    if (s.empty()) continue;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    int32_t node = 0;
    for (char ch : s) {
      const auto byte = static_cast<uint8_t>(ch);
      auto& children = nodes_[node].children;
      auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
      if (it != children.end() && it->first == byte) {
        node = it->second;
        continue;
      }
      const auto child = static_cast<int32_t>(nodes_.size());
      children.insert(it, {byte, child});
      nodes_.emplace_back();
      node = child;
    }
    // A duplicate content keeps the first token, like the reference's map from content to token.
    if (nodes_[node].terminal < 0) nodes_[node].terminal = static_cast<int32_t>(p);
  }
}

size_t TokenMatcher::longest_at(std::string_view text, size_t pos, int32_t* index) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = nodes_[node].children;
    const auto byte = static_cast<uint8_t>(text[i]);
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
    if (it == children.end() || it->first != byte) break;
    node = it->second;
    if (nodes_[node].terminal >= 0) {
      best = i + 1 - pos;
      *index = nodes_[node].terminal;
    }
  }
  return best;
}

namespace {

// The code point that ends just before `pos` (pos > 0, valid UTF-8).
char32_t code_point_before(std::string_view text, size_t pos) {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

}  // namespace

void split_on_added_tokens(std::string_view text, const TokenMatcher& matcher, const std::vector<AddedToken>& tokens,
                           std::vector<Section>& out) {
  out.clear();
  size_t section_start = 0;  // start of the pending plain-text section
  size_t pos = 0;
  while (pos < text.size() && !matcher.empty()) {
    if (!matcher.may_start(static_cast<unsigned char>(text[pos]))) {
      ++pos;
      continue;
    }
    int32_t index = -1;
    const size_t length = matcher.longest_at(text, pos, &index);
    if (length == 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens[static_cast<size_t>(index)];
    size_t begin = pos, end = pos + length;
    if (token.single_word) {
      size_t after = end;
      const bool word_before = begin > 0 && is_word_char(code_point_before(text, begin));
      const bool word_after = end < text.size() && is_word_char(next_code_point(text, after));
      if (word_before || word_after) {
        // Skip the whole match, as an Aho-Corasick iterator would have consumed it.
        pos = end;
        continue;
      }
    }
    if (token.lstrip) {
      while (begin > section_start && is_white_space(code_point_before(text, begin))) {
        --begin;
        while ((static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
      }
    }
    if (token.rstrip) {
      while (end < text.size()) {
        size_t next = end;
        if (!is_white_space(next_code_point(text, next))) break;
        end = next;
      }
    }
    if (begin > section_start) out.push_back({section_start, begin, -1});
    out.push_back({begin, end, token.id});
    section_start = pos = end;
  }
  if (section_start < text.size()) out.push_back({section_start, text.size(), -1});
}

}  // namespace pagellm::tok
