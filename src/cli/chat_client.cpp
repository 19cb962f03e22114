// `pagellm chat` and `pagellm complete`: interactive clients of a running OpenAI-compatible server,
// as `vllm chat` / `vllm complete` are (issue 19). Each line read from stdin is one turn (chat keeps
// the conversation) or one prompt; --quick sends one message and exits. Plain HTTP (Beast,
// synchronous); every error is one line on stderr and a non-zero exit.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "common/error.h"

namespace pagellm::cli {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using nlohmann::json;

struct ClientFlags {
  std::string url = "http://localhost:8000/v1";
  std::string model_name;
  std::string api_key;
  std::string system_prompt;
  std::string quick;
  int max_tokens = 256;
  double timeout_s = 600;
};

struct Endpoint {
  std::string host, port, prefix;  // prefix: the URL's path, e.g. "/v1"
};

Endpoint parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (!url.starts_with(scheme))
    invalid_argument("--url " + url + ": expected http://HOST[:PORT][/PATH] (https: not supported)");
  std::string rest = url.substr(scheme.size());
  Endpoint e;
  const size_t slash = rest.find('/');
  e.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!e.prefix.empty() && e.prefix.back() == '/') e.prefix.pop_back();
  rest = rest.substr(0, slash);
  const size_t colon = rest.rfind(':');
  e.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  e.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (e.host.empty() || e.port.empty() || e.port.find_first_not_of("0123456789") != std::string::npos)
    invalid_argument("--url " + url + ": expected http://HOST[:PORT][/PATH]");
  return e;
}

// One request; returns the parsed JSON body of a 2xx answer, else throws with the server's message.
json call(const Endpoint& e, const ClientFlags& f, http::verb verb, const std::string& path,
          const json& body) {
  net::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(f.timeout_s)));
  beast::error_code ec;
  const auto endpoints = net::ip::tcp::resolver(io).resolve(e.host, e.port, ec);
  if (!ec) stream.connect(endpoints, ec);
  if (ec) throw_error(ErrorKind::kNotFound, "cannot reach " + e.host + ":" + e.port + ": " + ec.message());
  http::request<http::string_body> req{verb, e.prefix + path, 11};
  req.set(http::field::host, e.host);
  req.set(http::field::user_agent, "pagellm-client");
  if (!f.api_key.empty()) req.set(http::field::authorization, "Bearer " + f.api_key);
  if (verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = body.dump();
    req.prepare_payload();
  }
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  if (!ec) http::read(stream, buffer, parser, ec);
  if (ec) throw_error(ErrorKind::kNotFound, e.prefix + path + ": " + ec.message());
  const auto& res = parser.get();
  const json j = json::parse(res.body(), nullptr, false);
  if (res.result_int() / 100 != 2) {
    const std::string message = !j.is_discarded() && j.contains("error") && j["error"].is_object() &&
                                        j["error"].contains("message") && j["error"]["message"].is_string()
                                    ? j["error"]["message"].get<std::string>()
                                    : res.body().substr(0, 200);
    invalid_argument("the server answered " + std::to_string(res.result_int()) + ": " + message);
  }
  if (j.is_discarded()) invalid_argument(e.prefix + path + ": the server's answer is not JSON");
  return j;
}

// --model-name, else the first model the server lists.
std::string model_of(const Endpoint& e, const ClientFlags& f) {
  if (!f.model_name.empty()) return f.model_name;
  const json models = call(e, f, http::verb::get, "/models", {});
  if (!models.contains("data") || !models["data"].is_array() || models["data"].empty() ||
      !models["data"][0].contains("id") || !models["data"][0]["id"].is_string())
    invalid_argument("the server lists no model; pass --model-name");
  return models["data"][0]["id"].get<std::string>();
}

std::string first_choice(const json& j, bool chat) {
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    invalid_argument("the server's answer has no choices");
  const json& c = j["choices"][0];
  const json& text = chat ? c.value("message", json::object()).value("content", json("")) : c.value("text", json(""));
  return text.is_string() ? text.get<std::string>() : std::string();
}

void add_client_flags(CLI::App& app, ClientFlags& f, bool chat) {
  app.add_option("--url", f.url, "the server's OpenAI API base URL")->capture_default_str();
  app.add_option("--model-name", f.model_name, "model to ask (default: the first the server lists)");
  app.add_option("--api-key", f.api_key, "Bearer key (also $OPENAI_API_KEY)");
  if (chat) app.add_option("--system-prompt", f.system_prompt, "a system message opening the conversation");
  app.add_option("-q,--quick", f.quick, "send this one message, print the answer and exit");
  app.add_option("--max-tokens", f.max_tokens, "max_tokens of each answer")->check(CLI::Range(1, 1 << 20));
}

int run_client(int argc, char** argv, bool chat) {
  CLI::App app{chat ? "Chat with a running server, one turn per line (like `vllm chat`)"
                    : "Complete prompts with a running server, one per line (like `vllm complete`)"};
  ClientFlags f;
  add_client_flags(app, f, chat);
  PAGELLM_PARSE(app, argc, argv);
  if (f.api_key.empty())
    if (const char* env = std::getenv("OPENAI_API_KEY")) f.api_key = env;
  const Endpoint e = parse_url(f.url);
  const std::string model = model_of(e, f);
  json messages = json::array();
  if (chat && !f.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", f.system_prompt}});
  auto turn = [&](const std::string& input) {
    json body = {{"model", model}, {"max_tokens", f.max_tokens}};
    if (chat) {
      messages.push_back({{"role", "user"}, {"content", input}});
      body["messages"] = messages;
    } else {
      body["prompt"] = input;
    }
    const std::string answer =
        first_choice(call(e, f, http::verb::post, chat ? "/chat/completions" : "/completions", body), chat);
    if (chat) messages.push_back({{"role", "assistant"}, {"content", answer}});
    std::cout << answer << std::endl;
  };
  if (!f.quick.empty()) {
    turn(f.quick);
    return 0;
  }
  std::string line;
  while (true) {
    if (isatty(0)) std::cerr << "> " << std::flush;
    if (!std::getline(std::cin, line)) break;
    if (!line.empty()) turn(line);
  }
  return 0;
}

}  // namespace

PAGELLM_COMMAND("chat", "chat with a running server (like `vllm chat`)",
                [](int argc, char** argv) { return run_client(argc, argv, true); });
PAGELLM_COMMAND("complete", "complete prompts with a running server (like `vllm complete`)",
                [](int argc, char** argv) { return run_client(argc, argv, false); });

}  // namespace pagellm::cli
