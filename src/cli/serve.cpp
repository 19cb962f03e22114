// `pagellm serve`: the OpenAI-compatible HTTP server. Wiring only: flags → AsyncEngine (one per
// --data-parallel-size replica) → AsyncEngineClient (→ DataParallelClient routing over the
// replicas) → ApiServer (routes) → HttpServer; then waits for SIGINT/SIGTERM and drains.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/serve_setup.h"
#include "cli/vllm_compat.h"
#include "common/error.h"
#include "common/logging.h"
#include "io/hf_config.h"
#include "pagellm/llm.h"
#include "runner/model_loader.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server/server_stream.h"

namespace pagellm::cli {
namespace {

struct ServeFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  int max_queued_requests = -1;
  double shutdown_timeout_s = 30;
  bool log_prompts = false;
  bool disable_log_requests = false;
  size_t max_body_bytes = 16u << 20;
  int num_io_threads = 1;
  std::string allowed_origins = "[\"*\"]", allowed_methods = "[\"*\"]", allowed_headers = "[\"*\"]";
  bool allow_credentials = false;
};

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  app.add_option("--host", f.host, "address to bind");
  app.add_option("--port", f.port, "port to listen on (0 = any free port)")->check(CLI::Range(0, 65535));
  app.add_option("--api-key", f.api_key, "require 'Authorization: Bearer KEY' (also $PAGELLM_API_KEY)");
  app.add_option("--served-model-name", f.served_model_name, "model name in the API (default: the model as given, as vLLM; the folder name is accepted too)");
  app.add_option("--max-queued-requests", f.max_queued_requests,
                 "sequences allowed to wait beyond --max-num-seqs before answering 429 (-1 = unlimited)");
  app.add_option("--shutdown-timeout", f.shutdown_timeout_s, "seconds in-flight requests get after SIGTERM");
  app.add_flag("--log-prompts", f.log_prompts, "include prompts in the per-request log lines");
  app.add_flag("--disable-log-requests", f.disable_log_requests, "no per-request log lines");
  app.add_option("--max-request-body-bytes", f.max_body_bytes, "larger request bodies get 413");
  app.add_option("--num-io-threads", f.num_io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64));
  app.add_option("--allowed-origins", f.allowed_origins, "CORS origins, a JSON list (default [\"*\"])");
  app.add_option("--allowed-methods", f.allowed_methods, "CORS methods, a JSON list (default [\"*\"])");
  app.add_option("--allowed-headers", f.allowed_headers, "CORS request headers, a JSON list (default [\"*\"])");
  app.add_flag("--allow-credentials", f.allow_credentials, "CORS: allow credentials (cookies, auth)");
}

// The HTTP options, with TLS files and CORS lists checked (before the model loads).
server::HttpServerOptions http_options(const ServeFlags& f, const VllmCompatFlags& vllm) {
  if (!vllm.ssl_certfile.empty() || !vllm.ssl_keyfile.empty())
    (void)server::make_tls_context(vllm.ssl_certfile, vllm.ssl_keyfile);
  server::HttpServerOptions options;
  options.host = f.host;
  options.port = static_cast<uint16_t>(f.port);
  options.max_body_bytes = f.max_body_bytes;
  options.num_threads = f.num_io_threads;
  options.cors.allowed_origins = server::parse_cors_list(f.allowed_origins, "--allowed-origins");
  options.cors.allowed_methods = server::parse_cors_list(f.allowed_methods, "--allowed-methods");
  options.cors.allowed_headers = server::parse_cors_list(f.allowed_headers, "--allowed-headers");
  options.cors.allow_credentials = f.allow_credentials;
  options.ssl_certfile = vllm.ssl_certfile;
  options.ssl_keyfile = vllm.ssl_keyfile;
  return options;
}

// The routes' settings once the engines are up: the model's (apply_model_settings), then the
// server's own flags.
void finish_server_config(const ServeFlags& f, const EngineArgs& args,
                          const io::GenerationConfig& generation, const std::string& model_as_given,
                          const server::EngineClient& client, server::ServerConfig& config) {
  apply_model_settings(f.served_model_name, model_as_given, args, generation, client, config);
  config.api_key = f.api_key;
  config.max_queued_requests = f.max_queued_requests;
  config.max_num_seqs = args.max_num_seqs * args.data_parallel_size;  // every replica runs a batch
  config.log_prompts = f.log_prompts;
  config.log_requests = !f.disable_log_requests;
  config.block_size = args.block_size;
  config.enable_prefix_caching = args.enable_prefix_caching;
}

