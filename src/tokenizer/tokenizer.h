// A Hugging Face tokenizer.json pipeline (normalizer → pre-tokenizer → BPE model → post-processor,
// and the decoder), plus tokenizer_config.json's special tokens. Encoding and decoding are const and
// thread-safe after load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pagellm::tok {

class TokenizerImpl;

class Tokenizer {
 public:
  // Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json. Throws pagellm::Error
  // ("unsupported: <component>" for pipeline parts we do not implement).
  static std::shared_ptr<const Tokenizer> from_dir(const std::filesystem::path& dir);
  // From in-memory JSON texts (tokenizer_config may be empty). `source` names them in errors.
  static std::shared_ptr<const Tokenizer> from_json(const std::string& tokenizer_json,
                                                    const std::string& tokenizer_config_json,
                                                    const std::string& source);
  // The built-in byte-level tokenizer of the demo model: 256 byte tokens plus <s> and </s>.
  static std::shared_ptr<const Tokenizer> byte_level_demo();

  // add_special_tokens applies the post-processor (BOS etc.) as HF's encode() does by default.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
  // The bytes the ids decode to, invalid UTF-8 kept (a token may hold part of a character).
  std::string decode_bytes(std::span<const int32_t> ids) const;

  int32_t vocab_size() const;  // highest id + 1, added tokens included
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  // From tokenizer_config.json (empty when absent).
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  const std::string& chat_template() const;

  ~Tokenizer();
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  const TokenizerImpl& impl() const { return *impl_; }

 private:
  std::unique_ptr<TokenizerImpl> impl_;
};

// Streaming detokenization with vLLM's semantics: push() returns only newly completed text (never a
// partial UTF-8 sequence), and the concatenation of all returned pieces equals decode() of all ids
// pushed so far (prompt excluded).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                         std::span<const int32_t> prompt_ids, bool skip_special_tokens);
  std::string push(int32_t id);
  // Text emitted so far.
  const std::string& text() const { return text_; }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int32_t> ids_;  // prompt tail (for context) + generated ids
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  bool skip_special_tokens_;
  std::string text_;
};

}  // namespace pagellm::tok
