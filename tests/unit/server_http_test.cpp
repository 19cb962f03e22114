// The HTTP layer end to end over real sockets, with a fake engine: routes, streaming, errors, limits,
// auth, disconnects and concurrency.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "server/http_server.h"
#include "server/routes.h"
#include "server_fake_engine.h"

namespace pagellm::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using nlohmann::json;

struct Reply {
  int status = 0;
  std::string body;
  std::string content_type;
  json json_body() const { return json::parse(body); }
};

// A blocking client, one connection per request.
Reply request(uint16_t port, const std::string& method, const std::string& target, const std::string& body = {},
              const std::string& auth = {}) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req(http::string_to_verb(method), target, 11);
  req.set(http::field::host, "localhost");
  if (!auth.empty()) req.set(http::field::authorization, auth);
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  http::read(stream, buffer, parser);
  Reply r;
  r.status = static_cast<int>(parser.get().result_int());
  r.body = parser.get().body();
  r.content_type = std::string(parser.get()[http::field::content_type]);
  return r;
}

// data: payloads of an SSE body, [DONE] included.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

class ServerHttpTest : public ::testing::Test {
 protected:
  void start(ServerConfig config = {}, HttpServerOptions options = {}) {
    config.log_requests = false;
    api_ = std::make_unique<ApiServer>(engine_, config);
    options.port = 0;
    http_ = std::make_unique<HttpServer>(options, *api_);
    api_->set_connection_counter([this] { return http_->num_connections(); });
    http_->start();
    port_ = http_->port();
  }
  void TearDown() override {
    if (http_) http_->stop();
    engine_.stop();
  }
  // Waits up to 5 s for `pred`.
  template <typename Pred>
  bool eventually(Pred pred) {
    for (int i = 0; i < 500; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pred();
  }
  void expect_error(const Reply& r, int status, const std::string& type) {
    EXPECT_EQ(r.status, status) << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["type"], type) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
  }
  // What the fake generates for a text prompt (default sampling parameters unless `greedy`).
  std::string expected_text(const std::string& prompt, int n_tokens, bool greedy = false) {
    auto ids = engine_.encode(prompt, true);
    SamplingParams p;
    if (greedy) p.temperature = 0;
    std::string s;
    for (int i = 0; i < n_tokens; ++i) s += testing::FakeEngine::letter(ids, p, i, 0);
    return s;
  }

  testing::FakeEngine engine_{64};
  std::unique_ptr<ApiServer> api_;
  std::unique_ptr<HttpServer> http_;
  uint16_t port_ = 0;
};

TEST_F(ServerHttpTest, InfoEndpoints) {
  start();
  EXPECT_EQ(request(port_, "GET", "/health").status, 200);
  auto v = request(port_, "GET", "/version");
  EXPECT_EQ(v.status, 200);
  EXPECT_TRUE(v.json_body()["version"].is_string());
  auto m = request(port_, "GET", "/v1/models").json_body();
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "fake-model");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 64);
  auto metrics = request(port_, "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.content_type.find("text/plain"), std::string::npos);
  EXPECT_NE(metrics.body.find("pagellm:num_requests_running"), std::string::npos);
  auto tok = request(port_, "POST", "/tokenize", R"({"prompt":"ab"})").json_body();
  EXPECT_EQ(tok["tokens"], json({1, 'a' + 3, 'b' + 3}));
  EXPECT_EQ(tok["count"], 3);
  EXPECT_EQ(tok["max_model_len"], 64);
  auto chat_tok = request(port_, "POST", "/tokenize", R"({"messages":[{"role":"user","content":"x"}]})").json_body();
  EXPECT_EQ(chat_tok["count"], std::string("user: x\nassistant:").size());
  auto detok = request(port_, "POST", "/detokenize", R"({"tokens":[100,101]})").json_body();
  EXPECT_EQ(detok["prompt"], "ab");
  expect_error(request(port_, "POST", "/detokenize", R"({"tokens":[100000]})"), 400, "invalid_request_error");
  engine_.set_healthy(false);
  EXPECT_EQ(request(port_, "GET", "/health").status, 503);
  expect_error(request(port_, "POST", "/v1/completions", R"({"prompt":"a"})"), 503, "server_error");
}

