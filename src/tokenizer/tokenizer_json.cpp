#include "tokenizer/tokenizer_json.h"

#include "common/error.h"

namespace pagellm::tok {

std::pair<std::string_view, std::string_view> TokenizerJson::merge(size_t i) const {
  const std::string_view all(merge_bytes);
  const uint32_t a = merge_offsets[2 * i], b = merge_offsets[2 * i + 1], c = merge_offsets[2 * i + 2];
  return {all.substr(a, b - a), all.substr(b, c - b)};
}

namespace {

using json = nlohmann::json;

// Builds the DOM for everything but /model/vocab and /model/merges, which it streams into `out`.
class Handler : public nlohmann::json_sax<json> {
 public:
  explicit Handler(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v);
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::kVocab) return vocab_id(v > 0x7FFFFFFF ? -1 : static_cast<int64_t>(v));
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool string(string_t& v) override {
    if (mode_ == Mode::kMerges) return merge_string(v);
    if (mode_ == Mode::kMergePair) return merge_pair_part(v);
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return fail(mode_ == Mode::kVocab ? "model.vocab values must be integer ids"
                                                                : "model.merges entries must be strings or pairs");
    if (is_model_key("vocab")) {
      mode_ = Mode::kVocab;
      out_.has_vocab = true;
      out_.token_offsets.push_back(0);
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      pending_token_ = std::move(k);
      return true;
    }
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_parts_ = 0;
      return true;
    }
    if (mode_ != Mode::kDom) return fail("model.vocab must map token strings to ids");
    if (is_model_key("merges")) {
      mode_ = Mode::kMerges;
      out_.has_merges = true;
      out_.merge_offsets.push_back(0);
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_parts_ != 2) return fail("model.merges pairs must hold exactly two strings");
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = "malformed JSON at byte " + std::to_string(position) + ": " + e.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  // True when the value about to start is /model/<name>.
  bool is_model_key(const char* name) const {
    return stack_.size() == 2 && stack_[1]->is_object() && key_ == name && stack_[0]->contains("model") &&
           &(*stack_[0])["model"] == stack_[1];
  }
  bool fail(const std::string& message) {
    error_ = message;
    return false;
  }
  // Places a scalar in the current container (or makes it the root).
  bool value(json v) {
    if (mode_ != Mode::kDom) return fail(mode_ == Mode::kVocab ? "model.vocab values must be integer ids"
                                                                : "model.merges entries must be strings or pairs");
    place(std::move(v));
    return true;
  }
  json* place(json v) {
    if (stack_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool open(json container) {
    stack_.push_back(place(std::move(container)));
    return true;
  }
  bool vocab_id(int64_t id) {
    if (id < 0 || id > 0x7FFFFFFF) return fail("model.vocab id of '" + pending_token_ + "' is out of range");
    out_.token_bytes += pending_token_;
    out_.token_offsets.push_back(static_cast<uint32_t>(out_.token_bytes.size()));
    out_.token_ids.push_back(static_cast<int32_t>(id));
    return true;
  }
  // "left right" form: exactly one space separates the two sides.
  bool merge_string(const std::string& v) {
    const size_t space = v.find(' ');
    if (space == std::string::npos || v.find(' ', space + 1) != std::string::npos) {
      return fail("model.merges entry '" + v + "' is not two tokens separated by one space");
    }
    add_merge_part(std::string_view(v).substr(0, space));
    add_merge_part(std::string_view(v).substr(space + 1));
    return true;
  }
  bool merge_pair_part(const std::string& v) {
    if (++pair_parts_ > 2) return fail("model.merges pairs must hold exactly two strings");
    add_merge_part(v);
    return true;
  }
  void add_merge_part(std::string_view part) {
    out_.merge_bytes += part;
    out_.merge_offsets.push_back(static_cast<uint32_t>(out_.merge_bytes.size()));
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;  // open containers, outermost first
  std::string key_;           // last object key seen in DOM mode
  std::string pending_token_;
  Mode mode_ = Mode::kDom;
  int pair_parts_ = 0;
  std::string error_;
};

}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source) {
  {
    TokenizerJson fast;
    if (parse_tokenizer_json_fast(text, fast) && fast.token_bytes.size() <= 0xFFFFFFF0u &&
        fast.merge_bytes.size() <= 0xFFFFFFF0u) {
      return fast;
    }
  }
  return parse_tokenizer_json_sax(text, source);
}

TokenizerJson parse_tokenizer_json_sax(std::string_view text, const std::string& source) {
  TokenizerJson out;
  Handler handler(out);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &handler);
  } catch (const json::exception& e) {
    invalid_argument(source + ": " + e.what());
  }
  if (!ok) invalid_argument(source + ": " + (handler.error().empty() ? "malformed JSON" : handler.error()));
  if (!out.root.is_object()) invalid_argument(source + ": the top level must be a JSON object");
  if (out.token_bytes.size() > 0xFFFFFFF0u || out.merge_bytes.size() > 0xFFFFFFF0u) {
    invalid_argument(source + ": model vocabulary too large");
  }
  return out;
}

}  // namespace pagellm::tok
