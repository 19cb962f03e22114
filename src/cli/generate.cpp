// `pagellm generate`: one prompt streamed to stdout, or a JSONL file of prompts run as one batch with
// one JSON result per line. Only generated text / results go to stdout; logs go to stderr.
#include <optional>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "runner/model_loader.h"
#include "cli/engine_flags.h"
#include "cli/prompts_file.h"
#include "cli/sampling_flags.h"
#include "common/error.h"
#include "common/logging.h"
#include "pagellm/llm.h"

namespace pagellm::cli {
namespace {

nlohmann::json completion_json(const CompletionOutput& c) {
  nlohmann::json j;
  j["index"] = c.index;
  j["text"] = c.text;
  j["token_ids"] = c.token_ids;
  j["finish_reason"] = finish_reason_name(c.finish_reason) ? finish_reason_name(c.finish_reason) : "";
  if (c.stop_reason) j["stop_reason"] = *c.stop_reason;
  j["cumulative_logprob"] = c.cumulative_logprob;
  if (!c.logprobs.empty()) {
    nlohmann::json lps = nlohmann::json::array();
    // Per generated token: the chosen id and logprob plus the top-N alternatives as [id, logprob]
    // pairs, best first (what an HF / vLLM logprob comparison needs).
    for (const auto& lp : c.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, value] : lp.top) top.push_back({id, value});
      lps.push_back({{"token_id", lp.token_id}, {"logprob", lp.logprob}, {"top", std::move(top)}});
    }
    j["logprobs"] = std::move(lps);
  }
  return j;
}

nlohmann::json result_json(size_t index, const RequestOutput& out) {
  nlohmann::json j;
  j["index"] = index;
  j["prompt"] = out.prompt;
  j["num_prompt_tokens"] = out.prompt_token_ids.size();
  j["num_cached_tokens"] = out.num_cached_tokens;
  if (!out.outputs.empty()) {
    const nlohmann::json first = completion_json(out.outputs.front());
    j["text"] = first["text"];
    j["token_ids"] = first["token_ids"];
    j["finish_reason"] = first["finish_reason"];
    if (first.contains("logprobs")) {
      j["cumulative_logprob"] = first["cumulative_logprob"];
      j["logprobs"] = first["logprobs"];
    }
  }
  if (!out.prompt_logprobs.empty()) {
    // Per prompt token: null for the first, else its id and logprob given the tokens before it
    // (teacher-forced scoring: perplexity = exp(-mean logprob)) and the model's top N there as
    // [id, logprob] pairs, best first (teacher-forced argmax agreement).
    nlohmann::json plp = nlohmann::json::array();
    for (const auto& lp : out.prompt_logprobs) {
      if (!lp) {
        plp.push_back(nullptr);
        continue;
      }
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, value] : lp->top) top.push_back({id, value});
      plp.push_back(
          {{"token_id", lp->token_id}, {"logprob", lp->logprob}, {"top", std::move(top)}});
    }
    j["prompt_logprobs"] = std::move(plp);
  }
  if (out.outputs.size() > 1) {
    j["outputs"] = nlohmann::json::array();
    for (const auto& c : out.outputs) j["outputs"].push_back(completion_json(c));
  }
  if (!out.error.empty()) j["error"] = out.error;
  return j;
}

// With --speculative-config: how many drafts the target accepted, overall and per position.
void log_spec_stats(const EngineStats& s) {
  if (s.spec_num_drafts == 0) return;
  std::string line = "speculative decoding: " + std::to_string(s.spec_num_drafts) + " drafts, " +
                     std::to_string(s.spec_num_draft_tokens) + " draft tokens, " +
                     std::to_string(s.spec_num_accepted_tokens) + " accepted";
  char buf[96];
  std::snprintf(buf, sizeof(buf), " (%.1f%%), mean acceptance length %.2f; accepted per position:",
                s.spec_num_draft_tokens > 0 ? 100.0 * double(s.spec_num_accepted_tokens) / double(s.spec_num_draft_tokens) : 0.0,
                1.0 + double(s.spec_num_accepted_tokens) / double(s.spec_num_drafts));
  line += buf;
  for (uint64_t n : s.spec_accepted_per_pos) line += " " + std::to_string(n);
  if (s.spec_draft_cost > 0) {
    std::snprintf(buf, sizeof(buf), "; adaptive k's draft cost %.3f of a target step",
                  s.spec_draft_cost);
    line += buf;
  }
  log::info(line);
}

