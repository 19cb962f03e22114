#include "server/metrics.h"

#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>

#include "engine/stats.h"

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

// vLLM's request-size buckets (1, 2, 5, 10, 20, 50, ... up to the context length it serves).
std::vector<double> token_buckets() {
  std::vector<double> b;
  for (double scale = 1; scale <= 1e6; scale *= 10)
    for (double m : {1.0, 2.0, 5.0}) b.push_back(m * scale);
  return b;
}

// The series vLLM also exposes, under its names (pagellm:X -> vllm:X), and the older vLLM names
// that dashboards still query (vllm:gpu_cache_usage_perc, vllm:time_per_output_token_seconds).
const std::pair<const char*, const char*> kVllmNames[] = {
    {"pagellm:num_requests_running", "vllm:num_requests_running"},
    {"pagellm:num_requests_waiting", "vllm:num_requests_waiting"},
    {"pagellm:num_requests_swapped", "vllm:num_requests_swapped"},
    {"pagellm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"},
    {"pagellm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
    {"pagellm:prefix_cache_queries_total", "vllm:prefix_cache_queries_total"},
    {"pagellm:prefix_cache_hits_total", "vllm:prefix_cache_hits_total"},
    {"pagellm:num_preemptions_total", "vllm:num_preemptions_total"},
    {"pagellm:prompt_tokens_total", "vllm:prompt_tokens_total"},
    {"pagellm:generation_tokens_total", "vllm:generation_tokens_total"},
    {"pagellm:request_success_total", "vllm:request_success_total"},
    {"pagellm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
    {"pagellm:inter_token_latency_seconds", "vllm:inter_token_latency_seconds"},
    {"pagellm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
    {"pagellm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
    {"pagellm:request_prompt_tokens", "vllm:request_prompt_tokens"},
    {"pagellm:request_generation_tokens", "vllm:request_generation_tokens"},
    {"pagellm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts_total"},
    {"pagellm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"},
    {"pagellm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"},
    {"pagellm:spec_decode_num_accepted_tokens_per_pos_total",
     "vllm:spec_decode_num_accepted_tokens_per_pos_total"},
};

// The metric a text-format line is about: the name after "# HELP " / "# TYPE ", or before '{'.
std::string_view line_metric(std::string_view line) {
  if (line.starts_with("# HELP ") || line.starts_with("# TYPE ")) line.remove_prefix(7);
  const size_t end = line.find_first_of("{ ");
  std::string_view name = line.substr(0, end);
  for (const char* suffix : {"_bucket", "_sum", "_count"})
    if (name.ends_with(suffix) && !name.starts_with("pagellm:http")) {
      const std::string_view base = name.substr(0, name.size() - std::string_view(suffix).size());
      for (const auto& [from, to] : kVllmNames)
        if (base == from) return base;
    }
  return name;
}

// Every line of the series in kVllmNames again under each vLLM name, in the same order.
std::string vllm_copies(const std::string& text) {
  std::string out;
  for (const auto& [from, to] : kVllmNames) {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t eol = text.find('\n', pos);
      const std::string_view line(text.data() + pos, (eol == std::string::npos ? text.size() : eol) - pos);
      pos = eol == std::string::npos ? text.size() : eol + 1;
      if (line_metric(line) != from) continue;
      std::string copy(line);
      const size_t at = copy.find(from);
      copy.replace(at, std::string_view(from).size(), to);
      out += copy + "\n";
    }
  }
  return out;
}

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
      e2e_(kE2eBuckets),
      request_prompt_tokens_(token_buckets()),
      request_generation_tokens_(token_buckets()) {}

void Metrics::observe_request_tokens(int64_t prompt_tokens, int64_t generation_tokens) {
  std::lock_guard lock(mutex_);
  request_prompt_tokens_.observe(double(prompt_tokens));
  request_generation_tokens_.observe(double(generation_tokens));
}

void Metrics::set_cache_config(int block_size, const std::string& cache_dtype, bool prefix_caching) {
  std::lock_guard lock(mutex_);
  cache_config_labels_ = "block_size=\"" + std::to_string(block_size) + "\",cache_dtype=\"" +
                         escape_label(cache_dtype) + "\",enable_prefix_caching=\"" +
                         (prefix_caching ? "True" : "False") + "\"";
}

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
  set_engine_stats(std::vector<EngineStats>{stats});
}

void Metrics::set_engine_stats(const std::vector<EngineStats>& per_engine) {
  EngineStats total = per_engine.size() == 1 ? per_engine[0] : engine::sum_stats(per_engine);
  std::lock_guard lock(mutex_);
  engine_ = std::move(total);
  engine_.ttft_samples.clear();
  engine_.itl_samples.clear();
  engine_.e2e_samples.clear();
  replicas_.clear();
  if (per_engine.size() < 2) return;
  for (const EngineStats& r : per_engine) {
    replicas_.push_back(r);
    replicas_.back().ttft_samples.clear();
    replicas_.back().itl_samples.clear();
    replicas_.back().e2e_samples.clear();
  }
}

// The engine's gauges and counters: the (summed) series under the model label, then with data
// parallelism one series per replica with an engine label, as vLLM exposes its engines.
void Metrics::render_engine(std::string& out) const {
  using Get = double (*)(const EngineStats&);
  auto series = [&](const char* name, const char* type, const char* help, Get get) {
    header(out, name, type, help);
    sample(out, name, labels_, get(engine_));
    for (size_t i = 0; i < replicas_.size(); ++i)
      sample(out, name, labels_ + ",engine=\"" + std::to_string(i) + "\"", get(replicas_[i]));
  };
  series("pagellm:num_requests_running", "gauge", "Requests in the engine's running batch.",
         [](const EngineStats& e) { return double(e.num_running); });
  series("pagellm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.",
         [](const EngineStats& e) { return double(e.num_waiting); });
  series("pagellm:num_requests_swapped", "gauge", "Requests swapped out to host memory.",
         [](const EngineStats& e) { return double(e.num_swapped); });
  series("pagellm:kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0 to 1).",
         [](const EngineStats& e) { return e.kv_usage; });
  series("pagellm:num_kv_blocks", "gauge", "KV-cache blocks in the pool.",
         [](const EngineStats& e) { return double(e.num_kv_blocks); });
  series("pagellm:prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.",
         [](const EngineStats& e) { return double(e.prefix_cache_queries); });
  series("pagellm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
         [](const EngineStats& e) { return double(e.prefix_cache_hits); });
  series("pagellm:num_preemptions_total", "counter", "Requests preempted to free KV blocks.",
         [](const EngineStats& e) { return double(e.num_preemptions); });
  series("pagellm:prompt_tokens_total", "counter", "Prompt tokens processed.",
         [](const EngineStats& e) { return double(e.prompt_tokens); });
  series("pagellm:generation_tokens_total", "counter", "Tokens generated.",
         [](const EngineStats& e) { return double(e.generation_tokens); });
  series("pagellm:spec_decode_num_drafts_total", "counter", "Speculative decoding: rows verified with drafts.",
         [](const EngineStats& e) { return double(e.spec_num_drafts); });
  series("pagellm:spec_decode_num_draft_tokens_total", "counter", "Speculative decoding: draft tokens verified.",
         [](const EngineStats& e) { return double(e.spec_num_draft_tokens); });
  series("pagellm:spec_decode_num_accepted_tokens_total", "counter",
         "Speculative decoding: draft tokens accepted.",
         [](const EngineStats& e) { return double(e.spec_num_accepted_tokens); });
  header(out, "pagellm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Speculative decoding: draft tokens accepted, by draft position.");
  auto per_pos = [&](const EngineStats& e, const std::string& labels) {
    for (size_t i = 0; i < e.spec_accepted_per_pos.size(); ++i)
      sample(out, "pagellm:spec_decode_num_accepted_tokens_per_pos_total",
             labels + ",position=\"" + std::to_string(i) + "\"", double(e.spec_accepted_per_pos[i]));
  };
  per_pos(engine_, labels_);
  for (size_t i = 0; i < replicas_.size(); ++i) per_pos(replicas_[i], labels_ + ",engine=\"" + std::to_string(i) + "\"");
  header(out, "pagellm:request_success_total", "counter", "Finished requests by finish reason.");
  auto reasons = [&](const EngineStats& e, const std::string& labels) {
    const std::pair<const char*, uint64_t> by_reason[] = {{"stop", e.requests_finished_stop},
                                                          {"length", e.requests_finished_length},
                                                          {"abort", e.requests_finished_abort},
                                                          {"error", e.requests_finished_error}};
    for (const auto& [reason, n] : by_reason)
      sample(out, "pagellm:request_success_total", labels + ",finished_reason=\"" + reason + "\"",
             double(n));
  };
  reasons(engine_, labels_);
  for (size_t i = 0; i < replicas_.size(); ++i)
    reasons(replicas_[i], labels_ + ",engine=\"" + std::to_string(i) + "\"");
}

std::string Metrics::render(int num_connections, int num_in_flight) const {
  std::lock_guard lock(mutex_);
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(out, name, "gauge", help);
    sample(out, name, labels_, v);
  };
  render_engine(out);
  gauge("pagellm:http_connections", "Open HTTP connections.", num_connections);
  gauge("pagellm:http_requests_in_flight", "Generation requests being served over HTTP.",
        num_in_flight);
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
  request_prompt_tokens_.render(out, "pagellm:request_prompt_tokens", "Prompt tokens per finished request.",
                                labels_);
  request_generation_tokens_.render(out, "pagellm:request_generation_tokens",
                                    "Generated tokens per finished request.", labels_);
  out += vllm_copies(out);
  if (!cache_config_labels_.empty()) {
    header(out, "vllm:cache_config_info", "gauge", "Information of the KV cache configuration.");
    sample(out, "vllm:cache_config_info", cache_config_labels_ + ",num_gpu_blocks=\"" +
                                               std::to_string(engine_.num_kv_blocks) + "\"", 1);
  }
  return out;
}

}  // namespace pagellm::server
