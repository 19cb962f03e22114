// /v1/embeddings (OpenAI's embeddings API, as vLLM serves it for models started with
// --runner pooling): one pooling request per input (a string, a list of strings, a token-id list or
// a list of those), answered once all are done with each input's embedding (float list or base64
// of little-endian float32), `dimensions` keeping the first N values (renormalized when the pooler
// normalizes, Matryoshka-style), and the prompt-token usage.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/http_server.h"
#include "pagellm/llm.h"

namespace pagellm::server {

class ApiServer;

// The validated request.
struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;  // token ids per input
  std::string model;
  bool base64 = false;
  int dimensions = 0;  // 0 = all
};

// Parses and tokenizes an /v1/embeddings body (throws ApiError 400 naming the field).
EmbeddingRequest parse_embedding_request(const nlohmann::json& body, ApiServer& server);

// Base64 (RFC 4648, padded) of raw bytes.
std::string base64_encode(const void* data, size_t size);

class EmbeddingCall : public std::enable_shared_from_this<EmbeddingCall> {
 public:
  EmbeddingCall(ApiServer& server, std::shared_ptr<ResponseWriter> writer, HttpRequest request,
                std::chrono::steady_clock::time_point start, EmbeddingRequest parsed);
  // Queues every input; the response goes out when the last finishes (or on the first error).
  void start();

 private:
  void on_output(size_t index, RequestOutput&& out);
  void respond();
  void fail(int status, const std::string& message);
  void abort_all();

  ApiServer& server_;
  std::shared_ptr<ResponseWriter> writer_;
  HttpRequest request_;
  std::chrono::steady_clock::time_point start_;
  EmbeddingRequest req_;
  std::string id_;
  std::vector<std::vector<float>> embeddings_;
  size_t num_done_ = 0;
  bool done_ = false;
  int num_admitted_ = 0;
};

}  // namespace pagellm::server
