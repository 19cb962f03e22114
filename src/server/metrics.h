// Prometheus text exposition for /metrics: engine gauges and counters (from EngineStats) plus
// latency histograms that the server measures itself per request (arrival → first token, between
// tokens, arrival → finish). Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "pagellm/llm.h"

namespace pagellm::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double value);
  // Appends `name`_bucket/_sum/_count lines; `labels` is `key="value"` pairs without braces.
  void render(std::string& out, const std::string& name, const std::string& help,
              const std::string& labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // [bounds_.size() + 1], non-cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Escapes a Prometheus label value (backslash, quote, newline).
std::string escape_label(const std::string& value);

class Metrics {
 public:
  explicit Metrics(std::string model_name);

  // Latency observations in seconds.
  void observe_ttft(double s);
  void observe_itl(double s);
  void observe_e2e(double s);
  // A finished request's prompt and generated token counts (vllm:request_*_tokens histograms).
  void observe_request_tokens(int64_t prompt_tokens, int64_t generation_tokens);
  // Cache configuration for vllm:cache_config_info (constant labels, value 1).
  void set_cache_config(int block_size, const std::string& cache_dtype, bool prefix_caching);
  void count_http(int status);
  // Replaces the engine snapshot (its latency samples are ignored: the server measures its own).
  void set_engine_stats(const EngineStats& stats);
  // The same per engine replica (--data-parallel-size): with more than one, every engine series is
  // rendered once summed over the replicas and once per replica with an engine="<index>" label.
  void set_engine_stats(const std::vector<EngineStats>& per_engine);
  std::string render(int num_connections, int num_in_flight) const;

 private:
  mutable std::mutex mutex_;
  std::string labels_;  // model_name="..."
  EngineStats engine_;  // summed over the replicas
  std::vector<EngineStats> replicas_;  // per replica; empty without data parallelism
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram request_prompt_tokens_, request_generation_tokens_;
  std::string cache_config_labels_;
  std::map<int, uint64_t> http_by_status_;

  void render_engine(std::string& out) const;
};

}  // namespace pagellm::server
