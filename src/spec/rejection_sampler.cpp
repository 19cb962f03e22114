#include "spec/rejection_sampler.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace pagellm::spec {

namespace {

[[noreturn]] void internal(const std::string& message) {
  throw_error(ErrorKind::kInternal, "verify_drafts: " + message);
}

// Per-thread scratch: one raw row kept for logprobs, the target's and the residual distribution.
struct Scratch {
  std::vector<float> raw;       // [vocab] the row before penalties (raw logprobs)
  std::vector<float> p;         // [vocab] the target's distribution
  std::vector<int32_t> output;  // the output extended by drafts
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// One sampled (non-greedy) position j: accept draft `d` or replace it. Returns whether accepted.
bool verify_sampled(std::span<float> row, const engine::ScheduledSeq& ctx, int32_t d,
                    std::span<const float> q, uint64_t output_index, int32_t& token, Scratch& s) {
  s.p.resize(row.size());
  engine::sampling_probs(row, ctx, s.p);
  const double pd = s.p[static_cast<size_t>(d)];
  const double qd = q.empty() ? 1.0 : static_cast<double>(q[static_cast<size_t>(d)]);
  // u < p/q, written without the division; a draft the proposer could not have drawn (q = 0) is
  // rejected.
  const double u = stream_uniform(ctx.seed, Stream::kAccept, output_index);
  if (qd > 0.0 && u * qd < pd) {
    token = d;
    return true;
  }
  // Residual max(p - q, 0), in place over p. For a point mass only p(d) changes (to 0).
  if (q.empty()) {
    s.p[static_cast<size_t>(d)] = 0.0f;
  } else {
    for (size_t i = 0; i < s.p.size(); ++i) s.p[i] = std::max(0.0f, s.p[i] - q[i]);
  }
  token = draw_index(s.p, stream_uniform(ctx.seed, Stream::kResidual, output_index));
  if (token < 0) {
    // p == q up to rounding: the residual is empty and p itself is the right law.
    std::copy(s.raw.begin(), s.raw.end(), row.begin());
    engine::sampling_probs(row, ctx, s.p);
    token = draw_index(s.p, stream_uniform(ctx.seed, Stream::kResidual, output_index));
  }
  return false;
}

}  // namespace

double stream_uniform(uint64_t seed, Stream stream, uint64_t output_index) {
  return engine::sample_uniform(
      engine::splitmix64(seed ^ (static_cast<uint64_t>(stream) * 0x632be59bd9b4e019ULL)),
      output_index);
}

int32_t draw_index(std::span<const float> weights, double u) {
  double total = 0.0;
  for (float w : weights) total += w > 0.0f ? w : 0.0f;
  if (!(total > 0.0)) return -1;
  const double target = u * total;
  double run = 0.0;
  int32_t last = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!(weights[i] > 0.0f)) continue;
    run += weights[i];
    last = static_cast<int32_t>(i);
    if (run > target) break;
  }
  return last;
}

engine::ScheduledSeq position_context(const engine::ScheduledSeq& base,
                                      std::span<const int32_t> drafts, int j,
                                      std::vector<int32_t>& scratch) {
  engine::ScheduledSeq ctx = base;
  scratch.assign(base.output_token_ids.begin(), base.output_token_ids.end());
  scratch.insert(scratch.end(), drafts.begin(), drafts.begin() + j);
  ctx.output_token_ids = scratch;
  // process_token lifts the bans once min_tokens outputs exist, so output index i is banned while
  // i < min_tokens.
  const int64_t index = static_cast<int64_t>(base.output_token_ids.size()) + j;
  if (base.params == nullptr || index >= base.params->min_tokens) ctx.banned_token_ids = {};
  return ctx;
}

VerifyResult verify_drafts(std::span<float> logits, const engine::ScheduledSeq& seq) {
  const int k = seq.num_spec_tokens;
  if (seq.params == nullptr)
    internal("seq " + std::to_string(seq.seq_id) + " has no sampling params");
  if (k < 1 || static_cast<size_t>(k) >= seq.token_ids.size() || logits.empty() ||
      logits.size() % static_cast<size_t>(k + 1) != 0)
    internal("seq " + std::to_string(seq.seq_id) + ": bad draft count " + std::to_string(k));
  const size_t vocab = logits.size() / static_cast<size_t>(k + 1);
  if (!seq.draft_probs.empty() && seq.draft_probs.size() != static_cast<size_t>(k) * vocab)
    internal("seq " + std::to_string(seq.seq_id) + ": draft_probs is not [num_spec_tokens, vocab]");
  const std::span<const int32_t> drafts = seq.token_ids.last(static_cast<size_t>(k));
  for (int32_t d : drafts)
    if (d < 0 || static_cast<size_t>(d) >= vocab)
      internal("draft token " + std::to_string(d) + " outside the vocabulary");
  const SamplingParams& params = *seq.params;
  const int top_n = params.logprobs.value_or(0);
  Scratch& s = scratch();
  VerifyResult result;
  for (int j = 0; j <= k; ++j) {
    const std::span<float> row = logits.subspan(static_cast<size_t>(j) * vocab, vocab);
    const engine::ScheduledSeq ctx = position_context(seq, drafts, j, s.output);
    const uint64_t index = ctx.output_token_ids.size();
    int32_t token = -1;
    bool accepted = false;
    if (j == k || params.greedy()) {
      // The bonus token, or greedy: exactly what sample_token picks without speculation.
      engine::SampleResult r = engine::sample_token(row, ctx);
      token = r.token_id;
      accepted = j < k && token == drafts[static_cast<size_t>(j)];
      result.token_ids.push_back(token);
      result.logprobs.push_back(std::move(r.logprobs));
    } else {
      s.raw.assign(row.begin(), row.end());
      const std::span<const float> q =
          seq.draft_probs.empty() ? std::span<const float>{}
                                  : seq.draft_probs.subspan(static_cast<size_t>(j) * vocab, vocab);
      accepted = verify_sampled(row, ctx, drafts[static_cast<size_t>(j)], q, index, token, s);
      result.token_ids.push_back(token);
      result.logprobs.push_back(engine::compute_logprobs(s.raw, token, top_n));
    }
    if (!accepted) break;
  }
  return result;
}

}  // namespace pagellm::spec
