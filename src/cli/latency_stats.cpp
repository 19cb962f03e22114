#include "cli/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/error.h"

namespace pagellm::cli {

double percentile(std::vector<double> values, double pct) {
  if (values.empty()) invalid_argument("percentile of no values");
  if (!(pct >= 0 && pct <= 100)) invalid_argument("percentile outside [0, 100]");
  std::sort(values.begin(), values.end());
  const double rank = pct / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - double(lo));
}

double LatencyReport::mean() const {
  if (latencies.empty()) return 0.0;
  return std::accumulate(latencies.begin(), latencies.end(), 0.0) / double(latencies.size());
}

std::string LatencyReport::format() const {
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "Avg latency: %.6f seconds\n", mean());
  out += line;
  for (double p : kLatencyPercentages) {
    std::snprintf(line, sizeof line, "%g%% percentile latency: %.6f seconds\n", p,
                  percentile(latencies, p));
    out += line;
  }
  if (output_len > 0) {
    std::snprintf(line, sizeof line,
                  "Per output token: %.3f ms (batch %d, %d tokens each; prefill included)\n",
                  1e3 * mean() / output_len, batch_size, output_len);
    out += line;
  }
  return out;
}

nlohmann::json LatencyReport::to_json() const {
  nlohmann::json percentiles = nlohmann::json::object();
  for (double p : kLatencyPercentages) {
    char key[16];
    std::snprintf(key, sizeof key, "%g", p);
    percentiles[key] = percentile(latencies, p);
  }
  return {{"avg_latency", mean()}, {"latencies", latencies}, {"percentiles", percentiles}};
}

}  // namespace pagellm::cli
