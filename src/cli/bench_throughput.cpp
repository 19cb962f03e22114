// `pagellm bench throughput`: offline throughput like `vllm bench throughput`. N random prompts
// (--input-len tokens each, --output-len generated with ignore_eos) or a JSONL dataset, run as one
// batch through the engine; prints requests/s, total tokens/s and output tokens/s, and the run's
// lower bound from the device's ceilings, measured after the run (cli/throughput_bound.h).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/bench_datasets.h"
#include "cli/bench_latency.h"
#include "cli/bench_serve.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/prompts_file.h"
#include "cli/throughput_bound.h"
#include "common/error.h"
#include "pagellm/llm.h"
#include "runner/device_ceilings.h"
#include "runner/model_loader.h"

namespace pagellm::cli {
namespace {

struct ThroughputOptions {
  int input_len = 128;
  int output_len = 128;
  int num_prompts = 100;
  std::string dataset;
  std::string output_json;
  bool bound = true;
};

// Why the lower bound is not computed for this run ("" when it is): one device's ceilings and
// its 16-bit and FP8 GEMM rates are what it is made of.
std::string bound_unsupported(const EngineArgs& args, const io::ModelConfig& config) {
  if (config.quant.quantized() && !(config.quant.fp8() && args.device == "cuda"))
    return "quantized weights (the bound covers 16-bit weights, and FP8 weights on the GPU)";
  if (args.tensor_parallel_size * args.pipeline_parallel_size * args.data_parallel_size > 1)
    return "more than one device";
  return "";
}

BoundInputs bound_inputs(const EngineArgs& args, const io::ModelConfig& config,
                         const std::vector<RequestOutput>& outputs) {
  BoundInputs in;
  // The CPU holds fp32; the GPU the checkpoint's dtype unless --dtype says otherwise.
  const bool cpu = args.device == "cpu";
  in.weight_bytes = cpu || args.dtype == "float32" ? 4
                    : args.dtype == "auto"         ? double(dtype_size(config.torch_dtype))
                                                   : 2;
  in.kv_bytes = args.kv_cache_dtype.rfind("fp8", 0) == 0 ? 1 : in.weight_bytes;
  in.fp8_projections = config.quant.fp8() && !cpu;
  in.max_num_seqs = args.max_num_seqs;
  for (const auto& out : outputs)
    for (const auto& c : out.outputs)
      in.requests.emplace_back(int64_t(out.prompt_token_ids.size()), int64_t(c.token_ids.size()));
  return in;
}

// argv run as a child process (argv[0] a path); its stdout returned, its stderr passed through.
// Throws pagellm::Error when it cannot start or does not exit 0.
std::string run_capturing_stdout(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0)
    throw_error(ErrorKind::kInternal, "pipe: " + std::string(std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> cargs;
  for (const std::string& a : argv) cargs.push_back(const_cast<char*>(a.c_str()));
  cargs.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, cargs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw_error(ErrorKind::kInternal, "cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) out.append(buf, size_t(n));
    if (n == 0 || (n < 0 && errno != EINTR)) break;
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw_error(ErrorKind::kInternal, argv[0] + " " + argv[1] + " " + argv[2] + " failed");
  return out;
}

// One line: "Ceilings (how): copy X GB/s, GEMM Y TFLOP/s[, FP8 GEMM Z TFLOP/s]".
std::string describe_ceilings(const runner::DeviceCeilings& c) {
  char line[512];
  std::snprintf(line, sizeof line, "Ceilings (%s): copy %.1f GB/s, GEMM %.1f TFLOP/s",
                c.what.c_str(), c.copy_gbps, c.gemm_tflops);
  std::string s = line;
  if (c.fp8_gemm_tflops > 0) {
    std::snprintf(line, sizeof line, ", FP8 GEMM %.1f TFLOP/s", c.fp8_gemm_tflops);
    s += line;
  }
  return s;
}

// `pagellm bench ceilings`: the device's copy and GEMM rates (runner/device_ceilings.h), one line.
int run_ceilings(int argc, char** argv) {
  CLI::App app{
      "The device's copy rate, 16-bit GEMM rate and (on GPUs with FP8 tensor cores) FP8 GEMM rate: "
      "what bench throughput's bound uses"};
  EngineArgs args;
  app.add_option("--device", args.device, "auto (the GPU when there is one), cpu or cuda")
      ->capture_default_str();
  app.add_option("--dtype", args.dtype, "the GEMM's dtype: auto (bfloat16), bfloat16 or float16")
      ->capture_default_str();
  PAGELLM_PARSE(app, argc, argv);
  args.resolve_device();
  if (args.device != "cpu" && args.device != "cuda")
    invalid_argument("--device " + args.device + ": expected auto, cpu or cuda");
  std::printf("%s\n", describe_ceilings(runner::measure_device_ceilings(args)).c_str());
  return 0;
}

// `bench ceilings` run by this same binary as a child process, its line parsed back.
runner::DeviceCeilings ceilings_in_child_process(const EngineArgs& args) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string out = run_capturing_stdout(
      {self, "bench", "ceilings", "--device", args.device, "--dtype", args.dtype});
  runner::DeviceCeilings c;
  const size_t open = out.find("Ceilings ("), close = out.find("): copy ");
  if (open == std::string::npos || close == std::string::npos ||
      std::sscanf(out.c_str() + close, "): copy %lf GB/s, GEMM %lf TFLOP/s", &c.copy_gbps,
                  &c.gemm_tflops) != 2)
    throw_error(ErrorKind::kInternal, "bench ceilings printed no ceilings: " + out);
  c.what = out.substr(open + 10, close - open - 10);
  const size_t fp8 = out.find(", FP8 GEMM ", close);
  if (fp8 != std::string::npos &&
      std::sscanf(out.c_str() + fp8, ", FP8 GEMM %lf TFLOP/s", &c.fp8_gemm_tflops) != 1)
    throw_error(ErrorKind::kInternal, "bench ceilings printed no FP8 GEMM rate: " + out);
  return c;
}

// The benchmark's requests through an engine of its own (gone when this returns); elapsed: the
// seconds generate() took; stats: the engine's afterwards (its peak KV use).
std::vector<RequestOutput> run_requests(const EngineArgs& args, const ThroughputOptions& o,
                                        double& elapsed, EngineStats& stats) {
  SamplingParams params;  // vLLM: temperature 1, top_p 1, ignore_eos, max_tokens = output_len
  params.temperature = 1.0f;
  params.ignore_eos = true;
  params.max_tokens = o.output_len;
  LLM llm(args);
  std::vector<PromptInput> prompts;
  std::vector<SamplingParams> all_params;
  if (!o.dataset.empty()) {
    for (auto& line : read_prompts_file(o.dataset, params, static_cast<size_t>(o.num_prompts))) {
      prompts.push_back(std::move(line.prompt));
      all_params.push_back(line.params);
    }
  } else {
    // vLLM's random dataset: ids drawn uniformly, skipping the lowest (special) ids.
    const int vocab = llm.engine().model_info().vocab_size;
    prompts = random_token_prompts(o.num_prompts, o.input_len, std::min(10, vocab / 4), vocab - 1,
                                   args.seed);
    all_params.assign(prompts.size(), params);
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<RequestOutput> outputs = llm.generate(prompts, all_params, /*show_progress=*/true);
  elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats = llm.engine().take_stats();
  return outputs;
}

// What one run produced, and how long it took.
struct ThroughputResult {
  double elapsed = 0;
  EngineStats stats;
  uint64_t prompt_tokens = 0, output_tokens = 0;
  size_t num_requests = 0;
  double requests_per_second() const { return double(num_requests) / elapsed; }
  double tokens_per_second() const { return double(prompt_tokens + output_tokens) / elapsed; }
  double output_tokens_per_second() const { return double(output_tokens) / elapsed; }
};

void print_throughput(const ThroughputResult& r) {
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              r.requests_per_second(), r.tokens_per_second(), r.output_tokens_per_second());
  std::printf("Total num prompt tokens:  %llu\n", static_cast<unsigned long long>(r.prompt_tokens));
  std::printf("Total num output tokens:  %llu\n", static_cast<unsigned long long>(r.output_tokens));
  std::printf("Peak KV cache use: %d of %d blocks (%.1f%%)\n", r.stats.kv_peak_blocks,
              r.stats.num_kv_blocks,
              100.0 * r.stats.kv_peak_blocks / std::max(r.stats.num_kv_blocks, 1));
}

void write_throughput_json(const std::string& path, const ThroughputResult& r,
                           const std::optional<ThroughputBound>& bound,
                           const runner::DeviceCeilings& ceilings) {
  nlohmann::json j = {{"elapsed_time", r.elapsed},
                      {"num_requests", r.num_requests},
                      {"total_num_tokens", r.prompt_tokens + r.output_tokens},
                      {"num_prompt_tokens", r.prompt_tokens},
                      {"num_output_tokens", r.output_tokens},
                      {"kv_peak_blocks", r.stats.kv_peak_blocks},
                      {"num_kv_blocks", r.stats.num_kv_blocks},
                      {"requests_per_second", r.requests_per_second()},
                      {"tokens_per_second", r.tokens_per_second()},
                      {"output_tokens_per_second", r.output_tokens_per_second()}};
  if (bound)
    j["lower_bound"] = {{"seconds", bound->seconds()},
                        {"prefill_seconds", bound->prefill_seconds},
                        {"decode_seconds", bound->decode_seconds},
                        {"prefill_flop", bound->prefill_flop},
                        {"prefill_fp8_flop", bound->prefill_fp8_flop},
                        {"decode_steps", bound->decode_steps},
                        {"step_weight_bytes", bound->step_bytes},
                        {"kv_read_bytes", bound->kv_read_bytes},
                        {"copy_gbps", ceilings.copy_gbps},
                        {"gemm_tflops", ceilings.gemm_tflops},
                        {"fp8_gemm_tflops", ceilings.fp8_gemm_tflops},
                        {"elapsed_over_bound", r.elapsed / bound->seconds()}};
  std::ofstream f(path);
  if (!f) throw_error(ErrorKind::kNotFound, path + ": cannot write");
  f << j.dump(2) << "\n";
}

// The ceilings once the engine is gone, on the GPU in a process of their own (`bench ceilings`):
// measured before the run they slowed a short batch-1 run by 1.3-1.6%, and in this process after
// it the copy rate read 14% under the probe's (H100, docs/PERF.md). A failure leaves its reason
// in no_bound: the run's figures stand without the bound.
runner::DeviceCeilings measure_ceilings_after_run(const EngineArgs& args, std::string& no_bound) {
  runner::DeviceCeilings ceilings;
  try {
    if (no_bound.empty())
      ceilings = args.device == "cuda" ? ceilings_in_child_process(args)
                                       : runner::measure_device_ceilings(args);
  } catch (const Error& e) {
    no_bound = e.what();
  }
  return ceilings;
}

int run_throughput(int argc, char** argv) {
  CLI::App app{"Offline throughput benchmark (like `vllm bench throughput`)"};
  EngineArgs args;
  add_engine_flags(app, args);
  ThroughputOptions o;
  app.add_option("--input-len", o.input_len, "prompt tokens per random request")
      ->capture_default_str();
  app.add_option("--output-len", o.output_len, "generated tokens per request")
      ->capture_default_str();
  app.add_option("--num-prompts", o.num_prompts, "requests")->capture_default_str();
  app.add_option("--dataset", o.dataset, "JSONL prompts file instead of random prompts");
  app.add_option("--output-json", o.output_json, "write the results as JSON here");
  app.add_flag("!--no-bound", o.bound,
               "skip measuring the device's ceilings and printing the run's lower bound");
  PAGELLM_PARSE(app, argc, argv);
  if (o.input_len < 1 || o.output_len < 1 || o.num_prompts < 1) {
    invalid_argument("bench throughput: --input-len, --output-len and --num-prompts must be >= 1");
  }
  args.resolve();
  // A worker process of a multi-process group executes the leader's steps instead.
  if (const std::optional<int> code = runner::run_worker_process(args)) return *code;

  const io::ModelConfig config = runner::served_model_config(args);
  std::string no_bound = o.bound ? bound_unsupported(args, config) : "--no-bound";
  ThroughputResult r;
  const std::vector<RequestOutput> outputs = run_requests(args, o, r.elapsed, r.stats);
  const runner::DeviceCeilings ceilings = measure_ceilings_after_run(args, no_bound);
  r.num_requests = outputs.size();
  for (const auto& out : outputs) {
    r.prompt_tokens += out.prompt_token_ids.size();
    for (const auto& c : out.outputs) r.output_tokens += c.token_ids.size();
  }
  print_throughput(r);
  std::optional<ThroughputBound> bound;
  const BoundInputs inputs = bound_inputs(args, config, outputs);
  if (no_bound.empty() && inputs.fp8_projections && ceilings.fp8_gemm_tflops <= 0)
    no_bound = "FP8 weights on a GPU without FP8 tensor cores (no FP8 GEMM rate)";
  if (no_bound.empty()) {
    bound = throughput_bound(config, inputs, ceilings);
    std::printf("%s\n", describe_ceilings(ceilings).c_str());
    std::printf("%s\n", describe_bound(*bound, ceilings, r.elapsed).c_str());
  } else {
    std::printf("Lower bound: not computed (%s)\n", no_bound.c_str());
  }
  std::fflush(stdout);
  if (!o.output_json.empty()) write_throughput_json(o.output_json, r, bound, ceilings);
  return 0;
}

int run_bench(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "throughput") == 0) {
    std::string program = std::string(argv[0]) + " throughput";
    argv[1] = program.data();
    return run_throughput(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "ceilings") == 0) {
    std::string program = std::string(argv[0]) + " ceilings";
    argv[1] = program.data();
    return run_ceilings(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "latency") == 0) {
    std::string program = std::string(argv[0]) + " latency";
    argv[1] = program.data();
    return run_bench_latency(argc - 1, argv + 1);
  }
  if (argc >= 2 && std::strcmp(argv[1], "serve") == 0) {
    std::string program = std::string(argv[0]) + " serve";
    argv[1] = program.data();
    return run_bench_serve(argc - 1, argv + 1);
  }
  std::fprintf(
      stderr,
      "usage: pagellm bench throughput|latency|serve|ceilings [options]   (pagellm bench <mode> "
      "--help)\n");
  return 2;
}

}  // namespace

PAGELLM_COMMAND("bench",
                "benchmarks: `bench throughput` (offline), `bench latency` (one batch to "
                "completion), `bench serve` (HTTP load), `bench ceilings` (the device's copy and "
                "GEMM rates)",
                run_bench);

}  // namespace pagellm::cli
