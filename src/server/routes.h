// The OpenAI-compatible application on top of HttpServer: routing, auth, request limits, and the
// non-generation endpoints (/health, /version, /v1/models, /metrics, /tokenize, /detokenize).
// Generation requests are handed to GenerationCall (generation.h).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/embeddings.h"
#include "server/engine_client.h"
#include "server/generation.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"

namespace pagellm::server {

struct ServerConfig {
  std::string served_model_name;  // empty = the engine's model name
  // Other names requests may use for the model: the --model string as given (vLLM serves a model
  // under exactly that), e.g. a path whose folder name is the served name.
  std::vector<std::string> model_aliases;
  std::string api_key;            // empty = no authentication
  int max_queued_requests = -1;   // sequences allowed to wait beyond max_num_seqs; -1 = unlimited
  int max_num_seqs = 256;         // the engine's batch limit
  bool log_prompts = false;
  bool log_requests = true;
  size_t max_log_len = 4096;                // --max-log-len: bytes of a prompt in a log line
  std::string response_role = "assistant";  // --response-role: the role of chat replies
  std::string root_path;                    // --root-path: a proxy's path prefix, stripped
  bool return_tokens_as_token_ids = false;  // logprobs name tokens "token_id:N" (vLLM's flag)
  // The KV cache configuration, for vllm:cache_config_info.
  int block_size = 16;
  bool enable_prefix_caching = true;
  std::string cache_dtype = "auto";
  ProtocolLimits limits;
  // Values for what a request leaves unset, from generation_config.json (as vLLM): sampling
  // defaults, and max_new_tokens caps the max_tokens a request without one gets.
  SamplingParams sampling_defaults;
  std::optional<int> default_max_tokens;
  // /v1/embeddings (engines started with --runner pooling): the pooler.
  PoolingType pooling = PoolingType::kLast;
  bool normalize = true;
  // Chat output parsing (vLLM's flags): --tool-call-parser (hermes, llama3_json, mistral; empty =
  // none), --enable-auto-tool-choice (tool_choice "auto" needs it), --reasoning-parser (deepseek_r1,
  // qwen3; empty = none).
  std::string tool_call_parser;
  bool enable_auto_tool_choice = false;
  std::string reasoning_parser;
};

class ApiServer : public HttpHandler {
 public:
  ApiServer(EngineClient& engine, ServerConfig config);

  void handle(HttpRequest request, std::shared_ptr<ResponseWriter> writer) override;
  std::string reject_body(int status, const std::string& message) override;

  // New generation requests get 503 from now on.
  void begin_drain() { draining_ = true; }
  bool draining() const { return draining_.load(); }
  int num_in_flight() const { return num_in_flight_.load(); }
  // Supplies the open-connection count for /metrics.
  void set_connection_counter(std::function<int()> fn) { connection_counter_ = std::move(fn); }

  // Used by GenerationCall.
  EngineClient& engine() { return engine_; }
  Metrics& metrics() { return metrics_; }
  const ServerConfig& config() const { return config_; }
  const std::string& model_name() const { return config_.served_model_name; }
  // A generated token's text as it reads inside a sequence (leading space kept: SentencePiece
  // decoders strip it from a lone token), for logprobs and token_strs.
  std::string token_text(int32_t id) const;
  // Reserves room for `num_seqs` sequences under --max-queued-requests; false when full.
  bool try_admit(int num_seqs);
  void release(int num_seqs);
  // One log line per request: method, path, status, tokens, latency (+ prompt with --log-prompts).
  void log_request(const HttpRequest& request, int status, int64_t prompt_tokens, int64_t completion_tokens,
                   std::chrono::steady_clock::time_point start, const std::string& prompt_for_log);
  // Sends a JSON response (and counts and logs it).
  void send_json(const HttpRequest& request, ResponseWriter& writer, int status,
                 const nlohmann::json& body, std::chrono::steady_clock::time_point start);
  // Sends an error response (and counts and logs it).
  void send_error(const HttpRequest& request, ResponseWriter& writer, const ApiError& error,
                  std::chrono::steady_clock::time_point start);

 private:
  void dispatch(HttpRequest& request, const std::shared_ptr<ResponseWriter>& writer,
                std::chrono::steady_clock::time_point start);
  void check_model(const std::string& model) const;
  friend EmbeddingRequest parse_embedding_request(const nlohmann::json& body, ApiServer& server);
  nlohmann::json models_json() const;
  // Parse, validate, tokenize and fit into the context (prepare.cpp).
  PreparedRequest prepare_completion(const nlohmann::json& body);
  PreparedRequest prepare_chat(const nlohmann::json& body, std::string_view raw_body);
  ChatOutputConfig chat_output_config(const ChatRequest& r, std::string_view raw_body, SamplingParams& params) const;
  void check_sampling_ids(const SamplingParams& params) const;
  void fit_context(PreparedRequest& prepared, bool max_tokens_set, const char* prompt_param) const;
  std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt, bool continue_final_message,
                          const nlohmann::json& template_kwargs) const;
  nlohmann::json tokenize(const nlohmann::json& body);
  nlohmann::json detokenize(const nlohmann::json& body);

  EngineClient& engine_;
  ServerConfig config_;
  Metrics metrics_;
  std::function<int()> connection_counter_;
  std::atomic<bool> draining_{false};
  std::atomic<int> num_in_flight_{0};     // generation HTTP requests in progress
  std::atomic<int64_t> num_admitted_seqs_{0};
  int64_t created_;                        // server start, for /v1/models
  std::vector<int32_t> anchor_;            // one ordinary token decoded before each logprob token
};

}  // namespace pagellm::server
