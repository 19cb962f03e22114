// `pagellm bench serve`: load-tests a running OpenAI-compatible server (pagellm, vLLM, ...) the way
// `vllm bench serve` does, with its datasets (cli/bench_datasets.h) and result file.
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <CLI/CLI.hpp>

#include "cli/bench_datasets.h"
#include "cli/bench_serve.h"
#include "common/error.h"
#include "server/bench_client.h"

namespace pagellm::cli {
namespace {

using nlohmann::json;

// vLLM's result file (--save-result): the report plus the per-request arrays its plotting and
// comparison scripts read.
json vllm_result(json report, const std::vector<server::BenchResult>& results,
                 const server::BenchOptions& o, const DatasetFlags& d) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", std::localtime(&now));
  report["date"] = date;
  report["backend"] = "openai";
  report["model_id"] = o.model;
  report["tokenizer_id"] = d.tokenizer;
  report["burstiness"] = o.burstiness;
  json input_lens = json::array(), output_lens = json::array(), ttfts = json::array(),
       itls = json::array();
  for (const server::BenchResult& r : results) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.success ? r.ttft_s : 0.0);
    itls.push_back(r.itl_s);
  }
  report["input_lens"] = input_lens;
  report["output_lens"] = output_lens;
  report["ttfts"] = ttfts;
  report["itls"] = itls;
  return report;
}

// vLLM's --base-url: http://HOST[:PORT] (a trailing /v1 or / is ignored).
void parse_base_url(std::string url, server::BenchOptions& o) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    invalid_argument("--base-url " + url + ": expected http://HOST[:PORT] (the load generator speaks plain HTTP)");
  url = url.substr(scheme.size());
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  while (!url.empty() && url.back() == '/') url.pop_back();
  const size_t colon = url.rfind(':');
  o.host = colon == std::string::npos ? url : url.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string port = url.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      invalid_argument("--base-url: bad port '" + port + "'");
    o.port = static_cast<uint16_t>(std::stoi(port));
  } else {
    o.port = 80;
  }
  if (o.host.empty() || o.host.find('/') != std::string::npos)
    invalid_argument("--base-url: no host in '" + scheme + url + "'");
}

void write_json(const std::string& path, const json& j) {
  std::ofstream out(path);
  if (!out) invalid_argument("cannot write the result file '" + path + "'");
  out << j.dump(2) << "\n";
}

struct ServeBenchFlags {
  server::BenchOptions o;
  DatasetFlags d;
  std::string rate = "inf";
  std::string result_file;
  int port = 8000;
  std::string base_url;
  bool save_result = false, ignore_eos = false, no_ignore_eos = false;
  std::string result_dir = ".", result_filename;
};

void add_dataset_flags(CLI::App& app, DatasetFlags& d) {
  app.add_option("--dataset-name", d.name, "random | sonnet | sharegpt | custom | jsonl")
      ->check(CLI::IsMember({"random", "sonnet", "sharegpt", "custom", "jsonl"}));
  app.add_option("--dataset-path", d.path, "the dataset file (sonnet text, ShareGPT JSON, JSONL)");
  app.add_option("--tokenizer", d.tokenizer, "tokenizer folder (sonnet / sharegpt token counts)");
  app.add_option("--random-prefix-len", d.prefix_len, "random: tokens every prompt shares first")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--sonnet-input-len", d.sonnet_input_len, "sonnet: prompt tokens");
  app.add_option("--sonnet-output-len", d.sonnet_output_len, "sonnet: max_tokens");
  app.add_option("--sonnet-prefix-len", d.sonnet_prefix_len, "sonnet: shared prefix tokens");
  app.add_option("--sharegpt-output-len", d.sharegpt_output_len, "sharegpt: max_tokens (default: the reply's)");
  app.add_option("--custom-output-len", d.custom_output_len, "custom: max_tokens");
  app.add_option("--num-prompts", d.num_prompts, "requests to send")->check(CLI::Range(1, 10000000));
  app.add_option("--random-input-len", d.input_len, "prompt tokens (random dataset)")->check(CLI::Range(1, 1 << 20));
  app.add_option("--random-output-len", d.output_len, "max_tokens per request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--random-range-ratio", d.range_ratio, "length spread (0 = fixed)")->check(CLI::Range(0.0, 1.0));
  app.add_option("--random-vocab-size", d.vocab_size, "random token ids come from [3, N)");
}

