#include "cli/vllm_compat.h"

#include "common/error.h"
#include "common/logging.h"
#include "pagellm/sampling_params.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

#include <filesystem>

namespace pagellm::cli {

namespace {

// vLLM flags that configure its Python runtime; each is refused with the reason.
struct Refused {
  const char* flag;
  const char* why;
};
constexpr Refused kRefused[] = {
    {"--distributed-executor-backend",
     "pagellm has no Ray / Python multiprocessing executor: ranks are threads or processes of its "
     "own (multi-node: --nnodes / --node-rank / --master-addr, or mpirun)"},
    {"--worker-cls", "pagellm runs no Python worker classes"},
    {"--worker-extension-cls", "pagellm runs no Python worker classes"},
    {"--compilation-config", "there is no torch.compile in pagellm (CUDA graphs are always on; "
                             "--enforce-eager turns them off)"},
    {"--tokenizer-mode", "pagellm has one tokenizer implementation (tokenizer.json)"},
    {"--model-impl", "pagellm runs its own model code only"},
    {"--ray-workers-use-nsight", "pagellm does not use Ray"},
    {"--kv-transfer-config", "disaggregated prefill (KV transfer) is not supported"},
    {"--enable-lora", "LoRA adapters are not supported yet"},
};

}  // namespace

void add_vllm_compat_flags(CLI::App& app, VllmCompatFlags& f) {
  app.add_option("model_tag", f.model_tag, "the model folder, as `vllm serve MODEL` takes it");
  app.add_flag("--trust-remote-code", f.trust_remote_code,
               "accepted for vLLM launch lines; pagellm runs no Python, so it changes nothing");
  app.add_flag("--disable-log-stats", f.disable_log_stats, "no periodic engine stats lines");
  app.add_flag("--enable-log-requests", f.enable_log_requests,
               "per-request log lines (the default; vLLM's flag)");
  app.add_option("--max-logprobs", f.max_logprobs, "most logprobs a request may ask for (<= 20)");
  app.add_option("--max-log-len", f.max_log_len, "bytes of a prompt shown in a log line");
  app.add_option("--response-role", f.response_role, "role of chat completion replies");
  app.add_option("--root-path", f.root_path, "path prefix a reverse proxy adds (stripped from requests)");
  app.add_option("--generation-config", f.generation_config,
                 "sampling defaults: auto (the model's generation_config.json), vllm (none), or a folder");
  app.add_option("--override-generation-config", f.override_generation_config,
                 "JSON fields over the generation config, e.g. '{\"temperature\": 0.5}'");
  app.add_flag("--return-tokens-as-token-ids", f.return_tokens_as_token_ids,
               "logprobs name their tokens 'token_id:N' instead of text");
  app.add_option("--ssl-certfile", f.ssl_certfile, "HTTPS: PEM certificate (chain) file");
  app.add_option("--ssl-keyfile", f.ssl_keyfile, "HTTPS: PEM private key file");
  app.add_option("--tool-call-parser", f.tool_call_parser,
                 "how tool calls are found in chat output: hermes, llama3_json or mistral");
  app.add_flag("--enable-auto-tool-choice", f.enable_auto_tool_choice,
               "let the model decide to call tools (tool_choice \"auto\"); needs --tool-call-parser");
  app.add_option("--reasoning-parser", f.reasoning_parser,
                 "split <think> reasoning into reasoning_content: deepseek_r1 or qwen3");
  for (const Refused& r : kRefused) {
    const std::string message = std::string(r.flag) + " is a vLLM flag pagellm does not take: " + r.why;
    app.add_option(r.flag, "vLLM only")
        ->group("")  // hidden from --help
        ->check(CLI::Validator([message](std::string&) { return message; }, "", "vllm-only"));
  }
}

void apply_vllm_compat_flags(const VllmCompatFlags& f, EngineArgs& args) {
  if (!f.model_tag.empty()) {
    if (!args.model.empty() && args.model != f.model_tag)
      invalid_argument("the model is given twice: '" + f.model_tag + "' and --model '" + args.model +
                       "'");
    args.model = f.model_tag;
  }
  if (f.disable_log_stats) args.log_stats = false;
  if (f.trust_remote_code)
    log::info("--trust-remote-code: accepted for vLLM compatibility; pagellm runs no Python code "
              "from the model folder, so it changes nothing");
}

void apply_vllm_server_flags(const VllmCompatFlags& f, server::ServerConfig& config) {
  if (f.max_logprobs < 0 || f.max_logprobs > SamplingParams::kMaxLogprobs)
    invalid_argument("--max-logprobs " + std::to_string(f.max_logprobs) + ": pagellm returns 0 to " +
                     std::to_string(SamplingParams::kMaxLogprobs) + " logprobs per token");
  if (f.response_role.empty() || f.response_role.size() > 64)
    invalid_argument("--response-role must be 1 to 64 characters");
  if (!f.root_path.empty() && (f.root_path.front() != '/' || f.root_path.back() == '/'))
    invalid_argument("--root-path '" + f.root_path + "' must start with '/' and not end with one");
  if (!f.tool_call_parser.empty()) (void)server::make_tool_call_parser(f.tool_call_parser);  // checks the name
  if (!f.reasoning_parser.empty()) (void)server::make_reasoning_parser(f.reasoning_parser);
  if (f.enable_auto_tool_choice && f.tool_call_parser.empty())
    invalid_argument("--enable-auto-tool-choice requires --tool-call-parser (hermes, llama3_json or mistral)");
  config.tool_call_parser = f.tool_call_parser;
  config.enable_auto_tool_choice = f.enable_auto_tool_choice;
  config.reasoning_parser = f.reasoning_parser;
  config.limits.max_logprobs = f.max_logprobs;
  config.max_log_len = f.max_log_len;
  config.response_role = f.response_role;
  config.root_path = f.root_path;
  config.return_tokens_as_token_ids = f.return_tokens_as_token_ids;
}

io::GenerationConfig resolve_generation_config(const VllmCompatFlags& f, const EngineArgs& args) {
  io::GenerationConfig g;
  if (f.generation_config == "auto") {
    if (!args.model.empty()) g = io::load_generation_config(args.model);
  } else if (f.generation_config != "vllm") {
    const std::filesystem::path dir(f.generation_config);
    if (!std::filesystem::exists(dir / "generation_config.json"))
      invalid_argument("--generation-config " + f.generation_config +
                       ": expected auto, vllm or a folder with generation_config.json");
    g = io::load_generation_config(dir);
  }
  if (f.override_generation_config.empty()) return g;
  const io::GenerationConfig o =
      io::parse_generation_config(f.override_generation_config, "--override-generation-config");
  if (o.temperature) g.temperature = o.temperature;
  if (o.top_p) g.top_p = o.top_p;
  if (o.top_k) g.top_k = o.top_k;
  if (o.min_p) g.min_p = o.min_p;
  if (o.repetition_penalty) g.repetition_penalty = o.repetition_penalty;
  if (o.max_new_tokens) g.max_new_tokens = o.max_new_tokens;
  if (!o.eos_token_ids.empty()) g.eos_token_ids = o.eos_token_ids;
  return g;
}

}  // namespace pagellm::cli
