// The load generator behind `pagellm bench serve`: replays prompts against any OpenAI-compatible
// server over asynchronous HTTP (Beast), with Poisson (or gamma, via burstiness) arrivals and a
// concurrency cap, timing each streamed token. Reports what `vllm bench serve` reports.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::server {

struct BenchOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;
  std::string endpoint = "/v1/completions";  // or /v1/chat/completions
  std::string model;                          // empty = omit the field
  std::string api_key;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s; inf = all at once
  double burstiness = 1.0;                    // gamma shape; 1 = Poisson
  int max_concurrency = 0;                    // 0 = unlimited
  uint64_t seed = 0;
  bool ignore_eos = true;
  double temperature = 0.0;
  double timeout_s = 600;                     // per request
};

struct BenchPrompt {
  nlohmann::json prompt;  // string or token ids
  int prompt_len = 0;     // tokens when known (token-id prompts), else 0 (the server's usage counts)
  int output_len = 128;   // max_tokens
};

struct BenchResult {
  bool success = false;
  std::string error;
  double ttft_s = 0;
  double latency_s = 0;
  std::vector<double> itl_s;  // gaps between streamed chunks
  int prompt_tokens = 0;
  int output_tokens = 0;
};

// Runs every prompt once; returns results in prompt order and the wall time in `duration_s`.
std::vector<BenchResult> run_bench(const BenchOptions& options, const std::vector<BenchPrompt>& prompts,
                                   double* duration_s);

struct Summary {
  double mean = 0, median = 0, p99 = 0, std = 0;
};
// Percentiles interpolate linearly between order statistics (numpy's default).
Summary summarize(std::vector<double> values);

// vLLM-style result object (times in ms): completed, failed, duration, throughputs, and
// mean/median/p99/std of ttft, tpot, itl and e2el.
nlohmann::json bench_report(const std::vector<BenchResult>& results, double duration_s);
std::string format_bench_report(const nlohmann::json& report);

// Splits a streamed body into SSE `data:` payloads; returns the bytes consumed (whole events only).
size_t parse_sse_events(std::string_view data, std::vector<std::string>& payloads);

}  // namespace pagellm::server
