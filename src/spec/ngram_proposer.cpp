#include "spec/ngram_proposer.h"

#include <algorithm>

namespace pagellm::spec {

std::vector<int32_t> ngram_propose(std::span<const int32_t> tokens, int min_n, int max_n,
                                   int max_drafts) {
  const int len = static_cast<int>(tokens.size());
  if (max_drafts <= 0 || min_n < 1 || len < min_n + 1) return {};
  max_n = std::min(max_n, len - 1);
  // For each earlier end position e (the match ends at e, so tokens[e + 1] exists), the length of
  // the common suffix of tokens[0, e] and the whole sequence, capped at max_n. Scanning from the
  // end finds the latest occurrence of the longest n first; a full-length match stops the scan.
  int best_len = 0;
  int best_end = -1;
  for (int e = len - 2; e >= 0 && best_len < max_n; --e) {
    int m = 0;
    while (m < max_n && m <= e &&
           tokens[static_cast<size_t>(e - m)] == tokens[static_cast<size_t>(len - 1 - m)])
      ++m;
    if (m > best_len) {
      best_len = m;
      best_end = e;
    }
  }
  if (best_len < min_n) return {};
  const int begin = best_end + 1;
  const int end = std::min(len, begin + max_drafts);
  return {tokens.begin() + begin, tokens.begin() + end};
}

NgramProposer::NgramProposer(int num_speculative_tokens, int min_n, int max_n)
    : k_(num_speculative_tokens), min_n_(min_n), max_n_(max_n) {}

void NgramProposer::propose(std::span<const SpecCandidate> candidates) {
  for (const SpecCandidate& c : candidates) {
    engine::Sequence& seq = *c.seq;
    seq.spec_token_ids = ngram_propose(seq.token_ids, min_n_, max_n_, std::min(k_, c.max_drafts));
    seq.spec_draft_probs.clear();
    seq.spec_base_len = seq.num_tokens();
  }
}

}  // namespace pagellm::spec
