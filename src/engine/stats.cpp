#include "engine/stats.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "common/logging.h"

namespace pagellm::engine {

void add_latency_sample(std::vector<double>& samples, double seconds) {
  if (samples.size() < kMaxLatencySamples) samples.push_back(seconds);
}

EngineStats sum_stats(const std::vector<EngineStats>& replicas) {
  EngineStats s;
  double used_blocks = 0;
  for (const EngineStats& r : replicas) {
    s.num_running += r.num_running;
    s.num_waiting += r.num_waiting;
    s.num_swapped += r.num_swapped;
    s.num_kv_blocks += r.num_kv_blocks;
    s.kv_peak_blocks += r.kv_peak_blocks;
    used_blocks += r.kv_usage * r.num_kv_blocks;
    s.prefix_cache_queries += r.prefix_cache_queries;
    s.prefix_cache_hits += r.prefix_cache_hits;
    s.num_preemptions += r.num_preemptions;
    s.prompt_tokens += r.prompt_tokens;
    s.generation_tokens += r.generation_tokens;
    s.requests_finished_stop += r.requests_finished_stop;
    s.requests_finished_length += r.requests_finished_length;
    s.requests_finished_abort += r.requests_finished_abort;
    s.requests_finished_error += r.requests_finished_error;
    s.num_steps += r.num_steps;
    s.spec_num_drafts += r.spec_num_drafts;
    s.spec_num_draft_tokens += r.spec_num_draft_tokens;
    s.spec_num_accepted_tokens += r.spec_num_accepted_tokens;
    if (s.spec_accepted_per_pos.size() < r.spec_accepted_per_pos.size())
      s.spec_accepted_per_pos.resize(r.spec_accepted_per_pos.size(), 0);
    for (size_t i = 0; i < r.spec_accepted_per_pos.size(); ++i) s.spec_accepted_per_pos[i] += r.spec_accepted_per_pos[i];
    s.spec_draft_cost = std::max(s.spec_draft_cost, r.spec_draft_cost);  // a gauge: the dearest
    for (double x : r.ttft_samples) add_latency_sample(s.ttft_samples, x);
    for (double x : r.itl_samples) add_latency_sample(s.itl_samples, x);
    for (double x : r.e2e_samples) add_latency_sample(s.e2e_samples, x);
  }
  if (s.num_kv_blocks > 0)
    s.kv_usage = used_blocks / s.num_kv_blocks;
  else if (!replicas.empty()) {
    for (const EngineStats& r : replicas)
      s.kv_usage += r.kv_usage / static_cast<double>(replicas.size());
  }
  return s;
}

std::string StatsLogger::format(const EngineStats& prev, const EngineStats& s, double elapsed_s) {
  const double dt = elapsed_s > 0 ? elapsed_s : 1.0;
  const double prompt_tps = static_cast<double>(s.prompt_tokens - prev.prompt_tokens) / dt;
  const double gen_tps = static_cast<double>(s.generation_tokens - prev.generation_tokens) / dt;
  const uint64_t queries = s.prefix_cache_queries - prev.prefix_cache_queries;
  const uint64_t hits = s.prefix_cache_hits - prev.prefix_cache_hits;
  const double hit_rate = queries > 0 ? 100.0 * static_cast<double>(hits) / static_cast<double>(queries) : 0.0;
  char line[384];
  std::snprintf(line, sizeof(line),
                "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                "Running: %d reqs, Swapped: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, "
                "Prefix cache hit rate: %.1f%%, Preemptions: %llu",
                prompt_tps, gen_tps, s.num_running, s.num_swapped, s.num_waiting, 100.0 * s.kv_usage,
                hit_rate, static_cast<unsigned long long>(s.num_preemptions));
  std::string out = line;
  const uint64_t drafts = s.spec_num_drafts - prev.spec_num_drafts;
  if (drafts > 0) {
    // vLLM's SpecDecoding line: acceptance rate over draft tokens, mean tokens per verified row.
    const uint64_t draft_tokens = s.spec_num_draft_tokens - prev.spec_num_draft_tokens;
    const uint64_t accepted = s.spec_num_accepted_tokens - prev.spec_num_accepted_tokens;
    std::snprintf(line, sizeof(line),
                  ", Spec decode: acceptance rate %.1f%%, mean acceptance length %.2f, drafts %llu",
                  draft_tokens > 0 ? 100.0 * double(accepted) / double(draft_tokens) : 0.0,
                  1.0 + double(accepted) / double(drafts), static_cast<unsigned long long>(drafts));
    out += line;
  }
  return out;
}

bool StatsLogger::maybe_log(const EngineStats& s, std::chrono::steady_clock::time_point now) {
  if (!started_) {
    started_ = true;
    last_time_ = now;
    last_ = s;
    return false;
  }
  const double elapsed = std::chrono::duration<double>(now - last_time_).count();
  if (elapsed < interval_s_) return false;
  log::info(format(last_, s, elapsed));
  last_time_ = now;
  last_ = s;
  last_.ttft_samples.clear();
  last_.itl_samples.clear();
  last_.e2e_samples.clear();
  return true;
}

}  // namespace pagellm::engine
