#include "spec/proposer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "engine/sampler.h"
#include "spec/draft_proposer.h"
#include "spec/eagle_proposer.h"
#include "spec/ngram_proposer.h"
#include "spec/rejection_sampler.h"

namespace pagellm::spec {

std::unique_ptr<Proposer> make_proposer(const EngineArgs& args, const runner::ModelRunner& target,
                                        const tok::Tokenizer& tokenizer) {
  const SpeculativeConfig& sc = args.speculative;
  if (!sc.enabled()) return nullptr;
  sc.validate();
  if (sc.method == "ngram") {
    return std::make_unique<NgramProposer>(sc.num_speculative_tokens, sc.prompt_lookup_min,
                                           sc.prompt_lookup_max);
  }
  if (sc.method == "eagle") return load_eagle_proposer(args, target);
  return load_draft_proposer(args, target, tokenizer);
}

int clear_drafts(engine::Sequence& seq) {
  seq.spec_token_ids.clear();
  seq.spec_draft_probs.clear();
  seq.spec_base_len = seq.num_tokens();
  return seq.num_tokens();
}

engine::ScheduledSeq draft_sampling_context(const engine::Sequence& seq, int step,
                                            std::vector<int32_t>& scratch) {
  engine::ScheduledSeq base;
  base.seq_id = seq.seq_id;
  base.params = &seq.request->params;
  base.seed = seq.seed;
  base.prompt_token_ids = seq.prompt_ids();
  base.output_token_ids = seq.output_ids();
  base.banned_token_ids = seq.banned_token_ids;
  return position_context(base, seq.spec_token_ids, step, scratch);
}

int32_t draw_sampled_draft(std::span<float> logits, engine::Sequence& seq, int step,
                           std::vector<int32_t>& scratch, std::vector<float>& probs) {
  const engine::ScheduledSeq ctx = draft_sampling_context(seq, step, scratch);
  probs.resize(logits.size());
  engine::sampling_probs(logits, ctx, probs);
  const int32_t token =
      draw_index(probs, stream_uniform(seq.seed, Stream::kDraft, ctx.output_token_ids.size()));
  seq.spec_draft_probs.insert(seq.spec_draft_probs.end(), probs.begin(), probs.end());
  return token;
}

int32_t argmax_draft(std::span<const float> logits) {
  if (logits.empty()) throw_error(ErrorKind::kInternal, "speculative decoding: empty logits row");
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

int adaptive_num_drafts(double hits, double trials, int k, double cost) {
  const double alpha = (std::max(0.0, hits) + 1.0) / (std::max(0.0, trials) + 1.0);
  if (alpha >= 1.0 || !(cost > 0.0)) return std::max(1, k);
  if (alpha <= 0.0) return 1;
  // alpha^j >= cost  <=>  j <= log(cost) / log(alpha) (both logs negative).
  const double most = std::floor(std::log(cost) / std::log(alpha) + 1e-9);
  return static_cast<int>(std::clamp(most, 1.0, static_cast<double>(std::max(1, k))));
}

}  // namespace pagellm::spec