// Starts the server, calls started(), then blocks until SIGINT / SIGTERM (returns the signal) or
// until the engine dies (returns 0): a dead engine (a failed step, a lost GPU or worker process)
// ends the server with an error, /health already answering 503 and the in-flight requests ended
// with an error.
int serve_until_signal(server::HttpServer& http, const server::EngineClient& client,
                       const std::function<void()>& started) {
  std::mutex mutex;
  std::condition_variable cv;
  int signal_number = 0;
  http.on_signal([&](int signo) {
    std::lock_guard lock(mutex);
    signal_number = signo;
    cv.notify_all();
  });
  http.start();
  started();
  std::unique_lock lock(mutex);
  while (!cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return signal_number != 0; }))
    if (!client.healthy()) return 0;
  return signal_number;
}

// Graceful shutdown: stop accepting, let in-flight requests finish until the deadline, then abort
// the rest (their streams end with finish_reason "abort") and give the last bytes a moment to go.
void drain_and_stop(server::HttpServer& http, server::ApiServer& api, server::EngineClient& client,
                    double timeout_s) {
  http.stop_accepting();
  api.begin_drain();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
  while (api.num_in_flight() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
  client.shutdown(std::max(0.0, left));
  // Responses end (and draining connections close) only once their last bytes are written.
  const auto flush_deadline = Clock::now() + std::chrono::seconds(2);
  while ((api.num_in_flight() > 0 || http.num_connections() > 0) && Clock::now() < flush_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  http.stop();
}

int run(int argc, char** argv) {
  CLI::App app{
      "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions, /metrics, ...)"};
  EngineArgs args;
  ServeFlags f;
  add_engine_flags(app, args);
  VllmCompatFlags vllm;
  add_vllm_compat_flags(app, vllm);
  add_serve_flags(app, f);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints --help, or the flag error
  }
  if (f.api_key.empty()) {
    if (const char* env = std::getenv("PAGELLM_API_KEY")) f.api_key = env;
  }
  apply_vllm_compat_flags(vllm, args);
  if (vllm.enable_log_requests && f.disable_log_requests)
    invalid_argument("--enable-log-requests and --disable-log-requests contradict each other");
  args.api_server = true;  // the serving step budget (EngineArgs::max_num_batched_tokens)
  const std::string model_as_given = args.model;  // vLLM's default served model name
  args.resolve();
  const server::HttpServerOptions options = http_options(f, vllm);
  // A worker process of a multi-process group executes the leader's steps instead.
  if (const std::optional<int> code = runner::run_worker_process(args)) return *code;

  // Server settings are checked before any model loads.
  server::ServerConfig config;
  apply_vllm_server_flags(vllm, config);
  const io::GenerationConfig generation = resolve_generation_config(vllm, args);

  const EngineClients engines = start_engines(args, chat_config(args));
  server::EngineClient& client = *engines.client;
  finish_server_config(f, args, generation, model_as_given, client, config);
  server::ApiServer api(client, config);
  server::HttpServer http(options, api);
  api.set_connection_counter([&http] { return http.num_connections(); });
  const int signal_number = serve_until_signal(http, client, [&] {
    log::info("serving '" + api.model_name() + "' on " +
              (options.ssl_certfile.empty() ? "http://" : "https://") + f.host + ":" +
              std::to_string(http.port()) + (f.api_key.empty() ? "" : " (API key required)"));
  });
  if (signal_number == 0) {
    log::error("the engine has stopped: shutting the server down");
    http.stop();
    return 1;
  }
  log::info("signal " + std::to_string(signal_number) + ": draining for up to " +
            std::to_string(f.shutdown_timeout_s) + " s");
  drain_and_stop(http, api, client, f.shutdown_timeout_s);
  log::info("server stopped");
  return 0;
}

}  // namespace

PAGELLM_COMMAND("serve", "OpenAI-compatible HTTP server", run);

}  // namespace pagellm::cli