TEST_F(ServerHttpTest, CompletionShapesAndUsage) {
  start();
  auto r = request(port_, "POST", "/v1/completions", R"({"model":"fake-model","prompt":"hello","max_tokens":5,"temperature":0})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json_body();
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "fake-model");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], expected_text("hello", 5, true));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);  // BOS + 5 bytes
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 11);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  // Without max_tokens the completion may fill the context: 64 - 6.
  auto fill = request(port_, "POST", "/v1/completions", R"({"prompt":"hello"})").json_body();
  EXPECT_EQ(fill["usage"]["completion_tokens"], 58);

  auto multi = request(port_, "POST", "/v1/completions", R"({"prompt":["a","b"],"n":3,"max_tokens":2})").json_body();
  ASSERT_EQ(multi["choices"].size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(multi["choices"][i]["index"], i);
  EXPECT_EQ(multi["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(multi["usage"]["completion_tokens"], 12);

  auto ids = request(port_, "POST", "/v1/completions", R"({"prompt":[1,104,105],"max_tokens":3,"echo":true})").json_body();
  EXPECT_EQ(ids["choices"][0]["text"].get<std::string>().substr(0, 5), "<s>ef");

  auto lp = request(port_, "POST", "/v1/completions", R"({"prompt":"a","max_tokens":3,"logprobs":2})").json_body();
  EXPECT_EQ(lp["choices"][0]["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(lp["choices"][0]["logprobs"]["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(lp["choices"][0]["logprobs"]["top_logprobs"][0].size(), 3u);

  auto stop = request(port_, "POST", "/v1/completions", R"({"prompt":"hello","max_tokens":10,"stop":["LETTER"]})");
  std::string want = expected_text("hello", 10);
  auto stop2 = request(port_, "POST", "/v1/completions",
                       json{{"prompt", "hello"}, {"max_tokens", 10}, {"stop", std::string(1, want[3])}}.dump())
                   .json_body();
  EXPECT_EQ(stop2["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(stop2["choices"][0]["stop_reason"], std::string(1, want[3]));
  EXPECT_EQ(stop2["choices"][0]["text"], want.substr(0, 3));
}

TEST_F(ServerHttpTest, StreamingMatchesNonStreaming) {
  start();
  auto full = request(port_, "POST", "/v1/completions", R"({"prompt":"abc","max_tokens":8})").json_body();
  auto r = request(port_, "POST", "/v1/completions",
                   R"({"prompt":"abc","max_tokens":8,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/event-stream");
  auto events = sse_payloads(r.body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, full["choices"][0]["text"]);
  EXPECT_EQ(finish, "length");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 8);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 4);
}

TEST_F(ServerHttpTest, ChatNonStreamingAndStreaming) {
  start();
  auto r = request(port_, "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":4,"n":2,"logprobs":true,"top_logprobs":1})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = r.json_body();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][1]["message"]["content"].get<std::string>().size(), 4u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 4u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], std::string("user: hi\nassistant:").size());

  auto s = request(port_, "POST", "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true})");
  auto events = sse_payloads(s.body);
  ASSERT_GE(events.size(), 3u);
  json first = json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 1; i + 1 < events.size(); ++i) {
    json c = json::parse(events[i]);
    if (c["choices"][0]["delta"].contains("content")) text += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(text, j["choices"][0]["message"]["content"]);  // greedy: every sample is the same
}