int run_prompts_file(const EngineArgs& args, const std::string& path, const std::string& output_path,
                     const SamplingParams& defaults) {
  const std::vector<PromptLine> lines = read_prompts_file(path, defaults);
  std::vector<PromptInput> prompts;
  std::vector<SamplingParams> params;
  for (const auto& l : lines) {
    prompts.push_back(l.prompt);
    params.push_back(l.params);
  }
  LLM llm(args);
  const std::vector<RequestOutput> outputs = llm.generate(prompts, params, /*show_progress=*/true);
  log_spec_stats(llm.engine().take_stats());
  std::ofstream file;
  if (!output_path.empty()) {
    file.open(output_path);
    if (!file) throw_error(ErrorKind::kNotFound, output_path + ": cannot write");
  }
  std::ostream& os = output_path.empty() ? std::cout : file;
  for (size_t i = 0; i < outputs.size(); ++i) {
    os << result_json(i, outputs[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  os.flush();
  return 0;
}

int run_single(const EngineArgs& args, const std::string& prompt, const SamplingParams& params) {
  LLMEngine engine(args);
  const auto start = std::chrono::steady_clock::now();
  engine.add_request("generate", PromptInput::from_text(prompt), params);
  size_t num_printed = 0;  // characters of sample 0 already on stdout
  RequestOutput final_output;
  while (engine.has_unfinished_requests()) {
    for (RequestOutput& out : engine.step()) {
      if (params.n == 1 && !out.outputs.empty()) {
        const std::string& text = out.outputs[0].text;
        if (text.size() > num_printed) {
          std::fwrite(text.data() + num_printed, 1, text.size() - num_printed, stdout);
          std::fflush(stdout);
          num_printed = text.size();
        }
      }
      if (out.finished) final_output = std::move(out);
    }
  }
  size_t num_tokens = 0;
  for (size_t i = 0; i < final_output.outputs.size(); ++i) {
    num_tokens += final_output.outputs[i].token_ids.size();
    if (params.n > 1) {
      if (i > 0) std::fputs("\n", stdout);
      std::fwrite(final_output.outputs[i].text.data(), 1, final_output.outputs[i].text.size(), stdout);
    }
  }
  std::fputs("\n", stdout);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[160];
  std::snprintf(line, sizeof(line), "generated %zu tokens in %.3f s (%.1f tokens/s)", num_tokens, secs,
                secs > 0 ? static_cast<double>(num_tokens) / secs : 0.0);
  log::info(line);
  log_spec_stats(engine.take_stats());
  return 0;
}

int run_generate(int argc, char** argv) {
  CLI::App app{"Generate text with a model (greedy or sampled). Prints only the generated text."};
  EngineArgs args;
  add_engine_flags(app, args);
  std::string prompt;
  std::string prompts_file;
  std::string output_path;
  auto* prompt_opt = app.add_option("--prompt", prompt, "the prompt text");
  auto* file_opt = app.add_option("--prompts-file", prompts_file,
                                  "JSONL: one {\"prompt\": ...} per line, optional sampling fields");
  file_opt->excludes(prompt_opt);
  app.add_option("--output", output_path, "with --prompts-file: write results here instead of stdout");
  SamplingFlags sampling;
  sampling.add_to(app);
  PAGELLM_PARSE(app, argc, argv);
  if (prompt_opt->count() == 0 && file_opt->count() == 0) {
    invalid_argument("generate: give --prompt TEXT or --prompts-file FILE");
  }
  args.resolve();
  // A worker process of a multi-process group executes the leader's steps instead.
  if (const std::optional<int> code = runner::run_worker_process(args)) return *code;
  SamplingParams params = default_sampling_params(args);
  sampling.apply(params);
  if (app.get_option("--seed")->count() > 0) params.seed = args.seed;
  params.validate();
  if (file_opt->count() > 0) return run_prompts_file(args, prompts_file, output_path, params);
  return run_single(args, prompt, params);
}

}  // namespace

PAGELLM_COMMAND("generate", "generate text from a prompt or a JSONL file of prompts", run_generate);

}  // namespace pagellm::cli
