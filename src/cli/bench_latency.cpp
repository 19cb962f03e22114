// `pagellm bench latency`: the latency of one batch run to completion, like `vllm bench latency`.
// --batch-size prompts of --input-len random token ids (ids below 10,000, as vLLM draws them),
// --output-len tokens generated for each with ignore_eos, run --num-iters-warmup times untimed and
// --num-iters times timed through the offline engine; prints the mean and percentiles of the timed
// runs (cli/latency_stats.h) and, with --output-json, vLLM's result file.
#include "cli/bench_latency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>

#include <CLI/CLI.hpp>

#include "cli/bench_datasets.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/latency_stats.h"
#include "common/error.h"
#include "pagellm/llm.h"
#include "runner/model_loader.h"

namespace pagellm::cli {
namespace {

struct LatencyOptions {
  int input_len = 32;
  int output_len = 128;
  int batch_size = 8;
  int n = 1;
  int num_iters_warmup = 10;
  int num_iters = 30;
  bool disable_detokenize = false;
  bool profile = false;
  std::string output_json;
};

void add_latency_flags(CLI::App& app, LatencyOptions& o) {
  app.add_option("--input-len", o.input_len, "prompt tokens per request")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--output-len", o.output_len, "generated tokens per request (ignore_eos)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "requests in the batch")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--n", o.n, "sequences generated per prompt")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--num-iters-warmup", o.num_iters_warmup, "untimed runs first")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app.add_option("--num-iters", o.num_iters, "timed runs")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--disable-detokenize", o.disable_detokenize,
               "return token ids only (no incremental detokenization)");
  app.add_flag("--profile", o.profile, "vLLM's torch profiler run: refused here (use nsys)");
  app.add_option("--output-json", o.output_json, "write the latencies as JSON here (vLLM's keys)");
}

// Seconds to run the whole batch to completion.
double run_batch_once(LLM& llm, const std::vector<PromptInput>& prompts,
                      const SamplingParams& params) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<RequestOutput> out = llm.generate(prompts, params, /*show_progress=*/false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (out.size() != prompts.size())
    throw_error(ErrorKind::kInternal, "bench latency: a request of the batch returned nothing");
  return seconds;
}

LatencyReport measure_latency(const EngineArgs& args, const LatencyOptions& o) {
  LLM llm(args);
  const int max_len = llm.engine().model_info().max_model_len;
  if (int64_t(o.input_len) + o.output_len > max_len)
    invalid_argument("bench latency: --input-len + --output-len (" +
                     std::to_string(int64_t(o.input_len) + o.output_len) +
                     ") exceeds the model's max_model_len (" + std::to_string(max_len) +
                     "); raise --max-model-len or shorten them");
  SamplingParams params;  // vLLM: temperature 1, top_p 1, ignore_eos, max_tokens = output_len
  params.n = o.n;
  params.temperature = 1.0f;
  params.top_p = 1.0f;
  params.ignore_eos = true;
  params.max_tokens = o.output_len;
  params.detokenize = !o.disable_detokenize;
  const std::vector<PromptInput> prompts =
      // The batch: random ids below min(10,000, vocab), as vLLM's latency bench draws them.
      random_token_prompts(o.batch_size, o.input_len, 0,
                           std::min(10000, llm.engine().model_info().vocab_size) - 1, args.seed);
  std::fprintf(stderr, "Warming up (%d runs)...\n", o.num_iters_warmup);
  for (int i = 0; i < o.num_iters_warmup; ++i) run_batch_once(llm, prompts, params);
  LatencyReport report;
  report.batch_size = o.batch_size;
  report.output_len = o.output_len;
  for (int i = 0; i < o.num_iters; ++i) {
    report.latencies.push_back(run_batch_once(llm, prompts, params));
    std::fprintf(stderr, "\rtimed runs: %d / %d", i + 1, o.num_iters);
  }
  std::fprintf(stderr, "\n");
  return report;
}

}  // namespace

int run_bench_latency(int argc, char** argv) {
  CLI::App app{"Latency of one batch run to completion (like `vllm bench latency`)"};
  EngineArgs args;
  add_engine_flags(app, args);
  LatencyOptions o;
  add_latency_flags(app, o);
  PAGELLM_PARSE(app, argc, argv);
  if (o.profile)
    invalid_argument(
        "bench latency: --profile (vLLM's torch profiler) is not supported; run "
        "`nsys profile pagellm bench latency ...` instead");
  args.resolve();
  // A worker process of a multi-process group executes the leader's steps instead.
  if (const std::optional<int> code = runner::run_worker_process(args)) return *code;
  const LatencyReport report = measure_latency(args, o);
  std::fputs(report.format().c_str(), stdout);
  std::fflush(stdout);
  if (!o.output_json.empty()) {
    std::ofstream f(o.output_json);
    if (!f) throw_error(ErrorKind::kNotFound, o.output_json + ": cannot write");
    f << report.to_json().dump(4) << "\n";
  }
  return 0;
}

}  // namespace pagellm::cli
