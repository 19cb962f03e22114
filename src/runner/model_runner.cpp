#include "runner/model_runner.h"

#include <algorithm>
#include <string>

namespace pagellm::runner {

namespace {

[[noreturn]] void bad_chain(const std::string& message) {
  throw_error(ErrorKind::kInternal, "greedy chain: " + message);
}

}  // namespace

void check_greedy_chain(const engine::SchedulerOutput& batch, std::span<const int> steps) {
  if (steps.size() != batch.seqs.size())
    bad_chain(std::to_string(steps.size()) + " step counts for " +
              std::to_string(batch.seqs.size()) + " seqs");
  for (size_t i = 0; i < steps.size(); ++i) {
    const engine::ScheduledSeq& seq = batch.seqs[i];
    if (steps[i] < 1 || !seq.needs_sample || seq.num_spec_tokens != 0 || seq.token_ids.empty() ||
        seq.pooling != PoolingType::kNone)
      bad_chain("seq " + std::to_string(seq.seq_id) + " is not a sampled row of >= 1 step");
  }
}

namespace {

// Both chains on the host: with no features, execute_logits steps; with features, execute_features
// steps, each later one fed the seq's previous output hidden state as its feature.
std::vector<std::vector<int32_t>> host_chain(ModelRunner& runner,
                                             const engine::SchedulerOutput& batch,
                                             std::span<const int> steps,
                                             std::span<const float> features) {
  check_greedy_chain(batch, steps);
  const size_t n = batch.seqs.size();
  std::vector<std::vector<int32_t>> answers(n);
  std::vector<int32_t> inputs(n);  // each seq's token of the next step (spans point here)
  engine::SchedulerOutput step = batch;
  std::vector<size_t> owner(n);  // per seq of `step`: its index in batch
  for (size_t i = 0; i < n; ++i) owner[i] = i;
  std::vector<float> feats(features.begin(), features.end()), next_feats;
  while (!step.seqs.empty()) {
    std::vector<std::vector<float>> logits, hidden;
    if (features.empty()) {
      logits = runner.execute_logits(step);
    } else {
      ModelRunner::FeatureStep r = runner.execute_features(step, feats);
      logits = std::move(r.logits);
      hidden = std::move(r.hidden);
    }
    engine::SchedulerOutput next;
    std::vector<size_t> next_owner;
    next_feats.clear();
    for (size_t s = 0; s < step.seqs.size(); ++s) {
      const size_t i = owner[s];
      const std::vector<float>& row = logits.at(s);
      if (row.empty()) bad_chain("no logits for seq " + std::to_string(step.seqs[s].seq_id));
      answers[i].push_back(int32_t(std::max_element(row.begin(), row.end()) - row.begin()));
      if (int(answers[i].size()) == steps[i]) continue;
      engine::ScheduledSeq seq = step.seqs[s];
      seq.num_computed_tokens += int32_t(seq.token_ids.size());
      inputs[i] = answers[i].back();
      seq.token_ids = std::span<const int32_t>(&inputs[i], 1);
      next.seqs.push_back(seq);
      next.num_scheduled_tokens += 1;
      next_owner.push_back(i);
      if (!features.empty())
        next_feats.insert(next_feats.end(), hidden.at(s).begin(), hidden.at(s).end());
    }
    step = std::move(next);
    owner = std::move(next_owner);
    std::swap(feats, next_feats);
  }
  return answers;
}

}  // namespace

std::vector<std::vector<int32_t>> ModelRunner::execute_greedy_chain(
    const engine::SchedulerOutput& batch, std::span<const int> steps) {
  return host_chain(*this, batch, steps, {});
}

std::vector<std::vector<int32_t>> ModelRunner::execute_feature_chain(
    const engine::SchedulerOutput& batch, std::span<const float> features,
    std::span<const int> steps) {
  if (features.empty()) bad_chain("an EAGLE chain without features");
  return host_chain(*this, batch, steps, features);
}

}  // namespace pagellm::runner
