// vLLM's incremental detokenization (detokenize_incrementally): keep a window of ids starting at
// prefix_offset; text is emitted for ids past read_offset only once decoding the window yields more
// text than the already-read part and does not end in U+FFFD (an incomplete UTF-8 sequence). Decoding
// with the preceding ids as context keeps spaces that decoders strip at the start of a sequence
// (Llama-2's "▁Hello" after a prompt becomes " Hello").
#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace pagellm::tok {

namespace {

// How many prompt ids give context to the first generated ones (vLLM's
// INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET).
constexpr size_t kInitialOffset = 5;

bool ends_with_replacement_char(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer,
                                               std::span<const int32_t> prompt_ids, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {
  // Context: the last few prompt ids that decode to something (special ones are skipped when asked).
  std::vector<int32_t> tail;
  for (size_t i = prompt_ids.size(); i-- > 0 && tail.size() < kInitialOffset + 1;) {
    if (skip_special_tokens_ && tokenizer_->is_special(prompt_ids[i])) continue;
    tail.push_back(prompt_ids[i]);
  }
  ids_.assign(tail.rbegin(), tail.rend());
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kInitialOffset ? ids_.size() - kInitialOffset : 0;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_->is_special(id)) return {};
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_->decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_->decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || ends_with_replacement_char(new_text)) return {};
  // The window decodes with its context; only the part past the already-read text is new.
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  // Drop ids before the window so memory stays bounded on long generations.
  if (prefix_offset_ > 64) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  text_ += delta;
  return delta;
}

}  // namespace pagellm::tok
