#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace pagellm::server {

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name + "{" + labels + "} " + number(v) + "\n";
}

// Buckets as vLLM uses them, so dashboards built for it read ours unchanged.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                          0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                                         0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                         20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Metrics::Metrics(std::string model_name)
    : labels_("model_name=\"" + escape_label(model_name) + "\""),
      ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      e2e_(kE2eBuckets) {}

void Metrics::observe_ttft(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}
void Metrics::observe_itl(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}
void Metrics::observe_e2e(double s) {
  std::lock_guard lock(mutex_);
  e2e_.observe(s);
}
void Metrics::count_http(int status) {
  std::lock_guard lock(mutex_);
  ++http_by_status_[status];
}

void Metrics::set_engine_stats(const EngineStats& stats) {
  std::lock_guard lock(mutex_);
  engine_ = stats;
  engine_.ttft_samples.clear();
  engine_.itl_samples.clear();
  engine_.e2e_samples.clear();
}

std::string Metrics::render(int num_connections, int num_in_flight) const {
  std::lock_guard lock(mutex_);
  std::string out;
  const auto& e = engine_;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    sample(out, name, labels_, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(out, name, "counter", help);
    sample(out, name, labels_, v);
  };
  gauge("pagellm:num_requests_running", "Requests in the engine's running batch.", e.num_running);
  gauge("pagellm:num_requests_waiting", "Requests waiting to be scheduled.", e.num_waiting);
  gauge("pagellm:num_requests_swapped", "Requests swapped out to host memory.", e.num_swapped);
  gauge("pagellm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0 to 1).", e.kv_usage);
  gauge("pagellm:num_kv_blocks", "KV-cache blocks in the pool.", e.num_kv_blocks);
  gauge("pagellm:http_connections", "Open HTTP connections.", num_connections);
  gauge("pagellm:http_requests_in_flight", "Generation requests being served over HTTP.", num_in_flight);
  counter("pagellm:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          static_cast<double>(e.prefix_cache_queries));
  counter("pagellm:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          static_cast<double>(e.prefix_cache_hits));
  counter("pagellm:num_preemptions_total", "Requests preempted to free KV blocks.",
          static_cast<double>(e.num_preemptions));
  counter("pagellm:prompt_tokens_total", "Prompt tokens processed.", static_cast<double>(e.prompt_tokens));
  counter("pagellm:generation_tokens_total", "Tokens generated.", static_cast<double>(e.generation_tokens));
  header(out, "pagellm:request_success_total", "counter", "Finished requests by finish reason.");
  const std::pair<const char*, uint64_t> reasons[] = {{"stop", e.requests_finished_stop},
                                                      {"length", e.requests_finished_length},
                                                      {"abort", e.requests_finished_abort},
                                                      {"error", e.requests_finished_error}};
  for (const auto& [reason, n] : reasons) {
    sample(out, "pagellm:request_success_total", labels_ + ",finished_reason=\"" + reason + "\"",
           static_cast<double>(n));
  }
  header(out, "pagellm:http_responses_total", "counter", "HTTP responses by status code.");
  for (const auto& [status, n] : http_by_status_) {
    sample(out, "pagellm:http_responses_total", labels_ + ",status=\"" + std::to_string(status) + "\"",
           static_cast<double>(n));
  }
  ttft_.render(out, "pagellm:time_to_first_token_seconds", "Time from request arrival to its first token.",
               labels_);
  itl_.render(out, "pagellm:inter_token_latency_seconds", "Time between consecutive output deltas.", labels_);
  e2e_.render(out, "pagellm:e2e_request_latency_seconds", "Time from request arrival to its last token.",
              labels_);
  return out;
}

}  // namespace pagellm::server
