// The assembled tokenizer.json pipeline behind pagellm::tok::Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace pagellm::tok {

class TokenizerImpl {
 public:
  // `config` is tokenizer_config.json (an empty object when absent). `source` names them in errors.
  TokenizerImpl(const TokenizerJson& file, const nlohmann::json& config, const std::string& source);

  void encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const;
  // raw: keep invalid UTF-8 bytes (a lone token of a multi-byte character) instead of U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens, bool raw = false) const;

  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const AddedToken* added_token(int32_t id) const;

  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;
  std::string bos_token;
  std::string eos_token;
  std::string chat_template;

 private:
  void load_added_tokens(const nlohmann::json& root, const std::string& source);
  void load_config(const nlohmann::json& config, const std::string& source);
  // Encodes one section of text that holds no added token matched on raw text.
  void encode_section(std::string_view text, bool at_input_start, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, bool at_input_start, std::vector<int32_t>& out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  PostProcessor post_processor_;
  std::unique_ptr<Decoder> decoder_;

  std::vector<AddedToken> added_tokens_;            // file order
  std::unordered_map<int32_t, size_t> added_by_id_; // id -> index into added_tokens_
  std::vector<AddedToken> raw_tokens_;              // matched on raw text (normalized = false)
  std::vector<AddedToken> normalized_tokens_;       // matched on normalized text; content normalized
  TokenMatcher raw_matcher_;
  TokenMatcher normalized_matcher_;
  int32_t vocab_size_ = 0;
};

}  // namespace pagellm::tok
