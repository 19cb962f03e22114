#include "server/http_server.h"

#include <filesystem>
#include <map>
#include <optional>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/error.h"
#include "common/logging.h"
#include "server/server_stream.h"

namespace pagellm::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

std::chrono::milliseconds seconds(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

std::string status_line(int status) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
}

// A parse error of the request bytes (answered 400), as opposed to EOF or a socket error.
bool is_malformed(beast::error_code ec) {
  return ec && ec.category() == beast::http::make_error_code(beast::http::error::end_of_stream).category() &&
         ec != beast::http::error::end_of_stream && ec != beast::http::error::partial_message;
}

constexpr size_t kMaxBufferedWhileBusy = 1u << 20;  // pipelined bytes read while a response runs
constexpr size_t kMaxDrainBytes = size_t{1} << 30;  // body bytes discarded after a 413
constexpr double kDrainTimeoutS = 15;

}  // namespace

class Session;

struct HttpServer::Impl {
  Impl(HttpServerOptions o, HttpHandler& h)
      : options(std::move(o)), handler(h), acceptor(ioc), signals(ioc, SIGINT, SIGTERM), retry_timer(ioc) {
    if (!options.ssl_certfile.empty() || !options.ssl_keyfile.empty())
      tls.emplace(make_tls_context(options.ssl_certfile, options.ssl_keyfile));
  }

  void do_accept();
  void wait_signal() {
    signals.async_wait([this](beast::error_code ec, int signo) {
      if (ec) return;
      signal_handler(signo);
      wait_signal();
    });
  }
  void register_session(uint64_t id, const std::shared_ptr<Session>& s) {
    std::lock_guard lock(mutex);
    sessions[id] = s;
  }
  void unregister_session(uint64_t id) {
    std::lock_guard lock(mutex);
    sessions.erase(id);
  }

  HttpServerOptions options;
  HttpHandler& handler;
  // Declared before ioc: handlers still queued in ioc own Sessions whose destructors touch these.
  std::atomic<int> num_connections{0};
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> next_session_id{1};
  std::mutex mutex;
  std::map<uint64_t, std::weak_ptr<Session>> sessions;  // guarded by mutex
  std::function<void(int)> signal_handler;
  std::optional<net::ssl::context> tls;  // --ssl-certfile / --ssl-keyfile
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer retry_timer;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::vector<std::thread> threads;
};

// One TCP connection. Every member is touched only on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl& server, uint64_t id)
      : stream_(std::move(socket), server.tls ? &*server.tls : nullptr), server_(server), id_(id) {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);
    remote_ = stream_.socket().remote_endpoint(ec).address().to_string();
    ++server_.num_connections;
  }
  ~Session() {
    --server_.num_connections;
    server_.unregister_session(id_);
  }

  void run() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->stream_.tls()) return self->read_request();
      self->stream_.expires_after(seconds(self->server_.options.header_timeout_s));
      self->stream_.async_handshake([self](beast::error_code ec) {
        if (ec) return self->close();  // not TLS, or a failed handshake: nothing to answer
        self->read_request();
      });
    });
  }

  // Called (on the strand) when the server starts draining.
  void on_drain() {
    if (state_ == State::kReading && (!parser_ || !parser_->got_some()) && buffer_.size() == 0) close();
  }

  net::any_io_executor executor() { return stream_.get_executor(); }

  // After the I/O threads stopped: drop the pending response's cancel hook (it owns the handler's
  // state, which owns this session: a cycle) and the socket.
  void abandon() {
    disconnect_fn_ = nullptr;
    state_ = State::kClosed;
    beast::error_code ec;
    stream_.socket().close(ec);
  }

  // ResponseWriter operations; `seq` guards against a stale writer from an earlier request.
  bool writable(uint64_t seq) const { return seq == seq_ && state_ == State::kHandling && !response_complete_; }
  void respond(uint64_t seq, int status, const std::string& type, std::string body, const std::string& extra);
  void start_stream(uint64_t seq, int status, const std::string& type);
  void write_chunk(uint64_t seq, std::string data);
  void end_stream(uint64_t seq);
  void set_disconnect(uint64_t seq, std::function<void()> fn) {
    if (writable(seq)) disconnect_fn_ = std::move(fn);
  }
  bool disconnected(uint64_t seq) const { return seq != seq_ || state_ == State::kClosed; }

 private:
  enum class State { kReading, kHandling, kIdle, kClosed };

  void read_request();
  void answer_preflight(const std::string& origin, const std::string& method, const std::string& headers);
  void on_header(beast::error_code ec);
  void on_body(beast::error_code ec);
  void reject(int status, const std::string& message, bool drain);
  void start_monitor();
  void on_monitor(beast::error_code ec, size_t n);
  void queue_write(std::string data);
  void start_write();
  void on_write(beast::error_code ec);
  void complete_response();
  void finish_response();
  void drain_then_close();
  void close();
  void fire_disconnect() {
    auto fn = std::move(disconnect_fn_);
    disconnect_fn_ = nullptr;
    if (fn) fn();
  }

  ServerStream stream_;
  HttpServer::Impl& server_;
  uint64_t id_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kReading;
  uint64_t seq_ = 0;               // request counter on this connection
  bool keep_alive_ = true;
  std::string cors_headers_;  // Access-Control-* lines for the current request's Origin
  bool monitor_pending_ = false;   // a raw read watching for disconnects is in flight
  bool response_complete_ = false; // the last bytes of the response are queued
  bool drain_after_write_ = false; // 413: discard the unread body before closing
  bool stream_started_ = false;
  bool write_in_flight_ = false;
  std::string pending_;            // bytes queued behind the write in flight
  std::string inflight_;           // bytes of the write in flight
  std::function<void()> disconnect_fn_;
  std::array<char, 4096> drain_buf_{};
  size_t drained_ = 0;
};

