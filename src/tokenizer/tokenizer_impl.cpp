#include "tokenizer/tokenizer_impl.h"

#include <algorithm>

#include "common/error.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

using json = nlohmann::json;

namespace {

// Sections longer than this are pre-tokenized in windows of about kStreamPieces pieces.
constexpr size_t kStreamBytes = 16 * 1024;
constexpr size_t kStreamPieces = 1024;

// A special-token field of tokenizer_config.json: a string, an AddedToken object or null.
std::string token_content(const json& config, const char* field) {
  if (!config.contains(field)) return {};
  const json& v = config[field];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return {};
}

}  // namespace

TokenizerImpl::TokenizerImpl(const TokenizerJson& file, const json& config, const std::string& source) {
  const json& root = file.root;
  if (!root.contains("model") || !root["model"].is_object()) invalid_argument(source + ": 'model' is missing");
  const json& model = root["model"];
  const std::string model_type = model.value("type", std::string(file.has_merges ? "BPE" : ""));
  if (model_type != "BPE") unsupported(source + ": unsupported: model " + (model_type.empty() ? "(no type)" : model_type));
  const json null_value;
  auto field = [&](const char* name) -> const json& { return root.contains(name) ? root[name] : null_value; };
  if (!field("truncation").is_null()) unsupported(source + ": unsupported: truncation");
  if (!field("padding").is_null()) unsupported(source + ": unsupported: padding");

  normalizer_ = make_normalizer(field("normalizer"), source);
  pre_tokenizer_ = make_pre_tokenizer(field("pre_tokenizer"), source);
  model_ = std::make_unique<BpeModel>(model, file, source);
  post_processor_ = PostProcessor(field("post_processor"), source);
  decoder_ = make_decoder(field("decoder"), source);
  load_added_tokens(root, source);
  load_config(config, source);
}

void TokenizerImpl::load_added_tokens(const json& root, const std::string& source) {
  vocab_size_ = model_->id_limit();
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  if (!root["added_tokens"].is_array()) invalid_argument(source + ": 'added_tokens' must be an array");
  for (const auto& entry : root["added_tokens"]) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() || !entry.contains("content") ||
        !entry["content"].is_string()) {
      invalid_argument(source + ": added_tokens entries need an integer 'id' and a string 'content'");
    }
    AddedToken token;
    const int64_t id = entry["id"].get<int64_t>();
    if (id < 0 || id >= (1 << 24)) invalid_argument(source + ": added token id " + std::to_string(id) + " is out of range");
    token.id = static_cast<int32_t>(id);
    token.content = entry["content"].get<std::string>();
    if (token.content.empty()) invalid_argument(source + ": added token " + std::to_string(id) + " has empty content");
    token.single_word = entry.value("single_word", false);
    token.lstrip = entry.value("lstrip", false);
    token.rstrip = entry.value("rstrip", false);
    token.special = entry.value("special", false);
    token.normalized = entry.value("normalized", !token.special);
    added_by_id_[token.id] = added_tokens_.size();
    added_tokens_.push_back(token);
    vocab_size_ = std::max(vocab_size_, token.id + 1);
    if (token.normalized && normalizer_) {
      normalizer_->normalize(token.content);
      if (!token.content.empty()) normalized_tokens_.push_back(token);
    } else {
      raw_tokens_.push_back(token);
    }
  }
  std::vector<std::string> contents;
  for (const auto& t : raw_tokens_) contents.push_back(t.content);
  raw_matcher_.build(contents);
  contents.clear();
  for (const auto& t : normalized_tokens_) contents.push_back(t.content);
  normalized_matcher_.build(contents);
}

void TokenizerImpl::load_config(const json& config, const std::string& source) {
  if (!config.is_object()) invalid_argument(source + ": tokenizer_config.json must be a JSON object");
  bos_token = token_content(config, "bos_token");
  eos_token = token_content(config, "eos_token");
  if (!bos_token.empty()) bos_token_id = token_to_id(bos_token);
  if (!eos_token.empty()) eos_token_id = token_to_id(eos_token);
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    if (t.is_string()) {
      chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      // Named templates: [{"name": "default", "template": "..."}, ...]; the default one is the chat template.
      for (const auto& named : t) {
        if (named.is_object() && named.value("name", std::string()) == "default" && named.contains("template") &&
            named["template"].is_string()) {
          chat_template = named["template"].get<std::string>();
        }
      }
    }
  }
  // Explicit add_bos_token / add_eos_token replace the file's template, as transformers' fast Llama
  // tokenizers rebuild their post-processor from them.
  const bool has_bos_flag = config.contains("add_bos_token") && config["add_bos_token"].is_boolean();
  const bool has_eos_flag = config.contains("add_eos_token") && config["add_eos_token"].is_boolean();
  if (has_bos_flag || has_eos_flag) {
    const bool add_bos = has_bos_flag ? config["add_bos_token"].get<bool>() : !post_processor_.prefix().empty();
    const bool add_eos = has_eos_flag ? config["add_eos_token"].get<bool>() : !post_processor_.suffix().empty();
    std::vector<int32_t> prefix = has_bos_flag ? std::vector<int32_t>{} : post_processor_.prefix();
    std::vector<int32_t> suffix = has_eos_flag ? std::vector<int32_t>{} : post_processor_.suffix();
    if (has_bos_flag && add_bos) {
      if (!bos_token_id) invalid_argument(source + ": add_bos_token is true but bos_token is not a known token");
      prefix = {*bos_token_id};
    }
    if (has_eos_flag && add_eos) {
      if (!eos_token_id) invalid_argument(source + ": add_eos_token is true but eos_token is not a known token");
      suffix = {*eos_token_id};
    }
    post_processor_ = PostProcessor(std::move(prefix), std::move(suffix));
  }
}

