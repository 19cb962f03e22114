// vLLM's command line on `pagellm serve` (issue 19): the model as a positional argument, flags a
// vLLM launch script carries that mean nothing here (accepted, said once in the log), and flags
// that only vLLM's Python runtime understands (refused, naming the flag and why).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "pagellm/engine_args.h"

namespace pagellm::cli {

struct VllmCompatFlags {
  std::string model_tag;  // `pagellm serve MODEL`
  bool trust_remote_code = false;
  bool disable_log_stats = false;
  bool enable_log_requests = false;
};

void add_vllm_compat_flags(CLI::App& app, VllmCompatFlags& f);

// Folds the compatibility flags into args: MODEL becomes --model (both given and different: a
// one-line error), --disable-log-stats turns the periodic stats off, and --trust-remote-code is
// logged as a no-op.
void apply_vllm_compat_flags(const VllmCompatFlags& f, EngineArgs& args);

}  // namespace pagellm::cli