namespace {

class Writer : public ResponseWriter {
 public:
  Writer(std::shared_ptr<Session> s, uint64_t seq) : s_(std::move(s)), seq_(seq) {}
  void respond(int status, const std::string& type, std::string body, const std::string& extra) override {
    s_->respond(seq_, status, type, std::move(body), extra);
  }
  void start_stream(int status, const std::string& type) override { s_->start_stream(seq_, status, type); }
  void write_chunk(std::string data) override { s_->write_chunk(seq_, std::move(data)); }
  void end_stream() override { s_->end_stream(seq_); }
  void on_disconnect(std::function<void()> fn) override { s_->set_disconnect(seq_, std::move(fn)); }
  bool disconnected() const override { return s_->disconnected(seq_); }
  void post(std::function<void()> fn) override { net::post(s_->executor(), std::move(fn)); }

 private:
  std::shared_ptr<Session> s_;
  uint64_t seq_;
};

}  // namespace

void Session::read_request() {
  if (state_ == State::kClosed) return;
  if (server_.draining.load() && seq_ > 0) {
    close();
    return;
  }
  state_ = State::kReading;
  cors_headers_.clear();
  parser_.emplace();
  parser_->body_limit(server_.options.max_body_bytes);
  parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
  stream_.expires_after(seconds(seq_ == 0 ? server_.options.header_timeout_s : server_.options.idle_timeout_s));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec == http::error::header_limit) return reject(431, "request headers are too large", false);
  if (ec == http::error::body_limit) {
    // Beast checks Content-Length against the limit as soon as the header is parsed.
    return reject(413, "request body exceeds the limit of " + std::to_string(server_.options.max_body_bytes) + " bytes",
                  true);
  }
  if (is_malformed(ec)) return reject(400, std::string("malformed HTTP request: ") + ec.message(), false);
  if (ec) return close();  // EOF between requests, idle timeout, or a socket error: nothing to answer
  const auto& req = parser_->get();
  if (auto len = parser_->content_length(); len && *len > server_.options.max_body_bytes) {
    return reject(413, "request body of " + std::to_string(*len) + " bytes exceeds the limit of " +
                           std::to_string(server_.options.max_body_bytes) + " bytes",
                  true);
  }
  auto expect = req.find(http::field::expect);
  if (expect != req.end() && beast::iequals(expect->value(), "100-continue")) {
    queue_write(status_line(100) + "\r\n");
  }
  stream_.expires_after(seconds(server_.options.header_timeout_s));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void Session::on_body(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec == http::error::body_limit) {
    return reject(413, "request body exceeds the limit of " + std::to_string(server_.options.max_body_bytes) + " bytes",
                  true);
  }
  if (is_malformed(ec)) return reject(400, std::string("malformed HTTP request: ") + ec.message(), false);
  if (ec) return close();
  auto& req = parser_->get();
  HttpRequest out;
  out.method = std::string(req.method_string());
  std::string_view target(req.target().data(), req.target().size());
  out.path = std::string(target.substr(0, target.find('?')));
  if (auto it = req.find(http::field::authorization); it != req.end()) out.authorization = std::string(it->value());
  if (auto it = req.find(http::field::content_type); it != req.end()) out.content_type = std::string(it->value());
  out.body = std::move(req.body());
  out.remote = remote_;
  keep_alive_ = req.keep_alive();
  std::string origin;
  if (auto it = req.find(http::field::origin); it != req.end()) origin = std::string(it->value());
  cors_headers_ = server_.options.cors.response_headers(origin);
  if (out.method == "OPTIONS" && !origin.empty()) {
    if (auto m = req.find(http::field::access_control_request_method); m != req.end()) {
      std::string headers;
      if (auto h = req.find(http::field::access_control_request_headers); h != req.end())
        headers = std::string(h->value());
      return answer_preflight(origin, std::string(m->value()), headers);
    }
  }
  parser_.reset();
  stream_.expires_never();
  state_ = State::kHandling;
  response_complete_ = false;
  stream_started_ = false;
  ++seq_;
  start_monitor();
  auto writer = std::make_shared<Writer>(shared_from_this(), seq_);
  try {
    server_.handler.handle(std::move(out), writer);
  } catch (const std::exception& e) {
    // Handlers answer their own errors; this is the last line of defence against a bug.
    log::error(std::string("http: handler threw: ") + e.what());
    if (writable(seq_)) {
      if (stream_started_) end_stream(seq_);
      else respond(seq_, 500, "application/json", server_.handler.reject_body(500, "internal error"), {});
    }
  }
}

