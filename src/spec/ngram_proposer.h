// Prompt-lookup ("n-gram") speculation: the request's own tokens (prompt + output) are searched for
// an earlier occurrence of their last n tokens, and the tokens that followed it are proposed. CPU
// only, no model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "spec/proposer.h"

namespace pagellm::spec {

// Drafts for `tokens`: the longest n in [min_n, max_n] whose last-n suffix occurs earlier in
// `tokens`; among the occurrences of that n, the latest one (recent context repeats best). Proposes
// up to max_drafts tokens that followed it (fewer when the match is near the end; none without a
// match).
std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int min_n, int max_n,
                                   int max_drafts);

class NgramProposer : public Proposer {
 public:
  NgramProposer(int num_speculative_tokens, int min_n, int max_n);
  void propose(std::span<const SpecCandidate> candidates) override;
  int num_speculative_tokens() const override { return k_; }

 private:
  int k_;
  int min_n_;
  int max_n_;
};

}  // namespace pagellm::spec
