// What one more draft costs against a target step, measured (adaptive k, SpeculativeConfig::
// adaptive): the engine times each proposal (per draft position) and each target step that
// verified drafts; the cost is the proposal's time per position over the target step's, plus the
// share of a target step that verifying one more token takes. Until both have been seen a few
// times, the configured default stands.
#pragma once

#include <algorithm>

namespace pagellm::spec {

class DraftCostMeter {
 public:
  // Samples before the measurement replaces the default, and the weight of a new sample in the
  // running averages.
  static constexpr int kMinSamples = 4;
  static constexpr double kWeight = 0.1;
  // The cost is kept below one target step: a draft that costs a whole step can never pay, and
  // adaptive_num_drafts still drafts one.
  static constexpr double kMaxCost = 0.95;

  // A proposal of `positions` draft positions (1..k) that took `seconds`.
  void add_proposal(double seconds, int positions) {
    if (positions < 1 || !(seconds >= 0)) return;
    add(proposal_, proposals_, seconds / positions);
  }
  // A target step that verified drafts and took `seconds`.
  void add_target_step(double seconds) {
    if (!(seconds > 0)) return;
    add(step_, steps_, seconds);
  }
  bool measured() const { return proposals_ >= kMinSamples && steps_ >= kMinSamples; }
  // The measured cost plus `verify_cost`, or `fallback` before measured().
  double cost(double fallback, double verify_cost) const {
    if (!measured()) return fallback;
    return std::min(kMaxCost, proposal_ / step_ + verify_cost);
  }

 private:
  static void add(double& average, int& count, double sample) {
    average = count == 0 ? sample : average + kWeight * (sample - average);
    ++count;
  }

  double proposal_ = 0, step_ = 0;
  int proposals_ = 0, steps_ = 0;
};

}  // namespace pagellm::spec
