// Fast loading of tokenizer.json. The model's vocab (100k+ entries) and merges (100k-300k) dominate the
// file; a DOM for them costs more than the rest of loading together. A SAX pass streams those two
// straight into flat arrays and builds an ordinary nlohmann DOM for everything else.
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
};

// Parses tokenizer.json text. `source` names the file in errors (pagellm::Error kInvalidArgument).
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source);

}  // namespace pagellm::tok
