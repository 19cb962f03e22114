#include "tokenizer/normalizer.h"

#include <vector>

#include "common/error.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

namespace {

using json = nlohmann::json;

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { tok::normalize(form_, text); }

 private:
  NormalForm form_;
};

// Prepends a string to non-empty text (SentencePiece's dummy prefix "▁").
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override { text = pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

// Removes leading and/or trailing White_Space characters.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_white_space(next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t next = start;
        if (!is_white_space(next_code_point(text, next))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

std::string string_field(const json& spec, const char* field, const std::string& where) {
  if (!spec.contains(field) || !spec[field].is_string()) {
    invalid_argument(where + ": normalizer field '" + field + "' must be a string");
  }
  return spec[field].get<std::string>();
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    invalid_argument(where + ": normalizer must be an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(string_field(spec, "prepend", where));
  if (type == "Replace") {
    if (!spec.contains("pattern")) invalid_argument(where + ": Replace normalizer needs 'pattern'");
    return std::make_unique<ReplaceNormalizer>(Pattern(spec["pattern"], where + ": Replace normalizer"),
                                               string_field(spec, "content", where));
  }
  if (type == "Strip") {
    const bool left = spec.value("strip_left", true), right = spec.value("strip_right", true);
    return std::make_unique<StripNormalizer>(left, right);
  }
  if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array()) {
      invalid_argument(where + ": Sequence normalizer needs a 'normalizers' array");
    }
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& part : spec["normalizers"]) {
      if (auto n = make_normalizer(part, where)) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  unsupported(where + ": unsupported: normalizer " + type);
}

}  // namespace pagellm::tok
