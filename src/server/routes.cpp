#include "server/routes.h"

#include <algorithm>

#include "common/logging.h"
#include "server/auth.h"
#include "server/generation.h"

namespace pagellm::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// Paths under --api-key protection; /health, /metrics and /version stay open for probes.
bool needs_auth(const std::string& path) {
  return starts_with(path, "/v1/") || path == "/tokenize" || path == "/detokenize";
}

std::string truncate_for_log(const std::string& s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  return s.substr(0, max_bytes) + "...";
}

}  // namespace

ApiServer::ApiServer(EngineClient& engine, ServerConfig config)
    : engine_(engine),
      config_(std::move(config)),
      metrics_(config_.served_model_name.empty() ? engine.model_info().name : config_.served_model_name),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
  metrics_.set_cache_config(config_.block_size, config_.cache_dtype, config_.enable_prefix_caching);
  if (config_.served_model_name.empty()) config_.served_model_name = engine.model_info().name;
  auto ids = engine_.encode("a", /*add_special_tokens=*/false);
  if (!ids.empty()) anchor_ = {ids.back()};
}

std::string ApiServer::token_text(int32_t id) const {
  if (anchor_.empty()) {
    int32_t one[1] = {id};
    return engine_.decode(one, /*skip_special_tokens=*/false);
  }
  // Decode after an anchor token and drop the anchor's text: what remains is the token exactly as it
  // appears mid-sequence.
  int32_t pair[2] = {anchor_[0], id};
  std::string both = engine_.decode(pair, false);
  std::string alone = engine_.decode(std::span<const int32_t>(anchor_), false);
  if (both.compare(0, alone.size(), alone) == 0) return both.substr(alone.size());
  int32_t one[1] = {id};
  return engine_.decode(one, false);
}

std::string ApiServer::reject_body(int status, const std::string& message) {
  metrics_.count_http(status);
  log::info("http " + std::to_string(status) + ": " + message);
  const char* type = status == 413 ? "request_too_large" : status >= 500 ? "internal_error" : "invalid_request_error";
  return dump_json(error_body(ApiError(status, message, type)));
}

bool ApiServer::try_admit(int num_seqs) {
  if (config_.max_queued_requests >= 0) {
    const int64_t cap = static_cast<int64_t>(config_.max_num_seqs) + config_.max_queued_requests;
    int64_t current = num_admitted_seqs_.load();
    do {
      // A request larger than the whole cap is still admitted when nothing else runs, so that a
      // big n is limited by validation, not starved here.
      if (current > 0 && current + num_seqs > cap) return false;
    } while (!num_admitted_seqs_.compare_exchange_weak(current, current + num_seqs));
  } else {
    num_admitted_seqs_ += num_seqs;
  }
  ++num_in_flight_;
  return true;
}

void ApiServer::release(int num_seqs) {
  if (num_seqs <= 0) return;
  num_admitted_seqs_ -= num_seqs;
  --num_in_flight_;
}

void ApiServer::log_request(const HttpRequest& request, int status, int64_t prompt_tokens,
                            int64_t completion_tokens, Clock::time_point start, const std::string& prompt_for_log) {
  if (!config_.log_requests) return;
  char latency[32];
  std::snprintf(latency, sizeof latency, "%.3fs", std::chrono::duration<double>(Clock::now() - start).count());
  std::string line = request.method + " " + request.path + " " + std::to_string(status) +
                     " prompt_tokens=" + std::to_string(prompt_tokens) +
                     " completion_tokens=" + std::to_string(completion_tokens) + " " + latency + " " + request.remote;
  if (config_.log_prompts && !prompt_for_log.empty()) {
    line += " prompt=" + dump_json(json(truncate_for_log(prompt_for_log, config_.max_log_len)));
  }
  log::info(line);
}

void ApiServer::send_error(const HttpRequest& request, ResponseWriter& writer, const ApiError& error,
                           Clock::time_point start) {
  std::string extra;
  if (error.status == 401) extra = "WWW-Authenticate: Bearer\r\n";
  if (error.status == 429 || error.status == 503) extra += "Retry-After: 1\r\n";
  writer.respond(error.status, "application/json", dump_json(error_body(error)), extra);
  metrics_.count_http(error.status);
  log_request(request, error.status, 0, 0, start, {});
}

void ApiServer::send_json(const HttpRequest& request, ResponseWriter& writer, int status, const json& body,
                          Clock::time_point start) {
  writer.respond(status, "application/json", dump_json(body));
  metrics_.count_http(status);
  log_request(request, status, 0, 0, start, {});
}

