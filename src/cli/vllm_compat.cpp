#include "cli/vllm_compat.h"

#include "common/error.h"
#include "common/logging.h"

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
    {"--speculative-config", "speculative decoding is not supported yet"},
};

}  // namespace

void add_vllm_compat_flags(CLI::App& app, VllmCompatFlags& f) {
  app.add_option("model_tag", f.model_tag, "the model folder, as `vllm serve MODEL` takes it");
  app.add_flag("--trust-remote-code", f.trust_remote_code,
               "accepted for vLLM launch lines; pagellm runs no Python, so it changes nothing");
  app.add_flag("--disable-log-stats", f.disable_log_stats, "no periodic engine stats lines");
  app.add_flag("--enable-log-requests", f.enable_log_requests,
               "per-request log lines (the default; vLLM's flag)");
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

}  // namespace pagellm::cli
