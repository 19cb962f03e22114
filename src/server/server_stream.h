// The byte stream of one server connection: plain TCP, or TLS over it (--ssl-certfile /
// --ssl-keyfile, OpenSSL through Asio). Both are beast::tcp_stream underneath, so the session's
// timeouts, socket options and shutdown work the same way; reads and writes go through TLS when it
// is on. Satisfies Asio's AsyncReadStream / AsyncWriteStream for completion handlers.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>

namespace pagellm::server {

class ServerStream {
 public:
  using executor_type = boost::beast::tcp_stream::executor_type;

  // tls: the server's context, or null for plain HTTP. The object must not move after this.
  ServerStream(boost::asio::ip::tcp::socket&& socket, boost::asio::ssl::context* tls)
      : tcp_(std::move(socket)) {
    if (tls) tls_.emplace(tcp_, *tls);
  }
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  executor_type get_executor() { return tcp_.get_executor(); }
  boost::asio::ip::tcp::socket& socket() { return tcp_.socket(); }
  void expires_after(std::chrono::steady_clock::duration d) { tcp_.expires_after(d); }
  void expires_never() { tcp_.expires_never(); }
  void close() { tcp_.close(); }
  bool tls() const { return tls_.has_value(); }

  template <class Handler>
  void async_handshake(Handler&& handler) {
    tls_->async_handshake(boost::asio::ssl::stream_base::server, std::forward<Handler>(handler));
  }
  template <class Buffers, class Handler>
  void async_read_some(const Buffers& buffers, Handler&& handler) {
    if (tls_)
      tls_->async_read_some(buffers, std::forward<Handler>(handler));
    else
      tcp_.async_read_some(buffers, std::forward<Handler>(handler));
  }
  template <class Buffers, class Handler>
  void async_write_some(const Buffers& buffers, Handler&& handler) {
    if (tls_)
      tls_->async_write_some(buffers, std::forward<Handler>(handler));
    else
      tcp_.async_write_some(buffers, std::forward<Handler>(handler));
  }

 private:
  boost::beast::tcp_stream tcp_;
  std::optional<boost::asio::ssl::stream<boost::beast::tcp_stream&>> tls_;
};

// A TLS server context from PEM files (certificate chain, private key); one-line errors naming the
// file and what OpenSSL said.
boost::asio::ssl::context make_tls_context(const std::string& certfile, const std::string& keyfile);

}  // namespace pagellm::server