void add_serve_bench_flags(CLI::App& app, ServeBenchFlags& f) {
  server::BenchOptions& o = f.o;
  app.add_option("--base-url", f.base_url,
                 "http://HOST:PORT of the server (instead of --host / --port)");
  app.add_option("--host", o.host, "server host");
  app.add_option("--port", f.port, "server port")->check(CLI::Range(1, 65535));
  app.add_option("--endpoint", o.endpoint, "/v1/completions or /v1/chat/completions");
  app.add_option("--model", o.model, "model name to send (default: omitted)");
  app.add_option("--api-key", o.api_key, "Bearer key");
  add_dataset_flags(app, f.d);
  app.add_option("--request-rate", f.rate, "requests per second, or inf (all at once)");
  app.add_option("--burstiness", o.burstiness, "gamma shape of arrival gaps (1 = Poisson)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-concurrency", o.max_concurrency, "requests in flight at most (0 = unlimited)");
  app.add_option("--seed", f.d.seed, "dataset and arrival seed");
  app.add_option("--temperature", o.temperature, "sampling temperature (default greedy)");
  app.add_option("--request-timeout", o.timeout_s, "seconds per request");
  app.add_option("--result-file", f.result_file, "also write the results as JSON here");
  app.add_flag("--save-result", f.save_result,
               "write vLLM's result JSON (--result-dir / --result-filename)");
  app.add_option("--result-dir", f.result_dir, "folder of the --save-result file");
  app.add_option("--result-filename", f.result_filename, "name of the --save-result file");
  app.add_flag("--no-ignore-eos", f.no_ignore_eos,
               "let requests stop at EOS (default: ignore_eos)");
  app.add_flag("--ignore-eos", f.ignore_eos,
               "vLLM's flag: generate max_tokens every time (the default here)");
}

// Fills the options the flags imply: port or base URL, seed, EOS handling, the request rate and
// the dataset's tokenizer and endpoint kind.
void resolve_serve_bench_flags(ServeBenchFlags& f) {
  server::BenchOptions& o = f.o;
  o.port = static_cast<uint16_t>(f.port);
  if (!f.base_url.empty()) parse_base_url(f.base_url, o);
  o.seed = f.d.seed;
  o.ignore_eos = !f.no_ignore_eos;
  if (f.rate == "inf") {
    o.request_rate = std::numeric_limits<double>::infinity();
  } else {
    try {
      o.request_rate = std::stod(f.rate);
    } catch (const std::exception&) {
      throw Error(ErrorKind::kInvalidArgument,
                  "--request-rate: expected a number or 'inf', got '" + f.rate + "'");
    }
    if (!(o.request_rate > 0)) throw Error(ErrorKind::kInvalidArgument, "--request-rate must be > 0");
  }
  if (f.ignore_eos && f.no_ignore_eos)
    invalid_argument("--ignore-eos and --no-ignore-eos contradict each other");
  if (f.d.tokenizer.empty() && !o.model.empty() && std::filesystem::is_directory(o.model))
    f.d.tokenizer = o.model;
  f.d.chat = o.endpoint.find("chat") != std::string::npos;
}

// --save-result: vLLM's result JSON, named as vLLM names it unless --result-filename says.
void save_vllm_result(ServeBenchFlags& f, const json& report,
                      const std::vector<server::BenchResult>& results) {
  const json full = vllm_result(report, results, f.o, f.d);
  if (f.result_filename.empty())
    f.result_filename = "openai-" + f.rate + "qps-" +
                        (f.o.model.empty() ? std::string("model")
                                           : std::filesystem::path(f.o.model).filename().string()) +
                        "-" + full["date"].get<std::string>() + ".json";
  std::filesystem::create_directories(f.result_dir);
  write_json((std::filesystem::path(f.result_dir) / f.result_filename).string(), full);
}

int run_serve_bench(int argc, char** argv) {
  CLI::App app{"Load-test an OpenAI-compatible server (like `vllm bench serve`)"};
  ServeBenchFlags f;
  add_serve_bench_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints --help, or the flag error
  }
  resolve_serve_bench_flags(f);
  const server::BenchOptions& o = f.o;
  auto prompts = load_dataset(f.d);
  std::fprintf(stderr, "bench serve: %zu requests to http://%s:%u%s, rate %s, max concurrency %d\n",
               prompts.size(), o.host.c_str(), o.port, o.endpoint.c_str(), f.rate.c_str(),
               o.max_concurrency);
  double duration = 0;
  auto results = server::run_bench(o, prompts, &duration);
  json report = server::bench_report(results, duration);
  report["request_rate"] = f.rate;
  report["max_concurrency"] = o.max_concurrency;
  report["num_prompts"] = f.d.num_prompts;
  report["dataset"] = f.d.name;
  std::fputs(server::format_bench_report(report).c_str(), stdout);
  if (!f.result_file.empty()) write_json(f.result_file, report);
  if (f.save_result) save_vllm_result(f, report, results);
  return report["failed"].get<int64_t>() == 0 ? 0 : 1;
}

}  // namespace

int run_bench_serve(int argc, char** argv) { return run_serve_bench(argc, argv); }

}  // namespace pagellm::cli
