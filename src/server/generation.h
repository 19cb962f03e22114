// One /v1/completions or /v1/chat/completions HTTP request in flight: submits one engine request per
// prompt, gathers the engine's deltas on the connection's strand, and answers with one JSON body or
// an SSE stream. A client that goes away has its engine requests aborted at once.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_output.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace pagellm::server {

class ApiServer;

enum class ApiKind { kCompletion, kChat };

// A validated, tokenized request ready for the engine.
struct PreparedRequest {
  ApiKind kind = ApiKind::kCompletion;
  struct Prompt {
    std::vector<int32_t> ids;
    std::string text;  // for echo and --log-prompts
  };
  std::vector<Prompt> prompts;
  SamplingParams params;
  RequestOptions options;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool echo = false;           // completions: prepend the prompt
  bool logprobs = false;       // per-token logprobs requested
  ChatOutputConfig chat_output;  // chat: reasoning / tool-call parsing of the generated text
};

class GenerationCall : public std::enable_shared_from_this<GenerationCall> {
 public:
  GenerationCall(ApiServer& server, std::shared_ptr<ResponseWriter> writer, HttpRequest request,
                 std::chrono::steady_clock::time_point start, PreparedRequest prepared);
  ~GenerationCall();
  // Submits to the engine; answers an error itself when the engine refuses the request.
  void start();

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<TokenLogprobs> logprobs;
    FinishReason finish = FinishReason::kNone;
    std::optional<std::string> stop_string;
    std::optional<int32_t> stop_token;
    size_t text_offset = 0;      // completions logprobs text_offset
    bool prefix_sent = false;    // streaming: role (chat) or echo (completions) chunk sent
    std::shared_ptr<ChatOutputStream> parser;  // streaming chat with chat_output.active()
  };
  struct Sub {
    std::string engine_id;
    bool finished = false;
    int num_cached_tokens = 0;
    std::vector<std::optional<TokenLogprobs>> prompt_logprobs;
    std::chrono::steady_clock::time_point last_output;
  };

  void on_output(size_t sub_index, RequestOutput&& out);
  void on_disconnect();
  void stream_delta(size_t choice_index, const CompletionOutput& delta);
  void stream_prefix(size_t choice_index);
  void finish();
  void fail(const ApiError& error);
  void abort_unfinished();
  void release(int status);
  nlohmann::json chunk_base() const;
  nlohmann::json full_response() const;
  nlohmann::json choice_json(size_t index) const;
  nlohmann::json chat_message_json(const Choice& choice) const;
  nlohmann::json chat_delta_json(Choice& choice, const CompletionOutput& delta, bool& tool_calls);
  int64_t num_prompt_tokens() const;
  int64_t num_completion_tokens() const;
  int64_t num_cached_tokens() const;
  std::string token_text(int32_t id) const;

  ApiServer& server_;
  std::shared_ptr<ResponseWriter> writer_;
  HttpRequest request_;
  std::chrono::steady_clock::time_point start_;
  PreparedRequest prepared_;
  std::string id_;      // "cmpl-..." / "chatcmpl-..."
  int64_t created_;
  int num_seqs_ = 0;    // admitted sequences, released at the end
  std::vector<Sub> subs_;
  std::vector<Choice> choices_;  // [num_prompts * n], index = prompt * n + sample
  bool streaming_started_ = false;
  bool first_token_seen_ = false;
  bool done_ = false;
};

// A random request id with the given prefix ("cmpl-", "chatcmpl-").
std::string make_request_id(const std::string& prefix);

}  // namespace pagellm::server
