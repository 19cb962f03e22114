// The statistics `pagellm bench latency` reports, as `vllm bench latency` computes them: the mean
// of the timed iterations and their percentiles by linear interpolation between the closest ranks
// (numpy.percentile's default).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::cli {

// The percentiles `vllm bench latency` prints.
inline constexpr double kLatencyPercentages[] = {10, 25, 50, 75, 90, 99};

// The pct-th percentile (0..100) of values, interpolated linearly between the two closest ranks;
// throws pagellm::Error (kInvalidArgument) for no values or pct outside [0, 100].
double percentile(std::vector<double> values, double pct);

struct LatencyReport {
  std::vector<double> latencies;  // seconds per timed iteration
  int batch_size = 0;
  int output_len = 0;
  double mean() const;
  // "Avg latency: S seconds", one "P% percentile latency: S seconds" line per kLatencyPercentages
  // entry, then the time per generated token of one sequence.
  std::string format() const;
  // vLLM's --output-json: {"avg_latency", "latencies", "percentiles": {"10": S, ...}}.
  nlohmann::json to_json() const;
};

}  // namespace pagellm::cli
