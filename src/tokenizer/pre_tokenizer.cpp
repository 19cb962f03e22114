#include "tokenizer/pre_tokenizer.h"

#include "common/error.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

namespace {

using json = nlohmann::json;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const json& spec, const std::string& where) {
  const std::string b = spec.value("behavior", std::string("Isolated"));
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  unsupported(where + ": unsupported: split behavior " + b);
}

// Turns the matches inside a piece of length `size` into (range, is_match) spans covering the piece.
void matches_to_splits(const std::vector<MatchRange>& matches, size_t size, bool invert,
                       std::vector<std::pair<MatchRange, bool>>& splits) {
  splits.clear();
  size_t prev = 0;
  for (const MatchRange& m : matches) {
    if (m.begin > prev) splits.push_back({{prev, m.begin}, invert});
    splits.push_back({m, !invert});
    prev = m.end;
  }
  if (prev < size) splits.push_back({{prev, size}, invert});
}

// Applies a split behavior (the semantics of Hugging Face's SplitDelimiterBehavior) and appends the
// resulting pieces of `piece` to `out`. Returns false when the first byte of the piece was removed.
bool emit_splits(std::string_view piece, std::vector<std::pair<MatchRange, bool>>& splits, Behavior behavior,
                 Pieces& out) {
  bool first_kept = true;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& [r, is_match] : splits) out.push(piece.substr(r.begin, r.end - r.begin));
      break;
    case Behavior::kRemoved:
      for (size_t i = 0; i < splits.size(); ++i) {
        const auto& [r, is_match] = splits[i];
        if (is_match) {
          if (i == 0) first_kept = false;
          continue;
        }
        out.push(piece.substr(r.begin, r.end - r.begin));
      }
      break;
    case Behavior::kMergedWithPrevious: {
      // A match joins the piece before it unless that piece was itself a match.
      std::vector<MatchRange> merged;
      bool previous_match = false;
      for (const auto& [r, is_match] : splits) {
        if (is_match && !previous_match && !merged.empty()) {
          merged.back().end = r.end;
        } else {
          merged.push_back(r);
        }
        previous_match = is_match;
      }
      for (const MatchRange& r : merged) out.push(piece.substr(r.begin, r.end - r.begin));
      break;
    }
    case Behavior::kMergedWithNext: {
      // Mirror image: a match joins the piece after it unless that piece is itself a match.
      std::vector<MatchRange> merged;
      bool next_match = false;
      for (size_t i = splits.size(); i-- > 0;) {
        const auto& [r, is_match] = splits[i];
        if (is_match && !next_match && !merged.empty()) {
          merged.back().begin = r.begin;
        } else {
          merged.push_back(r);
        }
        next_match = is_match;
      }
      for (size_t i = merged.size(); i-- > 0;) out.push(piece.substr(merged[i].begin, merged[i].end - merged[i].begin));
      break;
    }
    case Behavior::kContiguous: {
      std::vector<MatchRange> merged;
      bool previous_match = false;
      for (const auto& [r, is_match] : splits) {
        if (is_match && previous_match) {
          merged.back().end = r.end;
        } else {
          merged.push_back(r);
        }
        previous_match = is_match;
      }
      for (const MatchRange& r : merged) out.push(piece.substr(r.begin, r.end - r.begin));
      break;
    }
  }
  return first_kept;
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const json& spec, const std::string& where)
      : pattern_(spec.at("pattern"), where + ": Split pre_tokenizer"),
        behavior_(parse_behavior(spec, where)),
        invert_(spec.value("invert", false)) {}

  void pre_tokenize(Pieces& pieces, PreTokenizeScratch& scratch) const override {
    Pieces& out = scratch.other;
    out.clear();
    out.first_at_input_start = pieces.first_at_input_start;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string_view piece = pieces.piece(i);
      scratch.matches.clear();
      pattern_.find_all(piece, scratch.matches);
      matches_to_splits(scratch.matches, piece.size(), invert_, scratch.splits);
      const bool first_kept = emit_splits(piece, scratch.splits, behavior_, out);
      if (i == 0 && !first_kept) out.first_at_input_start = false;
    }
    std::swap(pieces, out);
  }

  bool can_stream() const override { return behavior_ == Behavior::kIsolated || behavior_ == Behavior::kRemoved; }

  size_t pre_tokenize_some(std::string_view text, size_t start, size_t max_pieces, Pieces& out,
                           PreTokenizeScratch& scratch) const override {
    out.clear();
    scratch.matches.clear();
    const size_t resume = pattern_.find_some(text, start, max_pieces, scratch.matches);
    // Matches are relative to the whole text; rebase them on the window [start, resume).
    for (MatchRange& m : scratch.matches) m.begin -= start, m.end -= start;
    const std::string_view window = text.substr(start, resume - start);
    matches_to_splits(scratch.matches, window.size(), invert_, scratch.splits);
    const bool first_kept = emit_splits(window, scratch.splits, behavior_, out);
    out.first_at_input_start = start == 0 && first_kept;
    return resume;
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenizer regex, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const json& spec, const std::string& where)
      : add_prefix_space_(spec.value("add_prefix_space", true)) {
    if (spec.value("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern, where + ": ByteLevel");
  }

  void pre_tokenize(Pieces& pieces, PreTokenizeScratch& scratch) const override {
    const ByteLevelAlphabet& alphabet = byte_level_alphabet();
    Pieces& out = scratch.other;
    out.clear();
    out.first_at_input_start = pieces.first_at_input_start;
    std::string prefixed;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string_view piece = pieces.piece(i);
      if (add_prefix_space_ && piece.front() != ' ') {
        prefixed.clear();
        prefixed.push_back(' ');
        prefixed.append(piece.data(), piece.size());
        piece = prefixed;
      }
      scratch.matches.clear();
      if (regex_) {
        regex_->find_all(piece, scratch.matches);
        matches_to_splits(scratch.matches, piece.size(), false, scratch.splits);
      } else {
        scratch.splits.assign(1, {{0, piece.size()}, false});
      }
      // Each byte becomes 1 or 2 bytes of UTF-8: size the output once, then write it directly.
      size_t length = out.text.size();
      out.text.resize(length + 2 * piece.size());
      char* dst = out.text.data();
      for (const auto& [r, is_match] : scratch.splits) {
        for (size_t b = r.begin; b < r.end; ++b) {
          const std::string& mapped = alphabet.byte_to_utf8[static_cast<unsigned char>(piece[b])];
          dst[length] = mapped[0];
          if (mapped.size() > 1) dst[length + 1] = mapped[1];
          length += mapped.size();
        }
        out.ends.push_back(static_cast<uint32_t>(length));
      }
      out.text.resize(length);
    }
    std::swap(pieces, out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

// SentencePiece-style: spaces become the replacement character ("▁"), optionally prefixed, and the
// text is optionally split before each replacement character.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };

  MetaspacePreTokenizer(const json& spec, const std::string& where) {
    replacement_ = spec.value("replacement", std::string("\xE2\x96\x81"));
    if (replacement_.empty()) invalid_argument(where + ": Metaspace replacement must not be empty");
    split_ = spec.value("split", true);
    if (spec.contains("prepend_scheme") && spec["prepend_scheme"].is_string()) {
      const std::string scheme = spec["prepend_scheme"].get<std::string>();
      if (scheme == "always") prepend_ = Prepend::kAlways;
      else if (scheme == "first") prepend_ = Prepend::kFirst;
      else if (scheme == "never") prepend_ = Prepend::kNever;
      else unsupported(where + ": unsupported: Metaspace prepend_scheme " + scheme);
    } else {
      prepend_ = spec.value("add_prefix_space", true) ? Prepend::kAlways : Prepend::kNever;
    }
  }

  void pre_tokenize(Pieces& pieces, PreTokenizeScratch& scratch) const override {
    Pieces& out = scratch.other;
    out.clear();
    out.first_at_input_start = pieces.first_at_input_start;
    std::string replaced;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string_view piece = pieces.piece(i);
      // After replacing spaces, does the piece start with the replacement character?
      const bool starts = piece.front() == ' ' || piece.substr(0, replacement_.size()) == replacement_;
      const bool at_start = i == 0 && pieces.first_at_input_start;
      replaced.clear();
      if (!starts && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && at_start))) {
        replaced += replacement_;
      }
      for (char c : piece) {
        if (c == ' ') replaced += replacement_;
        else replaced += c;
      }
      if (!split_) {
        out.push(replaced);
        continue;
      }
      // Split before every replacement character (MergedWithNext).
      size_t begin = 0;
      size_t pos = replaced.find(replacement_, 1);
      while (pos != std::string::npos) {
        out.push(std::string_view(replaced).substr(begin, pos - begin));
        begin = pos;
        pos = replaced.find(replacement_, pos + replacement_.size());
      }
      out.push(std::string_view(replaced).substr(begin));
    }
    std::swap(pieces, out);
  }

 private:
  std::string replacement_;
  bool split_ = true;
  Prepend prepend_ = Prepend::kAlways;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}

  void pre_tokenize(Pieces& pieces, PreTokenizeScratch& scratch) const override {
    Pieces& out = scratch.other;
    out.clear();
    out.first_at_input_start = pieces.first_at_input_start;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string_view piece = pieces.piece(i);
      scratch.matches.clear();
      size_t pos = 0;
      while (pos < piece.size()) {
        const size_t start = pos;
        if (is_numeric(next_code_point(piece, pos))) scratch.matches.push_back({start, pos});
      }
      matches_to_splits(scratch.matches, piece.size(), false, scratch.splits);
      emit_splits(piece, scratch.splits, individual_ ? Behavior::kIsolated : Behavior::kContiguous, out);
    }
    std::swap(pieces, out);
  }

 private:
  bool individual_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(Pieces& pieces, PreTokenizeScratch& scratch) const override {
    for (const auto& part : parts_) part->pre_tokenize(pieces, scratch);
  }

  bool can_stream() const override { return !parts_.empty() && parts_[0]->can_stream(); }

  size_t pre_tokenize_some(std::string_view text, size_t start, size_t max_pieces, Pieces& out,
                           PreTokenizeScratch& scratch) const override {
    const size_t resume = parts_[0]->pre_tokenize_some(text, start, max_pieces, out, scratch);
    for (size_t i = 1; i < parts_.size(); ++i) parts_[i]->pre_tokenize(out, scratch);
    return resume;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    invalid_argument(where + ": pre_tokenizer must be an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "Split") {
    if (!spec.contains("pattern")) invalid_argument(where + ": Split pre_tokenizer needs 'pattern'");
    return std::make_unique<SplitPreTokenizer>(spec, where);
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(spec, where);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(spec, where);
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(spec.value("individual_digits", false));
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array()) {
      invalid_argument(where + ": Sequence pre_tokenizer needs a 'pretokenizers' array");
    }
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& part : spec["pretokenizers"]) {
      if (auto p = make_pre_tokenizer(part, where)) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  unsupported(where + ": unsupported: pre_tokenizer " + type);
}

}  // namespace pagellm::tok