void ApiServer::check_model(const std::string& model) const {
  if (model.empty() || model == config_.served_model_name) return;
  for (const std::string& alias : config_.model_aliases)
    if (model == alias) return;
  throw ApiError(404, "the model '" + model + "' does not exist; this server serves '" + config_.served_model_name + "'",
                 "not_found_error", "model", "model_not_found");
}

json ApiServer::models_json() const {
  const auto& info = engine_.model_info();
  json model = {{"id", config_.served_model_name},
                {"object", "model"},
                {"created", created_},
                {"owned_by", "pagellm"},
                {"root", info.name},
                {"parent", nullptr},
                {"max_model_len", info.max_model_len}};
  return json{{"object", "list"}, {"data", json::array({model})}};
}

void ApiServer::handle(HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
  const auto start = Clock::now();
  try {
    dispatch(request, writer, start);
  } catch (const ApiError& e) {
    send_error(request, *writer, e, start);
  } catch (const Error& e) {
    send_error(request, *writer, api_error_from(e), start);
  } catch (const std::bad_alloc&) {
    send_error(request, *writer, ApiError(503, "out of memory while handling the request", "server_overloaded"), start);
  }
}

void ApiServer::dispatch(HttpRequest& request, const std::shared_ptr<ResponseWriter>& writer, Clock::time_point start) {
  // Behind a proxy that forwards /ROOT/v1/... unchanged, --root-path ROOT maps it to /v1/...
  const std::string& root = config_.root_path;
  if (!root.empty() && request.path.size() > root.size() && request.path.starts_with(root) &&
      request.path[root.size()] == '/')
    request.path.erase(0, root.size());
  const std::string& path = request.path;
  const bool is_get = request.method == "GET" || request.method == "HEAD";
  const bool is_post = request.method == "POST";
  if (needs_auth(path) && !authorized(request.authorization, config_.api_key)) {
    throw ApiError(401, "missing or invalid API key: send 'Authorization: Bearer <key>'", "authentication_error", "",
                   "invalid_api_key");
  }
  auto method_not_allowed = [&](const char* allowed) {
    throw ApiError(405, "method " + request.method + " is not allowed on " + path + " (use " + allowed + ")",
                   "invalid_request_error");
  };
  if (path == "/health" || path == "/ping") {
    if (!is_get) method_not_allowed("GET");
    if (!engine_.healthy()) throw ApiError(503, "the engine has stopped", "server_error", "", "engine_dead");
    writer->respond(200, "text/plain", "");
    metrics_.count_http(200);
    return;
  }
  if (path == "/version") {
    if (!is_get) method_not_allowed("GET");
    return send_json(request, *writer, 200, json{{"version", PAGELLM_VERSION}}, start);
  }
  if (path == "/v1/models") {
    if (!is_get) method_not_allowed("GET");
    return send_json(request, *writer, 200, models_json(), start);
  }
  if (path == "/metrics") {
    if (!is_get) method_not_allowed("GET");
    metrics_.set_engine_stats(engine_.take_engine_stats());
    writer->respond(200, "text/plain; version=0.0.4; charset=utf-8",
                    metrics_.render(connection_counter_ ? connection_counter_() : 0, num_in_flight_.load()));
    metrics_.count_http(200);
    return;
  }
  const bool generate = path == "/v1/completions" || path == "/v1/chat/completions";
  const bool embed = path == "/v1/embeddings";
  if (!generate && !embed && path != "/tokenize" && path != "/detokenize") {
    throw ApiError(404, "no route for " + request.method + " " + path, "not_found_error");
  }
  if (!is_post) method_not_allowed("POST");
  const json body = parse_json_object(request.body, config_.limits);
  if (path == "/tokenize") return send_json(request, *writer, 200, tokenize(body), start);
  if (path == "/detokenize") return send_json(request, *writer, 200, detokenize(body), start);
  if (draining_.load()) throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
  if (!engine_.healthy()) throw ApiError(503, "the engine has stopped", "server_error", "", "engine_dead");
  if (embed) {
    EmbeddingRequest parsed = parse_embedding_request(body, *this);
    request.body.clear();
    auto call = std::make_shared<EmbeddingCall>(*this, writer, std::move(request), start, std::move(parsed));
    return call->start();
  }
  PreparedRequest prepared =
      path == "/v1/completions" ? prepare_completion(body) : prepare_chat(body, request.body);
  restore_schema_order(prepared.params, request.body);
  request.body.clear();
  request.body.shrink_to_fit();
  auto call = std::make_shared<GenerationCall>(*this, writer, std::move(request), start, std::move(prepared));
  call->start();
}

}  // namespace pagellm::server
