// The OpenAI batch file format that `pagellm run-batch` reads and writes, as `vllm run-batch`
// does: one request per JSONL line, {"custom_id": ID, "method": "POST", "url": ENDPOINT, "body":
// {...}}, and one output line per request in the same order, {"id": "vllm-...", "custom_id": ID,
// "response": {"status_code": S, "request_id": "vllm-batch-...", "body": {...} | null}, "error":
// null | {...} | "message"}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::server {

struct BatchRequestLine {
  int line = 0;  // 1-based line number in the file
  std::string custom_id;
  std::string method;   // "POST"
  std::string url;      // "/v1/chat/completions", ...
  nlohmann::json body;  // an object
};

// The endpoints a batch may name.
bool batch_endpoint_supported(std::string_view url);

// Parses the file's text (blank lines skipped). Throws pagellm::Error (kInvalidArgument) with one
// line "SOURCE:LINE: ..." for a line that is not a JSON object with a string custom_id, method and
// url and an object body, for a duplicate custom_id, and for a file with no request.
std::vector<BatchRequestLine> parse_batch_file(std::string_view text, const std::string& source);

// What the request should get without running it: "" when it may run, else the error message of
// its output line (a method other than POST, an endpoint the batch runner does not serve, or a
// streaming request).
std::string batch_request_refusal(const BatchRequestLine& request);

// The output line of a request that ran: status 200 puts body under response.body; any other
// status puts the server's error body under error.
nlohmann::json batch_output(const BatchRequestLine& request, int status, nlohmann::json body);
// The output line of a request refused before it ran (status 400, error = the message).
nlohmann::json batch_error_output(const BatchRequestLine& request, const std::string& message);

}  // namespace pagellm::server
