#include "tokenizer/decoder.h"

#include "common/error.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

namespace {

using json = nlohmann::json;

// Maps each token's alphabet characters back to bytes; a token holding any character outside the
// alphabet (an added token such as "<|im_start|>" written in plain text) contributes its raw UTF-8.
// The bytes of all tokens are joined and repaired into valid UTF-8 (U+FFFD per invalid subpart).
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    std::string bytes;
    std::string token_bytes;
    for (const std::string& token : tokens) {
      token_bytes.clear();
      bool all_in_alphabet = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const char32_t cp = next_code_point(token, pos);
        if (cp >= alphabet.char_to_byte.size() || alphabet.char_to_byte[cp] < 0) {
          all_in_alphabet = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(alphabet.char_to_byte[cp]));
      }
      bytes += all_in_alphabet ? token_bytes : token;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Turns runs of "<0xXX>" tokens into the UTF-8 text they spell; a run that is not valid UTF-8
// becomes one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;  // pending bytes
    size_t run_length = 0;
    auto flush = [&] {
      if (run_length == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_length; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_length = 0;
    };
    for (std::string& token : tokens) {
      int byte = parse_byte_token(token);
      if (byte < 0) {
        flush();
        out.push_back(std::move(token));
        continue;
      }
      run.push_back(static_cast<char>(byte));
      ++run_length;
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int parse_byte_token(const std::string& t) {
    if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
    const int hi = hex(t[3]), lo = hex(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t i = 0; i < start_ && token.compare(begin, content_.size(), content_) == 0 && begin < end; ++i) {
        begin += content_.size();
      }
      for (size_t i = 0; i < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++i) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// Replacement character back to spaces. In the first token the reference drops every replacement
// character (not only the one the pre-tokenizer prepended) unless prepend_scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    invalid_argument(where + ": decoder must be an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    if (!spec.contains("pattern") || !spec.contains("content") || !spec["content"].is_string()) {
      invalid_argument(where + ": Replace decoder needs 'pattern' and a string 'content'");
    }
    return std::make_unique<ReplaceDecoder>(Pattern(spec["pattern"], where + ": Replace decoder"),
                                            spec["content"].get<std::string>());
  }
  if (type == "Strip") {
    const std::string content = spec.value("content", std::string(" "));
    const int64_t start = spec.value("start", int64_t{0}), stop = spec.value("stop", int64_t{0});
    if (content.empty() || start < 0 || stop < 0) invalid_argument(where + ": Strip decoder has invalid fields");
    return std::make_unique<StripDecoder>(content, static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Metaspace") {
    const std::string replacement = spec.value("replacement", std::string("\xE2\x96\x81"));
    if (replacement.empty()) invalid_argument(where + ": Metaspace decoder replacement must not be empty");
    bool strip_first = spec.value("add_prefix_space", true);
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      strip_first = spec["prepend_scheme"].get<std::string>() != "never";
    }
    return std::make_unique<MetaspaceDecoder>(replacement, strip_first);
  }
  if (type == "Sequence") {
    if (!spec.contains("decoders") || !spec["decoders"].is_array()) {
      invalid_argument(where + ": Sequence decoder needs a 'decoders' array");
    }
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& part : spec["decoders"]) {
      if (auto d = make_decoder(part, where)) parts.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  unsupported(where + ": unsupported: decoder " + type);
}

}  // namespace pagellm::tok
