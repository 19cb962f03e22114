// Per-request token restrictions beside the sampler's pipeline: allowed_token_ids as a token mask
// (the structured-output mask format, so both samplers apply it as they apply a grammar's), and
// bad_words as banned ids recomputed after every generated token (so both samplers and the draft
// proposer see them through ScheduledSeq::banned_token_ids). logit_bias is the sampler's own step.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagellm::engine {

// [ceil(vocab / 32)] words with the bits of `ids` set. Ids outside [0, vocab) throw
// pagellm::Error(kInvalidArgument) naming allowed_token_ids.
std::vector<uint32_t> allowed_token_mask(const std::vector<int32_t>& ids, int32_t vocab);

// Whether a token mask (that format) allows `token`; ids past it are disallowed.
inline bool mask_allows(std::span<const uint32_t> mask, int32_t token) {
  return token >= 0 && size_t(token) / 32 < mask.size() &&
         ((mask[size_t(token) / 32] >> (token % 32)) & 1u);
}

// Each bad word's token ids, as vLLM tokenizes them: the word (leading spaces stripped) as it reads
// at the start of a text, and also after a space when that gives a different first token and as
// many tokens (a word in mid-sentence). No special tokens are added. A word whose tokens leave the
// vocabulary throws pagellm::Error(kInvalidArgument).
std::vector<std::vector<int32_t>> tokenize_bad_words(const std::vector<std::string>& words,
                                                     const tok::Tokenizer& tokenizer,
                                                     int32_t vocab);

// Appends to `banned` (once each) the last token of every bad word whose other tokens are the last
// ones of `output` (a one-token word always).
void add_bad_word_bans(const std::vector<std::vector<int32_t>>& words,
                       std::span<const int32_t> output, std::vector<int32_t>& banned);

}  // namespace pagellm::engine