// A CORS preflight: answered by the HTTP layer, never seen by the handler.
void Session::answer_preflight(const std::string& origin, const std::string& method,
                               const std::string& headers) {
  const CorsPolicy::Preflight p = server_.options.cors.preflight(origin, method, headers);
  parser_.reset();
  stream_.expires_never();
  state_ = State::kHandling;
  response_complete_ = false;
  stream_started_ = false;
  ++seq_;
  cors_headers_.clear();  // the preflight's own headers carry the origin
  respond(seq_, p.status, "text/plain", p.body, p.headers);
}

void Session::reject(int status, const std::string& message, bool drain) {
  std::string body = server_.handler.reject_body(status, message);
  keep_alive_ = false;
  drain_after_write_ = drain;
  state_ = State::kHandling;
  response_complete_ = true;
  stream_.expires_never();
  queue_write(status_line(status) + "Server: pagellm\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\nConnection: close\r\n" + cors_headers_ + "\r\n" + body);
}

void Session::start_monitor() {
  if (monitor_pending_ || state_ == State::kClosed || buffer_.size() > kMaxBufferedWhileBusy) return;
  monitor_pending_ = true;
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->on_monitor(ec, n);
  });
}

void Session::on_monitor(beast::error_code ec, size_t n) {
  monitor_pending_ = false;
  if (state_ == State::kClosed) return;
  // finish_response() cancels the watch to parse the next request.
  if (ec == net::error::operation_aborted && state_ == State::kIdle) return read_request();
  if (ec) {
    // The peer closed or reset: abort whatever it was waiting for.
    fire_disconnect();
    return close();
  }
  buffer_.commit(n);
  if (state_ == State::kHandling) return start_monitor();
  if (state_ == State::kIdle) read_request();
}

void Session::respond(uint64_t seq, int status, const std::string& type, std::string body, const std::string& extra) {
  if (!writable(seq) || stream_started_) return;
  std::string head = status_line(status) + "Server: pagellm\r\nContent-Type: " + type +
                     "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                     (keep_alive_ ? "" : "Connection: close\r\n") + cors_headers_ + extra + "\r\n";
  complete_response();
  queue_write(std::move(head) + body);
}

void Session::start_stream(uint64_t seq, int status, const std::string& type) {
  if (!writable(seq) || stream_started_) return;
  stream_started_ = true;
  queue_write(status_line(status) + "Server: pagellm\r\nContent-Type: " + type +
              "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n" +
              (keep_alive_ ? "" : "Connection: close\r\n") + cors_headers_ + "\r\n");
}

void Session::write_chunk(uint64_t seq, std::string data) {
  if (!writable(seq) || !stream_started_ || data.empty()) return;
  char size[20];
  int len = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string framed;
  framed.reserve(data.size() + static_cast<size_t>(len) + 2);
  framed.append(size, static_cast<size_t>(len)).append(data).append("\r\n");
  queue_write(std::move(framed));
}

void Session::end_stream(uint64_t seq) {
  if (!writable(seq) || !stream_started_) return;
  complete_response();
  queue_write("0\r\n\r\n");
}

void Session::complete_response() {
  response_complete_ = true;
  disconnect_fn_ = nullptr;  // the response is whole: nothing left to cancel
}

void Session::queue_write(std::string data) {
  if (state_ == State::kClosed) return;
  if (pending_.empty()) pending_ = std::move(data);
  else pending_ += data;
  if (pending_.size() > server_.options.max_pending_write_bytes) {
    log::warning("http: dropping " + remote_ + ": client is not reading its response");
    fire_disconnect();
    return close();
  }
  if (!write_in_flight_) start_write();
}

