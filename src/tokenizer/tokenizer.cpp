#include "tokenizer/tokenizer.h"

#include <fstream>

#include "common/error.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw_error(ErrorKind::kNotFound, path.string() + ": cannot open");
  const std::streamoff size = in.tellg();
  if (size < 0) invalid_argument(path.string() + ": cannot determine the file size");
  std::string content(static_cast<size_t>(size), '\0');
  in.seekg(0);
  in.read(content.data(), size);
  if (in.gcount() != size) invalid_argument(path.string() + ": read failed");
  return content;
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::from_dir(const std::filesystem::path& dir) {
  const auto tokenizer_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer_path)) {
    throw_error(ErrorKind::kNotFound, tokenizer_path.string() + ": not found (a Hugging Face tokenizer.json is required)");
  }
  const auto config_path = dir / "tokenizer_config.json";
  std::string config_text;
  if (std::filesystem::exists(config_path)) config_text = read_file(config_path);
  return from_json(read_file(tokenizer_path), config_text, dir.string());
}

std::shared_ptr<const Tokenizer> Tokenizer::from_json(const std::string& tokenizer_json,
                                                      const std::string& tokenizer_config_json,
                                                      const std::string& source) {
  const std::string where = source + "/tokenizer.json";
  nlohmann::json config = nlohmann::json::object();
  if (!tokenizer_config_json.empty()) {
    config = nlohmann::json::parse(tokenizer_config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      invalid_argument(source + "/tokenizer_config.json: not a JSON object");
    }
  }
  try {
    const TokenizerJson file = parse_tokenizer_json(tokenizer_json, where);
    return std::make_shared<const Tokenizer>(std::make_unique<TokenizerImpl>(file, config, where));
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong JSON type somewhere in the pipeline description.
    invalid_argument(where + ": " + e.what());
  }
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  impl_->encode(text, add_special_tokens, ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
  return impl_->decode(ids, false, true);
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size(); }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const { return impl_->token_to_id(token); }
std::optional<std::string> Tokenizer::id_to_token(int32_t id) const { return impl_->id_to_token(id); }
bool Tokenizer::is_special(int32_t id) const { return impl_->is_special(id); }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_token_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_token_id; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

std::shared_ptr<const Tokenizer> Tokenizer::byte_level_demo() {
  // Ids 0..255 are the bytes (in GPT-2's byte-level alphabet), 256 is <s> and 257 is </s>. No merges:
  // every byte of the text is one token. Built as a tokenizer.json so it runs the same pipeline.
  static const std::shared_ptr<const Tokenizer> demo = [] {
    nlohmann::json vocab = nlohmann::json::object();
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    for (int b = 0; b < 256; ++b) vocab[alphabet.byte_to_utf8[b]] = b;
    auto special = [](int id, const char* content) {
      return nlohmann::json{{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
                            {"rstrip", false}, {"normalized", false}, {"special", true}};
    };
    const nlohmann::json tokenizer = {
        {"version", "1.0"},
        {"added_tokens", {special(256, "<s>"), special(257, "</s>")}},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}},
        {"post_processor",
         {{"type", "TemplateProcessing"},
          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
          {"pair", nlohmann::json::array()},
          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
    };
    const nlohmann::json config = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
    return from_json(tokenizer.dump(), config.dump(), "<byte-level demo>");
  }();
  return demo;
}

}  // namespace pagellm::tok