void TokenizerImpl::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& out) const {
  out.clear();
  // Hugging Face tokenizers take Unicode strings; bytes that are not UTF-8 are read as U+FFFD.
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<Section> sections;
  split_on_added_tokens(text, raw_matcher_, raw_tokens_, sections);
  for (const Section& s : sections) {
    if (s.token_id >= 0) {
      out.push_back(s.token_id);
    } else {
      encode_section(text.substr(s.begin, s.end - s.begin), s.begin == 0, out);
    }
  }
  if (add_special_tokens) post_processor_.apply(out);
}

void TokenizerImpl::encode_section(std::string_view text, bool at_input_start, std::vector<int32_t>& out) const {
  if (!normalizer_) {
    encode_normalized(text, at_input_start, out);
    return;
  }
  std::string normalized(text);
  normalizer_->normalize(normalized);
  if (normalized_matcher_.empty()) {
    encode_normalized(normalized, at_input_start, out);
    return;
  }
  std::vector<Section> sections;
  split_on_added_tokens(normalized, normalized_matcher_, normalized_tokens_, sections);
  for (const Section& s : sections) {
    if (s.token_id >= 0) {
      out.push_back(s.token_id);
    } else {
      encode_normalized(std::string_view(normalized).substr(s.begin, s.end - s.begin), at_input_start && s.begin == 0, out);
    }
  }
}

void TokenizerImpl::encode_normalized(std::string_view text, bool at_input_start, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) {
    model_->encode_word(text, out);
    return;
  }
  thread_local Pieces pieces;
  thread_local PreTokenizeScratch scratch;
  if (text.size() > kStreamBytes && pre_tokenizer_->can_stream()) {
    // Long text: pre-tokenize and encode a window at a time so buffers stay small and cache-resident
    // instead of holding every piece of a 10 MB text at once. The result is identical.
    for (size_t pos = 0; pos < text.size();) {
      pos = pre_tokenizer_->pre_tokenize_some(text, pos, kStreamPieces, pieces, scratch);
      if (!at_input_start) pieces.first_at_input_start = false;
      for (size_t i = 0; i < pieces.size(); ++i) model_->encode_word(pieces.piece(i), out);
    }
    return;
  }
  pieces.clear();
  pieces.push(text);
  pieces.first_at_input_start = at_input_start;
  pre_tokenizer_->pre_tokenize(pieces, scratch);
  for (size_t i = 0; i < pieces.size(); ++i) model_->encode_word(pieces.piece(i), out);
}

std::string TokenizerImpl::decode(std::span<const int32_t> ids, bool skip_special_tokens, bool raw) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* added = added_token(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
      continue;
    }
    // Ids outside the vocabulary are dropped, as the reference does.
    const std::string_view token = model_->id_to_token(id);
    if (!token.empty()) tokens.emplace_back(token);
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
  }
  if (!raw && !is_valid_utf8(text)) text = utf8_lossy(text);
  return text;
}

const AddedToken* TokenizerImpl::added_token(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it == added_by_id_.end() ? nullptr : &added_tokens_[it->second];
}

std::optional<int32_t> TokenizerImpl::token_to_id(std::string_view token) const {
  for (const AddedToken& t : added_tokens_) {
    if (t.content == token) return t.id;
  }
  return model_->token_to_id(token);
}

std::optional<std::string> TokenizerImpl::id_to_token(int32_t id) const {
  if (const AddedToken* added = added_token(id)) return added->content;
  const std::string_view token = model_->id_to_token(id);
  if (token.empty()) return std::nullopt;
  return std::string(token);
}

bool TokenizerImpl::is_special(int32_t id) const {
  const AddedToken* added = added_token(id);
  return added != nullptr && added->special;
}

}  // namespace pagellm::tok
