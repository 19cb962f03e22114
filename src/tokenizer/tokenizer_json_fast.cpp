// The fast path of tokenizer.json loading: a hand-written scanner that locates /model/vocab and
// /model/merges, reads them straight into TokenizerJson's flat arrays, and hands only the small rest
// of the document to nlohmann. It accepts the common, well-formed layout and gives up (returns false)
// on anything unusual, in which case the SAX loader parses the file and reports errors precisely.
#include <cstring>

#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

namespace {

class Scanner {
 public:
  explicit Scanner(std::string_view text) : s_(text) {}

  size_t pos() const { return i_; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool consume(char c) {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }

  // Reads a JSON string (the cursor at its opening quote) and appends its unescaped bytes to `out`.
  bool string(std::string& out) {
    if (!consume('"')) return false;
    while (i_ < s_.size()) {
      const size_t run = i_;
      while (i_ < s_.size() && s_[i_] != '"' && s_[i_] != '\\' && static_cast<unsigned char>(s_[i_]) >= 0x20) ++i_;
      out.append(s_.data() + run, i_ - run);
      if (i_ >= s_.size()) return false;
      const char c = s_[i_++];
      if (c == '"') return true;
      if (c != '\\' || i_ >= s_.size()) return false;  // control characters are not allowed raw
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair
            uint32_t low = 0;
            if (i_ + 1 >= s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u') return false;
            i_ += 2;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          append_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }

  bool integer(int64_t& v) {
    skip_ws();
    const size_t start = i_;
    v = 0;
    if (i_ + 1 < s_.size() && s_[i_] == '0' && s_[i_ + 1] >= '0' && s_[i_ + 1] <= '9') return false;  // leading zero
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9' && i_ - start < 10) v = v * 10 + (s_[i_++] - '0');
    // No sign, fraction, exponent or more than 10 digits: leave those to the precise parser.
    return i_ > start && (i_ >= s_.size() || (s_[i_] != '.' && s_[i_] != 'e' && s_[i_] != 'E' && !(s_[i_] >= '0' && s_[i_] <= '9')));
  }

  // Skips any JSON value (strings and nesting aware; scalars are not validated here, nlohmann
  // parses everything that is not vocab or merges).
  bool skip_value() {
    skip_ws();
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') return skip_string();
    if (c == '{' || c == '[') {
      int depth = 0;
      while (i_ < s_.size()) {
        const char d = s_[i_];
        if (d == '"') {
          if (!skip_string()) return false;
          continue;
        }
        ++i_;
        if (d == '{' || d == '[') ++depth;
        if (d == '}' || d == ']') {
          if (--depth == 0) return true;
        }
      }
      return false;
    }
    while (i_ < s_.size() && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']') ++i_;
    return true;
  }

 private:
  bool skip_string() {
    ++i_;  // opening quote
    while (i_ < s_.size()) {
      const void* hit = std::memchr(s_.data() + i_, '"', s_.size() - i_);
      if (hit == nullptr) return false;
      size_t q = static_cast<size_t>(static_cast<const char*>(hit) - s_.data());
      // The quote is escaped when an odd number of backslashes precede it.
      size_t backslashes = 0;
      while (q - backslashes > i_ && s_[q - backslashes - 1] == '\\') ++backslashes;
      i_ = q + 1;
      if (backslashes % 2 == 0) return true;
    }
    return false;
  }
  bool hex4(uint32_t& v) {
    if (i_ + 4 > s_.size()) return false;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<uint32_t>(c - 'A' + 10);
      else return false;
    }
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

bool read_vocab(Scanner& sc, TokenizerJson& out) {
  if (!sc.consume('{')) return false;
  out.token_offsets.assign(1, 0);
  if (sc.consume('}')) return true;
  do {
    int64_t id = 0;
    if (!sc.string(out.token_bytes) || !sc.consume(':') || !sc.integer(id) || id > 0x7FFFFFFF) return false;
    out.token_offsets.push_back(static_cast<uint32_t>(out.token_bytes.size()));
    out.token_ids.push_back(static_cast<int32_t>(id));
  } while (sc.consume(','));
  return sc.consume('}');
}

bool read_merges(Scanner& sc, TokenizerJson& out) {
  if (!sc.consume('[')) return false;
  out.merge_offsets.assign(1, 0);
  if (sc.consume(']')) return true;
  std::string entry;
  do {
    if (sc.peek('[')) {  // ["left", "right"]
      sc.consume('[');
      for (int side = 0; side < 2; ++side) {
        if ((side == 1 && !sc.consume(',')) || !sc.string(out.merge_bytes)) return false;
        out.merge_offsets.push_back(static_cast<uint32_t>(out.merge_bytes.size()));
      }
      if (!sc.consume(']')) return false;
      continue;
    }
    entry.clear();  // "left right"
    if (!sc.string(entry)) return false;
    const size_t space = entry.find(' ');
    if (space == std::string::npos || entry.find(' ', space + 1) != std::string::npos) return false;
    out.merge_bytes.append(entry, 0, space);
    out.merge_offsets.push_back(static_cast<uint32_t>(out.merge_bytes.size()));
    out.merge_bytes.append(entry, space + 1);
    out.merge_offsets.push_back(static_cast<uint32_t>(out.merge_bytes.size()));
  } while (sc.consume(','));
  return sc.consume(']');
}

struct Range {
  size_t begin = 0, end = 0;
};

}  // namespace

bool parse_tokenizer_json_fast(std::string_view text, TokenizerJson& out) {
  Scanner sc(text);
  Range vocab, merges;
  std::string key;
  if (!sc.consume('{')) return false;
  if (sc.consume('}')) return false;
  do {
    key.clear();
    if (!sc.string(key) || !sc.consume(':')) return false;
    if (key != "model") {
      if (!sc.skip_value()) return false;
      continue;
    }
    if (!sc.consume('{') || sc.consume('}')) return false;
    do {
      key.clear();
      if (!sc.string(key) || !sc.consume(':')) return false;
      sc.skip_ws();
      Range* range = key == "vocab" ? &vocab : key == "merges" ? &merges : nullptr;
      if (range == nullptr) {
        if (!sc.skip_value()) return false;
        continue;
      }
      if (range->end != 0) return false;  // a duplicate key
      range->begin = sc.pos();
      if (!(range == &vocab ? read_vocab(sc, out) : read_merges(sc, out))) return false;
      range->end = sc.pos();
    } while (sc.consume(','));
    if (!sc.consume('}')) return false;
  } while (sc.consume(','));
  if (!sc.consume('}') || vocab.end == 0 || merges.end == 0) return false;
  sc.skip_ws();
  if (sc.pos() != text.size()) return false;
  // Keys and tokens must be UTF-8, as a JSON parser requires.
  if (!is_valid_utf8(out.token_bytes) || !is_valid_utf8(out.merge_bytes)) return false;

  // The rest of the document, with the two big values replaced by empty ones, goes to nlohmann.
  const Range& first = vocab.begin < merges.begin ? vocab : merges;
  const Range& second = vocab.begin < merges.begin ? merges : vocab;
  std::string rest;
  rest.reserve(text.size() - (vocab.end - vocab.begin) - (merges.end - merges.begin) + 4);
  rest.append(text.substr(0, first.begin)).append(&first == &vocab ? "{}" : "[]");
  rest.append(text.substr(first.end, second.begin - first.end)).append(&second == &vocab ? "{}" : "[]");
  rest.append(text.substr(second.end));
  out.root = nlohmann::json::parse(rest, nullptr, false);
  if (out.root.is_discarded() || !out.root.is_object() || !out.root["model"].is_object()) return false;
  out.root["model"].erase("vocab");
  out.root["model"].erase("merges");
  out.has_vocab = out.has_merges = true;
  return true;
}

}  // namespace pagellm::tok