TEST_F(ServerHttpTest, ClientErrorsAreNever500) {
  start();
  auto post = [&](const std::string& path, const std::string& body) { return request(port_, "POST", path, body); };
  expect_error(post("/v1/completions", "{bad json"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", R"({"prompt":"x","max_tokens":-1})"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", R"({"prompt":"x","model":"other"})"), 404, "not_found_error");
  expect_error(post("/v1/completions", R"({"prompt":"x","max_tokens":100})"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", json{{"prompt", std::string(100, 'x')}}.dump()), 400, "invalid_request_error");
  expect_error(post("/v1/completions", R"({"prompt":[1,2,100000]})"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", R"({"prompt":"x","stop_token_ids":[9999]})"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", R"({"prompt":"","add_special_tokens":false})"), 400, "invalid_request_error");
  expect_error(post("/v1/chat/completions", R"({"messages":[]})"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", "{\"prompt\":\"\xc3\x28\"}"), 400, "invalid_request_error");
  expect_error(post("/v1/completions", std::string(5000, '[')), 400, "invalid_request_error");
  expect_error(request(port_, "GET", "/v1/completions"), 405, "invalid_request_error");
  expect_error(request(port_, "GET", "/nope"), 404, "not_found_error");
  engine_.reject_next();
  expect_error(post("/v1/completions", R"({"prompt":"x","max_tokens":2})"), 400, "invalid_request_error");
  auto ctx = post("/v1/completions", R"({"prompt":"x","max_tokens":100})").json_body();
  EXPECT_EQ(ctx["error"]["code"], "context_length_exceeded");
  // Still serving correctly.
  auto ok = post("/v1/completions", R"({"prompt":"hello","max_tokens":5})").json_body();
  EXPECT_EQ(ok["choices"][0]["text"], expected_text("hello", 5));
}

TEST_F(ServerHttpTest, BodyLimitAnswers413) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  start({}, options);
  expect_error(request(port_, "POST", "/v1/completions", json{{"prompt", std::string(5000, 'x')}}.dump()), 413,
               "request_too_large");
  // A body sent far past the limit is drained, so the client reads the 413 rather than a reset.
  expect_error(request(port_, "POST", "/v1/completions", std::string(8u << 20, ' ')), 413, "request_too_large");
  EXPECT_EQ(request(port_, "GET", "/health").status, 200);
}

TEST_F(ServerHttpTest, MalformedHttpGets400) {
  start();
  net::io_context ioc;
  tcp::socket sock(ioc);
  sock.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
  net::write(sock, net::buffer(std::string("GARBAGE\r\n\r\n")));
  std::string reply;
  beast::error_code ec;
  char buf[4096];
  for (;;) {
    size_t n = sock.read_some(net::buffer(buf), ec);
    if (ec) break;
    reply.append(buf, n);
  }
  EXPECT_EQ(reply.rfind("HTTP/1.1 400", 0), 0u) << reply;
}

TEST_F(ServerHttpTest, Auth) {
  ServerConfig config;
  config.api_key = "sk-test";
  start(config);
  expect_error(request(port_, "GET", "/v1/models"), 401, "authentication_error");
  expect_error(request(port_, "GET", "/v1/models", {}, "Bearer wrong"), 401, "authentication_error");
  expect_error(request(port_, "POST", "/v1/completions", R"({"prompt":"x"})", "Bearer sk-tes"), 401,
               "authentication_error");
  EXPECT_EQ(request(port_, "GET", "/v1/models", {}, "Bearer sk-test").status, 200);
  EXPECT_EQ(request(port_, "POST", "/tokenize", R"({"prompt":"x"})").status, 401);
  EXPECT_EQ(request(port_, "GET", "/health").status, 200);
  EXPECT_EQ(request(port_, "GET", "/metrics").status, 200);
}

TEST_F(ServerHttpTest, QueueFullAndDraining) {
  ServerConfig config;
  config.max_num_seqs = 1;
  config.max_queued_requests = 0;
  start(config);
  // Hold one long request open on a raw socket.
  net::io_context ioc;
  tcp::socket sock(ioc);
  sock.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
  std::string body = R"({"prompt":"a","max_tokens":60,"stream":true})";
  net::write(sock, net::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_TRUE(eventually([&] { return api_->num_in_flight() == 1; }));
  auto full = request(port_, "POST", "/v1/completions", R"({"prompt":"a","max_tokens":2})");
  expect_error(full, 429, "rate_limit_exceeded");
  api_->begin_drain();
  expect_error(request(port_, "POST", "/v1/completions", R"({"prompt":"a","max_tokens":2})"), 503, "server_error");
}

TEST_F(ServerHttpTest, DisconnectAbortsTheEngineRequest) {
  start();
  for (bool stream : {true, false}) {
    net::io_context ioc;
    tcp::socket sock(ioc);
    sock.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
    std::string body = json{{"prompt", "a"}, {"max_tokens", 60}, {"stream", stream}}.dump();
    net::write(sock, net::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body));
    ASSERT_TRUE(eventually([&] { return engine_.num_active() == 1; }));
    if (stream) {
      char buf[256];
      sock.read_some(net::buffer(buf));  // the stream has started
    }
    const int aborts = engine_.num_abort_calls();
    sock.close();
    EXPECT_TRUE(eventually([&] { return engine_.num_active() == 0; }));
    EXPECT_GT(engine_.num_abort_calls(), aborts);
    EXPECT_TRUE(eventually([&] { return api_->num_in_flight() == 0; }));
  }
  auto metrics = request(port_, "GET", "/metrics").body;
  EXPECT_NE(metrics.find("pagellm:num_requests_running{model_name=\"fake-model\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("pagellm:kv_cache_usage_perc{model_name=\"fake-model\"} 0\n"), std::string::npos);
}

TEST_F(ServerHttpTest, KeepAliveServesSequentialRequests) {
  start();
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_));
  beast::flat_buffer buffer;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req(http::verb::post, "/v1/completions", 11);
    req.set(http::field::host, "x");
    req.body() = json{{"prompt", "k"}, {"max_tokens", 2}, {"stream", i == 1}}.dump();
    req.prepare_payload();
    http::write(stream, req);
    http::response<http::string_body> res;
    http::read(stream, buffer, res);
    EXPECT_EQ(res.result_int(), 200u);
    EXPECT_TRUE(res.keep_alive());
  }
}

TEST_F(ServerHttpTest, ManyConcurrentStreams) {
  start();
  constexpr int kClients = 64;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  const std::string want = expected_text("same", 6);
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      auto r = request(port_, "POST", "/v1/completions", R"({"prompt":"same","max_tokens":6,"stream":true})");
      std::string text;
      auto events = sse_payloads(r.body);
      for (size_t k = 0; k + 1 < events.size(); ++k) text += json::parse(events[k])["choices"][0]["text"].get<std::string>();
      if (r.status == 200 && events.back() == "[DONE]" && text == want) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kClients);
}

}  // namespace
}  // namespace pagellm::server
