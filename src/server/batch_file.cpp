#include "server/batch_file.h"

#include <set>

#include "common/error.h"
#include "server/generation.h"

namespace pagellm::server {
namespace {

using nlohmann::json;

constexpr std::string_view kEndpoints[] = {"/v1/chat/completions", "/v1/completions",
                                           "/v1/embeddings"};

[[noreturn]] void line_error(const std::string& source, int line, const std::string& what) {
  invalid_argument(source + ":" + std::to_string(line) + ": " + what);
}

std::string string_field(const json& j, const char* key, const std::string& source, int line) {
  const auto it = j.find(key);
  if (it == j.end()) line_error(source, line, std::string("no \"") + key + "\" field");
  if (!it->is_string()) line_error(source, line, std::string("\"") + key + "\" must be a string");
  return it->get<std::string>();
}

BatchRequestLine parse_line(std::string_view text, const std::string& source, int line) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) line_error(source, line, "not valid JSON");
  if (!j.is_object()) line_error(source, line, "a request must be a JSON object");
  BatchRequestLine r;
  r.line = line;
  r.custom_id = string_field(j, "custom_id", source, line);
  r.method = string_field(j, "method", source, line);
  r.url = string_field(j, "url", source, line);
  const auto body = j.find("body");
  if (body == j.end()) line_error(source, line, "no \"body\" field");
  if (!body->is_object()) line_error(source, line, "\"body\" must be a JSON object");
  r.body = *body;
  return r;
}

json output_line(const BatchRequestLine& request, int status, json body, json error) {
  return {{"id", make_request_id("vllm-")},
          {"custom_id", request.custom_id},
          {"response",
           {{"status_code", status},
            {"request_id", make_request_id("vllm-batch-")},
            {"body", std::move(body)}}},
          {"error", std::move(error)}};
}

}  // namespace

bool batch_endpoint_supported(std::string_view url) {
  for (std::string_view e : kEndpoints)
    if (url == e) return true;
  return false;
}

std::vector<BatchRequestLine> parse_batch_file(std::string_view text, const std::string& source) {
  std::vector<BatchRequestLine> out;
  std::set<std::string, std::less<>> ids;
  int line = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view row = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    ++line;
    while (!row.empty() && (row.back() == '\r' || row.back() == ' ' || row.back() == '\t'))
      row.remove_suffix(1);
    if (row.find_first_not_of(" \t") == std::string_view::npos) continue;
    BatchRequestLine r = parse_line(row, source, line);
    if (!ids.insert(r.custom_id).second)
      line_error(source, line, "custom_id '" + r.custom_id + "' is used by an earlier line");
    out.push_back(std::move(r));
  }
  if (out.empty()) invalid_argument(source + ": no requests (one JSON object per line)");
  return out;
}

std::string batch_request_refusal(const BatchRequestLine& request) {
  if (request.method != "POST")
    return "Only POST requests are supported in the batch file, not " + request.method;
  if (!batch_endpoint_supported(request.url))
    return "Only /v1/chat/completions, /v1/completions and /v1/embeddings are supported in the "
           "batch endpoint, not " +
           request.url;
  const auto stream = request.body.find("stream");
  if (stream != request.body.end() && stream->is_boolean() && stream->get<bool>())
    return "Request must not be sent in stream mode";
  return "";
}

nlohmann::json batch_output(const BatchRequestLine& request, int status, nlohmann::json body) {
  if (status == 200) return output_line(request, status, std::move(body), nullptr);
  return output_line(request, status, nullptr, std::move(body));
}

nlohmann::json batch_error_output(const BatchRequestLine& request, const std::string& message) {
  return output_line(request, 400, nullptr, message);
}

}  // namespace pagellm::server
