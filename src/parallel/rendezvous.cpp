#include "parallel/rendezvous.h"

#include <poll.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <thread>

#include "common/error.h"

namespace pagellm::parallel {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  throw_error(ErrorKind::kInternal, "rendezvous: " + what);
}

// Send / receive timeouts on the raw socket (0 = none), so a silent peer cannot stall the
// handshake past its deadline.
void set_timeouts(tcp::socket& s, std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

class TcpChannel : public Channel {
 public:
  // The socket's io_context must outlive it: the channel keeps it.
  TcpChannel(std::shared_ptr<asio::io_context> io, tcp::socket socket)
      : io_(std::move(io)), socket_(std::move(socket)) {}
  ~TcpChannel() override { close(); }

  void send(const std::vector<unsigned char>& message) override {
    const uint32_t n = uint32_t(message.size());
    boost::system::error_code ec;
    asio::write(socket_, std::array<asio::const_buffer, 2>{asio::buffer(&n, 4), asio::buffer(message)},
                ec);
    if (ec) fail("sending to a peer: " + ec.message() + " (the peer process has gone)");
  }

  std::vector<unsigned char> recv() override {
    uint32_t n = 0;
    boost::system::error_code ec;
    asio::read(socket_, asio::buffer(&n, 4), ec);
    if (!ec && n > kMaxMessageBytes) fail("a peer announced a message of " + std::to_string(n) + " bytes");
    std::vector<unsigned char> message(n);
    if (!ec) asio::read(socket_, asio::buffer(message), ec);
    if (ec)
      fail(ec == asio::error::eof ? std::string("the peer process closed the connection")
                                  : "receiving from a peer: " + ec.message());
    return message;
  }

  void wait_closed() override {
    pollfd p{socket_.native_handle(), POLLRDHUP, 0};
    while (true) {
      const int r = ::poll(&p, 1, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) return;
    }
  }

  void close() override {
    boost::system::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
  }

  void clear_timeouts() { set_timeouts(socket_, std::chrono::milliseconds(0)); }

 private:
  std::shared_ptr<asio::io_context> io_;
  tcp::socket socket_;
};

// What is wrong with a worker's hello ("" when nothing).
std::string check_hello(const Hello& h, const RendezvousOptions& o,
                        const std::vector<std::unique_ptr<TcpChannel>>& peers) {
  if (h.num_procs != o.num_procs)
    return "process " + std::to_string(h.proc_rank) + " expects " + std::to_string(h.num_procs) +
           " processes, the leader " + std::to_string(o.num_procs);
  if (h.proc_rank < 1 || h.proc_rank >= o.num_procs)
    return "a process claims rank " + std::to_string(h.proc_rank);
  if (peers[size_t(h.proc_rank - 1)]) return "two processes claim rank " + std::to_string(h.proc_rank);
  if (h.fingerprint != o.hello.fingerprint)
    return "process " + std::to_string(h.proc_rank) + " runs with different flags: {" + h.summary +
           "} vs the leader's {" + o.hello.summary + "}";
  return "";
}

}  // namespace

uint64_t fingerprint(const std::string& summary) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : summary) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::vector<std::unique_ptr<Channel>> rendezvous_leader(
    const RendezvousOptions& o, const std::function<std::vector<std::vector<unsigned char>>()>& make_ids) {
  auto io = std::make_shared<asio::io_context>();
  tcp::acceptor acceptor(*io);
  boost::system::error_code ec;
  const tcp::endpoint ep(asio::ip::address_v4::any(), uint16_t(o.master_port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("cannot listen on port " + std::to_string(o.master_port) + ": " + ec.message());
  acceptor.non_blocking(true);
  auto deadline = Clock::now() + o.timeout;
  std::vector<std::unique_ptr<TcpChannel>> peers(size_t(o.num_procs - 1));
  std::string error;
  // Every process that shows up gets an answer; after the first problem the others still get a
  // short while to show up and hear it.
  for (int answered = 0; answered < o.num_procs - 1;) {
    tcp::socket s(*io);
    acceptor.accept(s, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      if (Clock::now() > deadline) {
        if (!error.empty()) break;
        std::string missing;
        for (size_t i = 0; i < peers.size(); ++i)
          if (!peers[i]) missing += (missing.empty() ? "" : ", ") + std::to_string(i + 1);
        error = "process(es) " + missing + " of " + std::to_string(o.num_procs) +
                " did not join within " + std::to_string(o.timeout.count() / 1000) + " s (port " +
                std::to_string(o.master_port) + ")";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    if (ec) fail("accepting a peer: " + ec.message());
    s.non_blocking(false);
    set_timeouts(s, std::chrono::seconds(30));
    auto ch = std::make_unique<TcpChannel>(io, std::move(s));
    ++answered;
    Hello h;
    std::string problem;
    try {
      h = decode_hello(ch->recv());
      problem = check_hello(h, o, peers);
    } catch (const Error& e) {
      problem = std::string("a peer sent a bad hello: ") + e.what();
    }
    if (problem.empty()) {
      peers[size_t(h.proc_rank - 1)] = std::move(ch);
      continue;
    }
    try {
      ch->send(encode_welcome({problem, {}}));
    } catch (const Error&) {
      // That peer has gone already; the others still hear the error.
    }
    if (error.empty()) {
      error = problem;
      deadline = std::min(deadline, Clock::now() + std::chrono::seconds(2));
    }
  }
  Welcome w;
  if (error.empty()) w.ids = make_ids();
  w.error = error;
  const std::vector<unsigned char> welcome = encode_welcome(w);
  std::vector<std::unique_ptr<Channel>> out;
  for (auto& p : peers) {
    if (!p) continue;
    try {
      p->send(welcome);
    } catch (const Error&) {
      if (error.empty()) throw;
    }
    p->clear_timeouts();
    out.push_back(std::move(p));
  }
  if (!error.empty()) fail(error);
  return out;
}

std::unique_ptr<Channel> rendezvous_worker(const RendezvousOptions& o,
                                           std::vector<std::vector<unsigned char>>* ids) {
  auto io = std::make_shared<asio::io_context>();
  const auto deadline = Clock::now() + o.timeout;
  boost::system::error_code ec;
  tcp::resolver resolver(*io);
  for (;;) {
    const auto endpoints = resolver.resolve(o.master_addr, std::to_string(o.master_port), ec);
    if (!ec) {
      tcp::socket s(*io);
      asio::connect(s, endpoints, ec);
      if (!ec) {
        set_timeouts(s, std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::max(deadline - Clock::now(), Clock::duration(std::chrono::seconds(5)))));
        auto ch = std::make_unique<TcpChannel>(io, std::move(s));
        ch->send(encode_hello(o.hello));
        Welcome w = decode_welcome(ch->recv());
        if (!w.error.empty()) fail(w.error);
        *ids = std::move(w.ids);
        ch->clear_timeouts();
        return ch;
      }
    }
    if (Clock::now() > deadline)
      fail("no leader at " + o.master_addr + ":" + std::to_string(o.master_port) + " within " +
           std::to_string(o.timeout.count() / 1000) + " s: " + ec.message());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace pagellm::parallel
