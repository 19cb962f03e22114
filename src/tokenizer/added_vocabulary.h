// Added tokens of tokenizer.json ("added_tokens"): special tokens such as <|begin_of_text|> and
// user-added ones. In input text they are found before the model runs, the way Hugging Face does it:
// leftmost-longest matching, non-normalized tokens on the raw text and normalized ones on normalized
// text, with the single_word / lstrip / rstrip options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/flat_map.h"

namespace pagellm::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// One section of split text: either plain text or a matched added token.
struct Section {
  size_t begin, end;  // byte range of the text this section covers
  int32_t token_id;   // -1 for plain text
};

// Finds occurrences of a set of strings, leftmost-longest, with a byte trie.
class TokenMatcher {
 public:
  // `patterns[i]` is matched as token i (indices into the caller's token list).
  void build(const std::vector<std::string>& patterns);
  bool empty() const { return nodes_.size() <= 1; }
  // Longest pattern starting exactly at text[pos]: returns its length and sets *index, or 0.
  size_t longest_at(std::string_view text, size_t pos, int32_t* index) const;
  bool may_start(unsigned char byte) const { return first_byte_[byte]; }

 private:
  struct Node {
    int32_t terminal = -1;                       // pattern index ending here
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
  };
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

// Splits text on the added tokens of one matcher, applying single_word / lstrip / rstrip.
void split_on_added_tokens(std::string_view text, const TokenMatcher& matcher, const std::vector<AddedToken>& tokens,
                           std::vector<Section>& out);

}  // namespace pagellm::tok
