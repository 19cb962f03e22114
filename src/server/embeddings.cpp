#include "server/embeddings.h"

#include <cmath>

#include "server/generation.h"
#include "server/routes.h"

namespace pagellm::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxInputs = 2048;

std::vector<int32_t> token_ids_of(const json& list, ApiServer& server) {
  std::vector<int32_t> ids;
  const int32_t vocab = server.engine().vocab_size();
  for (const json& t : list) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw_bad_request("'input' token ids must be integers in [0, " + std::to_string(vocab) + ")",
                        "input");
    ids.push_back(t.get<int32_t>());
  }
  return ids;
}

}  // namespace

std::string base64_encode(const void* data, size_t size) {
  static const char* const kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  for (size_t i = 0; i < size; i += 3) {
    const uint32_t b = uint32_t(p[i]) << 16 | (i + 1 < size ? uint32_t(p[i + 1]) << 8 : 0) |
                       (i + 2 < size ? uint32_t(p[i + 2]) : 0);
    out += kAlphabet[(b >> 18) & 63];
    out += kAlphabet[(b >> 12) & 63];
    out += i + 1 < size ? kAlphabet[(b >> 6) & 63] : '=';
    out += i + 2 < size ? kAlphabet[b & 63] : '=';
  }
  return out;
}

EmbeddingRequest parse_embedding_request(const json& body, ApiServer& server) {
  EmbeddingRequest r;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw_bad_request("'model' must be a string", "model");
    r.model = body["model"].get<std::string>();
    server.check_model(r.model);
  }
  if (!body.contains("input")) throw_bad_request("'input' is required", "input");
  const json& input = body["input"];
  if (input.is_string()) {
    r.inputs.push_back(server.engine().encode(input.get<std::string>(), true));
  } else if (input.is_array() && !input.empty() && input[0].is_number_integer()) {
    r.inputs.push_back(token_ids_of(input, server));
  } else if (input.is_array() && !input.empty()) {
    if (input.size() > kMaxInputs)
      throw_bad_request("'input' holds more than " + std::to_string(kMaxInputs) + " items", "input");
    for (const json& item : input) {
      if (item.is_string())
        r.inputs.push_back(server.engine().encode(item.get<std::string>(), true));
      else if (item.is_array())
        r.inputs.push_back(token_ids_of(item, server));
      else
        throw_bad_request("'input' items must be strings or token-id lists", "input");
    }
  } else {
    throw_bad_request("'input' must be a string, a list of strings or token ids", "input");
  }
  const int64_t max_len = server.engine().model_info().max_model_len;
  for (const auto& ids : r.inputs) {
    if (ids.empty()) throw_bad_request("an 'input' is empty after tokenization", "input");
    if (max_len > 0 && int64_t(ids.size()) > max_len)
      throw ApiError(400, "this model's maximum context length is " + std::to_string(max_len) +
                              " tokens, but an input has " + std::to_string(ids.size()),
                     "invalid_request_error", "input", "context_length_exceeded");
  }
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const json& f = body["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64"))
      throw_bad_request("'encoding_format' must be 'float' or 'base64'", "encoding_format");
    r.base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const json& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20))
      throw_bad_request("'dimensions' must be a positive integer", "dimensions");
    r.dimensions = d.get<int>();
  }
  return r;
}

EmbeddingCall::EmbeddingCall(ApiServer& server, std::shared_ptr<ResponseWriter> writer,
                             HttpRequest request, Clock::time_point start, EmbeddingRequest parsed)
    : server_(server),
      writer_(std::move(writer)),
      request_(std::move(request)),
      start_(start),
      req_(std::move(parsed)),
      id_(make_request_id("embd-")) {
  embeddings_.resize(req_.inputs.size());
}

void EmbeddingCall::start() {
  const int n = static_cast<int>(req_.inputs.size());
  if (!server_.try_admit(n)) {
    done_ = true;
    server_.send_error(request_, *writer_,
                       ApiError(429, "the server's request queue is full; retry later",
                                "rate_limit_exceeded", "", "queue_full"),
                       start_);
    return;
  }
  num_admitted_ = n;
  auto self = shared_from_this();
  writer_->on_disconnect([self] {
    if (self->done_) return;
    self->done_ = true;
    self->abort_all();
  });
  RequestOptions options;
  options.pooling = server_.config().pooling;
  options.normalize = server_.config().normalize;
  for (size_t i = 0; i < req_.inputs.size(); ++i) {
    OutputCallback callback = [self, i](RequestOutput&& out) {
      if (!out.finished) return;
      auto shared = std::make_shared<RequestOutput>(std::move(out));
      self->writer_->post([self, i, shared] { self->on_output(i, std::move(*shared)); });
    };
    try {
      server_.engine().add_request(id_ + "-" + std::to_string(i),
                                   PromptInput::from_ids(req_.inputs[i]), SamplingParams{},
                                   std::move(callback), options);
    } catch (const Error& e) {
      for (size_t j = 0; j < i; ++j) server_.engine().abort_request(id_ + "-" + std::to_string(j));
      const ApiError api = api_error_from(e);
      done_ = true;
      server_.release(num_admitted_);
      num_admitted_ = 0;
      server_.send_error(request_, *writer_, api, start_);
      return;
    }
  }
}

void EmbeddingCall::abort_all() {
  for (size_t i = 0; i < req_.inputs.size(); ++i)
    server_.engine().abort_request(id_ + "-" + std::to_string(i));
}

void EmbeddingCall::on_output(size_t index, RequestOutput&& out) {
  ++num_done_;
  if (num_done_ == req_.inputs.size() && num_admitted_ > 0) {
    server_.release(num_admitted_);
    num_admitted_ = 0;
  }
  if (done_) return;
  if (out.embedding.empty()) {
    done_ = true;
    abort_all();
    server_.send_error(request_, *writer_,
                       ApiError(500, out.error.empty() ? "the engine returned no embedding" : out.error,
                                "server_error"),
                       start_);
    return;
  }
  embeddings_[index] = std::move(out.embedding);
  if (num_done_ == req_.inputs.size()) respond();
}

void EmbeddingCall::respond() {
  done_ = true;
  json data = json::array();
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < embeddings_.size(); ++i) {
    std::vector<float>& e = embeddings_[i];
    if (req_.dimensions > 0 && size_t(req_.dimensions) < e.size()) {
      e.resize(size_t(req_.dimensions));
      if (server_.config().normalize) {
        double norm = 0;
        for (float x : e) norm += double(x) * x;
        if (norm > 0)
          for (float& x : e) x = float(x / std::sqrt(norm));
      }
    }
    json item = {{"object", "embedding"}, {"index", i}};
    if (req_.base64)
      item["embedding"] = base64_encode(e.data(), e.size() * sizeof(float));
    else
      item["embedding"] = e;
    data.push_back(std::move(item));
    prompt_tokens += int64_t(req_.inputs[i].size());
  }
  const json body = {
      {"id", id_},
      {"object", "list"},
      {"created", std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count()},
      {"model", server_.model_name()},
      {"data", std::move(data)},
      {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  writer_->respond(200, "application/json", dump_json(body));
  server_.metrics().count_http(200);
  server_.log_request(request_, 200, prompt_tokens, 0, start_, {});
}

}  // namespace pagellm::server
