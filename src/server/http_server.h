// Asynchronous HTTP/1.1 server on Boost.Asio/Beast. One strand per connection; handlers run on that
// strand and answer through a ResponseWriter, either with one complete response or with a chunked
// stream (SSE). The server knows nothing about OpenAI: ApiServer (routes.h) is its HttpHandler.
#pragma once

#include "server/cors.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace pagellm::server {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string path;           // target without the query string
  std::string authorization;  // Authorization header value, may be empty
  std::string content_type;
  std::string body;
  std::string remote;         // peer address, for logs
};

// One in-progress response. All methods must be called on the connection's strand (the handler's
// thread, or inside post()).
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response with Content-Length. `extra_headers` are "Name: value\r\n" lines.
  virtual void respond(int status, const std::string& content_type, std::string body,
                       const std::string& extra_headers = {}) = 0;
  // A chunked streaming response: headers now, then write_chunk() pieces, then end_stream().
  virtual void start_stream(int status, const std::string& content_type) = 0;
  virtual void write_chunk(std::string data) = 0;
  virtual void end_stream() = 0;
  // `fn` runs once, on the strand, if the client goes away before the response is complete.
  virtual void on_disconnect(std::function<void()> fn) = 0;
  virtual bool disconnected() const = 0;
  // Runs `fn` on this connection's strand; callable from any thread (engine callbacks).
  virtual void post(std::function<void()> fn) = 0;
};

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  // Called on the connection's strand for each complete request.
  virtual void handle(HttpRequest request, std::shared_ptr<ResponseWriter> writer) = 0;
  // Called for requests the HTTP layer rejects itself (413, 400 for malformed HTTP), so that the
  // application can shape the error body and log it. Returns the body (JSON).
  virtual std::string reject_body(int status, const std::string& message) = 0;
};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                         // 0 = any free port (see HttpServer::port())
  size_t max_body_bytes = 16u << 20;            // larger bodies get 413
  size_t max_header_bytes = 64u << 10;
  double header_timeout_s = 30;                 // time to receive one request
  double idle_timeout_s = 120;                  // keep-alive idle time
  size_t max_pending_write_bytes = 16u << 20;   // a client this far behind is dropped
  int max_connections = 16384;
  int num_threads = 1;
  CorsPolicy cors;  // preflights are answered here; allowed origins get Access-Control-* headers
  // HTTPS (vLLM's --ssl-certfile / --ssl-keyfile): PEM certificate chain and private key; both
  // empty = plain HTTP. Only TLS 1.2 and newer.
  std::string ssl_certfile, ssl_keyfile;
};

class HttpServer {
 public:
  // Binds and listens immediately (throws pagellm::Error when the address cannot be bound).
  HttpServer(HttpServerOptions options, HttpHandler& handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  // Starts the I/O threads.
  void start();
  // Stops accepting and closes idle keep-alive connections; responses in progress continue and their
  // connections close when done.
  void stop_accepting();
  // Stops the I/O threads (pending responses are dropped) and joins them.
  void stop();
  int num_connections() const;
  // Runs `fn` on the server's io_context (used to install signal handling there).
  void post(std::function<void()> fn);
  // Registers `fn` to run on SIGINT/SIGTERM, on an I/O thread.
  void on_signal(std::function<void(int)> fn);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagellm::server
