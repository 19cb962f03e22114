// Fast loading of tokenizer.json. The model's vocab (100k+ entries) and merges (100k-300k) dominate the
// file; a DOM for them costs more than the rest of loading together. A hand-written scanner reads those
// two straight into flat arrays and leaves the small rest to nlohmann; files it does not accept go
// through a SAX pass that does the same with full validation and precise errors.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

struct TokenizerJson {
  nlohmann::json root;  // the document, with model.vocab and model.merges removed
  // model.vocab in file order: token i is token_bytes[token_offsets[i] .. token_offsets[i + 1]).
  std::string token_bytes;
  std::vector<uint32_t> token_offsets;  // [num_vocab + 1]
  std::vector<int32_t> token_ids;       // [num_vocab]
  bool has_vocab = false;
  // model.merges, each side stored like the vocab: merge i is (left i, right i).
  std::string merge_bytes;
  std::vector<uint32_t> merge_offsets;  // [2 * num_merges + 1]
  bool has_merges = false;

  size_t num_vocab() const { return token_ids.size(); }
  std::string_view token(size_t i) const {
    return std::string_view(token_bytes).substr(token_offsets[i], token_offsets[i + 1] - token_offsets[i]);
  }
  size_t num_merges() const { return merge_offsets.empty() ? 0 : (merge_offsets.size() - 1) / 2; }
  std::pair<std::string_view, std::string_view> merge(size_t i) const;
  bool operator==(const TokenizerJson&) const = default;
};

// Parses tokenizer.json text. `source` names the file in errors (pagellm::Error kInvalidArgument).
// Tries the fast scanner first and falls back to the SAX loader.
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source);

// The SAX loader alone (validates everything; errors name the problem).
TokenizerJson parse_tokenizer_json_sax(std::string_view text, const std::string& source);
// The fast scanner alone (tokenizer_json_fast.cpp): false when the text is not in the common layout
// (or is malformed); `out` is then unspecified.
bool parse_tokenizer_json_fast(std::string_view text, TokenizerJson& out);

}  // namespace pagellm::tok
