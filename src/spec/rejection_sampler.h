// Verification of draft tokens against the target model (Leviathan et al. 2023, Chen et al. 2023),
// shared by every backend: given the target's logits at the 1 + k positions of a speculating row,
// decide which drafts to keep and which token follows them.
//
//   greedy:  accept draft j while it equals the target's choice (sample_token's argmax with the
//            request's bans and penalties), then append the target's token — the output is exactly
//            the one without speculation;
//   sampled: accept draft x with probability min(1, p(x) / q(x)) (q = the draft's distribution, a
//            point mass for n-gram drafts); on rejection draw from norm(max(p - q, 0)) and stop;
//            when all k are accepted draw a bonus token from p. Every output token is then
//            distributed exactly as p, the distribution sample_token draws from.
//
// p at position j is the target's distribution given the verified prefix plus drafts 0..j-1: its
// penalties see those drafts as output tokens and its min_tokens bans apply while output index
// num_output + j is below min_tokens. Random numbers are counter-based per output index (a seeded
// request stays reproducible), from streams separate from sample_token's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/scheduler_output.h"
#include "pagellm/outputs.h"

namespace pagellm::spec {

struct VerifyResult {
  std::vector<int32_t> token_ids;       // accepted drafts, then the target's token: [1, k + 1]
  std::vector<TokenLogprobs> logprobs;  // the target's raw logprobs of each (top-N as requested)
};

// logits: [1 + seq.num_spec_tokens, vocab] the target's rows at the positions of the last verified
// token and of each draft (modified in place). Throws pagellm::Error (kInternal) on a malformed
// row.
VerifyResult verify_drafts(std::span<float> logits, const engine::ScheduledSeq& seq);

// The sampling context of output index num_output + j of `base`: its output extended by the first
// j entries of `drafts` (penalties, RNG counter), with the min_tokens bans only while they apply.
// `scratch` keeps the extended output alive while the result is used.
engine::ScheduledSeq position_context(const engine::ScheduledSeq& base,
                                      std::span<const int32_t> drafts, int j,
                                      std::vector<int32_t>& scratch);

// Inverse-CDF draw of an index from non-negative `weights` (any total) with u in [0, 1): the first
// index whose running sum (in double) exceeds u * total; -1 when the total is 0.
int32_t draw_index(std::span<const float> weights, double u);

// Independent uniform streams for the draft's own sampling, acceptance tests and residual draws.
enum class Stream : uint64_t { kDraft = 1, kAccept = 2, kResidual = 3 };
double stream_uniform(uint64_t seed, Stream stream, uint64_t output_index);

}  // namespace pagellm::spec
