// The narrow view of the engine that the HTTP server needs. The server never talks to AsyncEngine
// directly: AsyncEngineClient adapts the real engine, and unit tests substitute a fake, so the whole
// HTTP layer is testable without a model.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagellm/llm.h"

namespace pagellm::server {

class EngineClient {
 public:
  virtual ~EngineClient() = default;

  // Queues a request. Throws pagellm::Error when the engine rejects it (nothing is queued then).
  // `on_output` runs on the engine thread with deltas and must not block.
  virtual void add_request(const std::string& request_id, const PromptInput& prompt,
                           const SamplingParams& params, OutputCallback on_output,
                           const RequestOptions& options) = 0;
  // Aborts at any stage; the request's last output (finish reason abort) still arrives. Unknown ids
  // are ignored.
  virtual void abort_request(const std::string& request_id) = 0;
  virtual bool healthy() const = 0;
  // Counters and gauges; latency samples are moved out (each is reported once).
  virtual EngineStats take_stats() = 0;
  // The same per engine replica (--data-parallel-size), in replica order; one entry without data
  // parallelism. /metrics labels each replica's series with engine="<index>".
  virtual std::vector<EngineStats> take_engine_stats() { return {take_stats()}; }
  virtual const ModelInfo& model_info() const = 0;

  // Tokenizer access (thread-safe).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const = 0;
  virtual int32_t vocab_size() const = 0;
  // Renders OpenAI-style messages (roles and string contents, already validated) through the chat
  // template; `extra_context` holds chat_template_kwargs and, under "tools", the request's tools. Throws pagellm::Error(kInvalidArgument) when the template rejects them, or when the
  // model has no chat template.
  virtual std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt,
                                  const nlohmann::json& extra_context) const = 0;

  // Stops taking requests; waits for running ones up to `timeout_s`, then aborts them.
  virtual void shutdown(double timeout_s) = 0;
};

}  // namespace pagellm::server