void Session::start_write() {
  inflight_.swap(pending_);
  pending_.clear();
  write_in_flight_ = true;
  net::async_write(stream_, net::buffer(inflight_),
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
}

void Session::on_write(beast::error_code ec) {
  write_in_flight_ = false;
  inflight_.clear();
  if (state_ == State::kClosed) return;
  if (ec) {
    fire_disconnect();
    return close();
  }
  if (!pending_.empty()) return start_write();
  if (response_complete_ && state_ == State::kHandling) finish_response();
}

void Session::finish_response() {
  if (drain_after_write_) return drain_then_close();
  if (!keep_alive_ || server_.draining.load()) return close();
  state_ = State::kIdle;
  if (!monitor_pending_) return read_request();
  // Only one read may be in flight: stop the disconnect watch; its completion (aborted, or with
  // bytes of a pipelined request) continues in on_monitor() with read_request().
  beast::error_code ec;
  stream_.socket().cancel(ec);
}

void Session::drain_then_close() {
  // Answer first, then read and discard what the client is still sending, so that it sees the 413
  // instead of a connection reset (TLS: a half-closed socket ends the session; just close).
  if (stream_.tls()) return close();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(seconds(kDrainTimeoutS));
  stream_.async_read_some(net::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->drained_ += n;
    if (ec || self->drained_ > kMaxDrainBytes) return self->close();
    self->drain_then_close();
  });
}

void Session::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  fire_disconnect();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors or similar: back off briefly instead of spinning.
      log::warning("http: accept failed: " + ec.message());
      retry_timer.expires_after(std::chrono::milliseconds(50));
      retry_timer.async_wait([this](beast::error_code) { do_accept(); });
      return;
    }
    if (num_connections.load() >= options.max_connections) {
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      uint64_t id = next_session_id++;
      auto session = std::make_shared<Session>(std::move(socket), *this, id);
      register_session(id, session);
      session->run();
    }
    do_accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, HttpHandler& handler)
    : impl_(std::make_unique<Impl>(std::move(options), handler)) {
  auto& a = impl_->acceptor;
  beast::error_code ec;
  auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) throw Error(ErrorKind::kInvalidArgument, "--host: '" + impl_->options.host + "' is not an IP address");
  tcp::endpoint endpoint(address, impl_->options.port);
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    throw Error(ErrorKind::kInvalidArgument, "cannot listen on " + impl_->options.host + ":" +
                                                 std::to_string(impl_->options.port) + ": " + ec.message());
  }
}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::port() const {
  beast::error_code ec;
  return impl_->acceptor.local_endpoint(ec).port();
}

void HttpServer::start() {
  impl_->work.emplace(impl_->ioc.get_executor());
  net::post(impl_->ioc, [this] { impl_->do_accept(); });
  for (int i = 0; i < std::max(1, impl_->options.num_threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->ioc.run(); });
  }
}

void HttpServer::stop_accepting() {
  impl_->draining = true;
  net::post(impl_->ioc, [this] {
    beast::error_code ec;
    impl_->acceptor.close(ec);
    impl_->retry_timer.cancel();
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard lock(impl_->mutex);
      for (auto& [id, weak] : impl_->sessions) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) net::post(s->executor(), [s] { s->on_drain(); });
  });
}

void HttpServer::stop() {
  if (impl_->threads.empty()) return;
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(impl_->mutex);
    for (auto& [id, weak] : impl_->sessions) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  for (auto& session : live) session->abandon();  // no I/O thread runs now: safe off-strand
}

int HttpServer::num_connections() const { return impl_->num_connections.load(); }

void HttpServer::post(std::function<void()> fn) { net::post(impl_->ioc, std::move(fn)); }

void HttpServer::on_signal(std::function<void(int)> fn) {
  impl_->signal_handler = std::move(fn);
  impl_->wait_signal();
}

net::ssl::context make_tls_context(const std::string& certfile, const std::string& keyfile) {
  if (certfile.empty() || keyfile.empty())
    invalid_argument("TLS needs both --ssl-certfile and --ssl-keyfile");
  for (const auto& [flag, file] : {std::pair{"--ssl-certfile ", &certfile}, {"--ssl-keyfile ", &keyfile}})
    if (!std::filesystem::is_regular_file(*file)) invalid_argument(flag + *file + ": no such file");
  net::ssl::context ctx(net::ssl::context::tls_server);
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                  net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                  net::ssl::context::no_tlsv1_1);
  beast::error_code ec;
  ctx.use_certificate_chain_file(certfile, ec);
  if (ec) invalid_argument("--ssl-certfile " + certfile + ": " + ec.message());
  ctx.use_private_key_file(keyfile, net::ssl::context::pem, ec);
  if (ec) invalid_argument("--ssl-keyfile " + keyfile + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1)
    invalid_argument("--ssl-keyfile " + keyfile + " does not belong to the certificate in " + certfile);
  return ctx;
}

}  // namespace pagellm::server
