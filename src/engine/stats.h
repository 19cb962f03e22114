// Engine counters for /metrics and the periodic stats log line (like vLLM's LoggingStatLogger).
#pragma once

#include <chrono>
#include <cstdint>

#include "pagellm/llm.h"

namespace pagellm::engine {

// Latency samples beyond this many per kind are dropped until someone takes them, so an engine whose
// stats nobody reads cannot grow without bound.
inline constexpr size_t kMaxLatencySamples = 1 << 16;

void add_latency_sample(std::vector<double>& samples, double seconds);

// The stats of several engine replicas as one engine: counts and counters summed, KV usage over
// all replicas' blocks, latency samples concatenated.
EngineStats sum_stats(const std::vector<EngineStats>& replicas);

// Logs throughput and queue state every `interval_s` seconds from successive counter snapshots.
class StatsLogger {
 public:
  explicit StatsLogger(double interval_s = 5.0) : interval_s_(interval_s) {}
  // Logs (stderr, info level) when the interval has passed since the previous line; returns whether it
  // did.
  bool maybe_log(const EngineStats& now_stats, std::chrono::steady_clock::time_point now);
  static std::string format(const EngineStats& prev, const EngineStats& now_stats, double elapsed_s);

 private:
  double interval_s_;
  bool started_ = false;
  std::chrono::steady_clock::time_point last_time_;
  EngineStats last_;
};

}  // namespace pagellm::engine
