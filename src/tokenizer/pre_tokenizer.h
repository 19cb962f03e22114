// tokenizer.json "pre_tokenizer" components: they cut normalized text into pieces ("words") that the
// BPE model encodes independently, and may rewrite them (ByteLevel maps bytes to its alphabet,
// Metaspace turns spaces into "▁"). Supported: ByteLevel, Split, Metaspace, Digits, Sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"

namespace pagellm::tok {

// Pieces stored back to back: piece i is text[ends[i-1] .. ends[i]) (ends[-1] = 0). Empty pieces are
// never stored.
struct Pieces {
  std::string text;
  std::vector<uint32_t> ends;  // [num_pieces]
  // Piece 0 starts at offset 0 of the original input (Metaspace's prepend_scheme "first" needs it).
  bool first_at_input_start = false;

  size_t size() const { return ends.size(); }
  std::string_view piece(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends[i - 1];
    return std::string_view(text).substr(begin, ends[i] - begin);
  }
  void clear() {
    text.clear();
    ends.clear();
  }
  void push(std::string_view bytes) {
    if (bytes.empty()) return;
    text.append(bytes);
    ends.push_back(static_cast<uint32_t>(text.size()));
  }
};

// Scratch buffers reused across calls to avoid allocation per piece.
struct PreTokenizeScratch {
  Pieces other;
  std::vector<MatchRange> matches;
  std::vector<std::pair<MatchRange, bool>> splits;  // (range, is_match)
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Rewrites `pieces` in place (using scratch.other as the output buffer and swapping).
  virtual void pre_tokenize(Pieces& pieces, PreTokenizeScratch& scratch) const = 0;

  // Streaming over long text, for pipelines whose pieces are independent once the first stage has
  // cut the text (an Isolated or Removed Split first): pre-tokenizes text[start ..) up to a resume
  // point after at most about `max_pieces` first-stage pieces, into `out` (cleared first). Returns the
  // resume point (text.size() at the end). Returns 0 without output when streaming is unsupported.
  virtual size_t pre_tokenize_some(std::string_view text, size_t start, size_t max_pieces, Pieces& out,
                                   PreTokenizeScratch& scratch) const {
    return 0;
  }
  // True when pre_tokenize_some is supported.
  virtual bool can_stream() const { return false; }
};

// Returns nullptr for a JSON null; throws "unsupported: pre_tokenizer <type>" for unknown types.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);

}  // namespace pagellm::tok
