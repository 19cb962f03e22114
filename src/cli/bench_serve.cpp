// `pagellm bench serve`: load-tests a running OpenAI-compatible server (pagellm, vLLM, ...) the way
// `vllm bench serve` does, with a random (token-id) or JSONL dataset.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include <CLI/CLI.hpp>

#include "cli/bench_serve.h"
#include "common/error.h"
#include "server/bench_client.h"

namespace pagellm::cli {
namespace {

using nlohmann::json;

struct DatasetFlags {
  std::string name = "random";
  std::string path;
  int num_prompts = 100;
  int input_len = 32;
  int output_len = 32;
  double range_ratio = 0.0;  // lengths drawn from [len * (1 - r), len * (1 + r)]
  int vocab_size = 512;      // random token ids are drawn from [3, vocab_size)
  uint64_t seed = 0;
};

int sample_len(std::mt19937_64& rng, int len, double ratio) {
  if (ratio <= 0) return len;
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - ratio))));
  const int hi = std::max(lo, static_cast<int>(std::ceil(len * (1 + ratio))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

std::vector<server::BenchPrompt> random_dataset(const DatasetFlags& f) {
  if (f.vocab_size <= 3) throw Error(ErrorKind::kInvalidArgument, "--random-vocab-size must be > 3");
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<int32_t> token(3, f.vocab_size - 1);
  std::vector<server::BenchPrompt> prompts;
  for (int i = 0; i < f.num_prompts; ++i) {
    server::BenchPrompt p;
    p.prompt_len = sample_len(rng, f.input_len, f.range_ratio);
    p.output_len = sample_len(rng, f.output_len, f.range_ratio);
    std::vector<int32_t> ids(static_cast<size_t>(p.prompt_len));
    for (auto& id : ids) id = token(rng);
    p.prompt = ids;
    prompts.push_back(std::move(p));
  }
  return prompts;
}

// One JSON object per line: {"prompt": "...", "output_len": N} (max_tokens is accepted for
// output_len); prompts are used in order, cycling when --num-prompts exceeds the file.
std::vector<server::BenchPrompt> jsonl_dataset(const DatasetFlags& f) {
  std::ifstream in(f.path);
  if (!in) throw Error(ErrorKind::kNotFound, "--dataset-path: cannot read '" + f.path + "'");
  std::vector<server::BenchPrompt> rows;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json row = json::parse(line, nullptr, false);
    const std::string where = f.path + ":" + std::to_string(line_no);
    if (!row.is_object() || !row.contains("prompt") || !(row["prompt"].is_string() || row["prompt"].is_array())) {
      throw Error(ErrorKind::kInvalidArgument, where + ": expected an object with a string 'prompt'");
    }
    server::BenchPrompt p;
    p.prompt = row["prompt"];
    p.output_len = f.output_len;
    for (const char* key : {"output_len", "max_tokens"}) {
      if (row.contains(key) && row[key].is_number_integer()) p.output_len = row[key].get<int>();
    }
    if (p.output_len < 1) throw Error(ErrorKind::kInvalidArgument, where + ": output_len must be >= 1");
    rows.push_back(std::move(p));
  }
  if (rows.empty()) throw Error(ErrorKind::kInvalidArgument, "--dataset-path: '" + f.path + "' holds no prompts");
  std::vector<server::BenchPrompt> prompts;
  for (int i = 0; i < f.num_prompts; ++i) prompts.push_back(rows[static_cast<size_t>(i) % rows.size()]);
  return prompts;
}

int run_serve_bench(int argc, char** argv) {
  CLI::App app{"Load-test an OpenAI-compatible server (like `vllm bench serve`)"};
  server::BenchOptions o;
  DatasetFlags d;
  std::string rate = "inf";
  std::string result_file;
  int port = 8000;
  app.add_option("--host", o.host, "server host");
  app.add_option("--port", port, "server port")->check(CLI::Range(1, 65535));
  app.add_option("--endpoint", o.endpoint, "/v1/completions or /v1/chat/completions");
  app.add_option("--model", o.model, "model name to send (default: omitted)");
  app.add_option("--api-key", o.api_key, "Bearer key");
  app.add_option("--dataset-name", d.name, "random or jsonl")->check(CLI::IsMember({"random", "jsonl"}));
  app.add_option("--dataset-path", d.path, "JSONL file for --dataset-name jsonl");
  app.add_option("--num-prompts", d.num_prompts, "requests to send")->check(CLI::Range(1, 10000000));
  app.add_option("--random-input-len", d.input_len, "prompt tokens (random dataset)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--random-output-len", d.output_len, "max_tokens per request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--random-range-ratio", d.range_ratio, "length spread (0 = fixed)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--random-vocab-size", d.vocab_size, "random token ids come from [3, N)");
  app.add_option("--request-rate", rate, "requests per second, or inf (all at once)");
  app.add_option("--burstiness", o.burstiness, "gamma shape of arrival gaps (1 = Poisson)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-concurrency", o.max_concurrency, "requests in flight at most (0 = unlimited)");
  app.add_option("--seed", d.seed, "dataset and arrival seed");
  app.add_option("--temperature", o.temperature, "sampling temperature (default greedy)");
  app.add_option("--request-timeout", o.timeout_s, "seconds per request");
  app.add_option("--result-file", result_file, "also write the results as JSON here");
  bool no_ignore_eos = false;
  app.add_flag("--no-ignore-eos", no_ignore_eos, "let requests stop at EOS (default: ignore_eos)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints --help, or the flag error
  }
  o.port = static_cast<uint16_t>(port);
  o.seed = d.seed;
  o.ignore_eos = !no_ignore_eos;
  if (rate == "inf") {
    o.request_rate = std::numeric_limits<double>::infinity();
  } else {
    try {
      o.request_rate = std::stod(rate);
    } catch (const std::exception&) {
      throw Error(ErrorKind::kInvalidArgument, "--request-rate: expected a number or 'inf', got '" + rate + "'");
    }
    if (!(o.request_rate > 0)) throw Error(ErrorKind::kInvalidArgument, "--request-rate must be > 0");
  }
  if (d.name == "jsonl" && d.path.empty()) throw Error(ErrorKind::kInvalidArgument, "--dataset-name jsonl needs --dataset-path");
  if (d.name == "random" && o.endpoint.find("chat") != std::string::npos) {
    throw Error(ErrorKind::kInvalidArgument, "the random dataset sends token ids: use /v1/completions or a JSONL dataset");
  }
  auto prompts = d.name == "random" ? random_dataset(d) : jsonl_dataset(d);
  std::fprintf(stderr, "bench serve: %zu requests to http://%s:%u%s, rate %s, max concurrency %d\n", prompts.size(),
               o.host.c_str(), o.port, o.endpoint.c_str(), rate.c_str(), o.max_concurrency);
  double duration = 0;
  auto results = server::run_bench(o, prompts, &duration);
  json report = server::bench_report(results, duration);
  report["request_rate"] = rate;
  report["max_concurrency"] = o.max_concurrency;
  report["num_prompts"] = d.num_prompts;
  report["dataset"] = d.name;
  std::fputs(server::format_bench_report(report).c_str(), stdout);
  if (!result_file.empty()) {
    std::ofstream out(result_file);
    if (!out) throw Error(ErrorKind::kInvalidArgument, "--result-file: cannot write '" + result_file + "'");
    out << report.dump(2) << "\n";
  }
  return report["failed"].get<int64_t>() == 0 ? 0 : 1;
}

}  // namespace

int run_bench_serve(int argc, char** argv) { return run_serve_bench(argc, argv); }

}  // namespace pagellm::cli
