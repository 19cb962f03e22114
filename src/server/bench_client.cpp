#include "server/bench_client.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <random>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/error.h"

namespace pagellm::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

size_t parse_sse_events(std::string_view data, std::vector<std::string>& payloads) {
  size_t consumed = 0;
  for (;;) {
    size_t end = data.find("\n\n", consumed);
    if (end == std::string_view::npos) return consumed;
    std::string_view event = data.substr(consumed, end - consumed);
    // An event may hold several lines; only data: lines matter here.
    size_t line_start = 0;
    while (line_start <= event.size()) {
      size_t line_end = event.find('\n', line_start);
      if (line_end == std::string_view::npos) line_end = event.size();
      std::string_view line = event.substr(line_start, line_end - line_start);
      if (line.rfind("data:", 0) == 0) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        payloads.emplace_back(line);
      }
      line_start = line_end + 1;
    }
    consumed = end + 2;
  }
}

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Runner;

// One streamed request on its own connection.
class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(Runner& runner, size_t index, std::string body);
  void start();

 private:
  void fail(const std::string& what);
  void done();
  void on_read(beast::error_code ec);
  void consume_events();

  Runner& runner_;
  size_t index_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
  http::response_parser<http::string_body> parser_;
  size_t consumed_ = 0;
  Clock::time_point start_;
  Clock::time_point last_;
  bool got_first_ = false;
  bool finished_ = false;
  int num_chunks_ = 0;
};

struct Runner {
  net::io_context ioc;
  const BenchOptions& options;
  tcp::endpoint endpoint;
  std::vector<BenchResult> results;
  std::deque<size_t> waiting;  // arrived, held back by --max-concurrency
  std::vector<std::string> bodies;
  int num_active = 0;
  Runner(const BenchOptions& o) : options(o) {}

  void arrive(size_t i) {
    if (options.max_concurrency > 0 && num_active >= options.max_concurrency) {
      waiting.push_back(i);
      return;
    }
    launch(i);
  }
  void launch(size_t i) {
    ++num_active;
    std::make_shared<Call>(*this, i, std::move(bodies[i]))->start();
  }
  void finished() {
    --num_active;
    if (!waiting.empty()) {
      size_t next = waiting.front();
      waiting.pop_front();
      launch(next);
    }
  }
};

Call::Call(Runner& runner, size_t index, std::string body)
    : runner_(runner), index_(index), stream_(runner.ioc) {
  request_ = http::request<http::string_body>(http::verb::post, runner.options.endpoint, 11);
  request_.set(http::field::host, runner.options.host);
  request_.set(http::field::content_type, "application/json");
  request_.set(http::field::accept, "text/event-stream");
  if (!runner.options.api_key.empty()) request_.set(http::field::authorization, "Bearer " + runner.options.api_key);
  request_.body() = std::move(body);
  request_.prepare_payload();
  parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
}

void Call::start() {
  start_ = Clock::now();
  stream_.expires_after(std::chrono::milliseconds(static_cast<int64_t>(runner_.options.timeout_s * 1000)));
  stream_.async_connect(runner_.endpoint, [self = shared_from_this()](beast::error_code ec) {
    if (ec) return self->fail("connect: " + ec.message());
    http::async_write(self->stream_, self->request_, [self](beast::error_code ec, size_t) {
      if (ec) return self->fail("write: " + ec.message());
      http::async_read_some(self->stream_, self->buffer_, self->parser_,
                            [self](beast::error_code ec, size_t) { self->on_read(ec); });
    });
  });
}

void Call::on_read(beast::error_code ec) {
  if (finished_) return;
  if (ec) return fail("read: " + ec.message());
  if (parser_.is_header_done() && parser_.get().result_int() != 200) {
    if (!parser_.is_done()) {
      http::async_read_some(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
        self->on_read(ec);
      });
      return;
    }
    return fail("HTTP " + std::to_string(parser_.get().result_int()) + ": " + parser_.get().body().substr(0, 300));
  }
  consume_events();
  if (finished_) return;
  if (parser_.is_done()) return done();
  http::async_read_some(stream_, buffer_, parser_,
                        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
}

void Call::consume_events() {
  std::string& body = parser_.get().body();
  std::vector<std::string> payloads;
  consumed_ += parse_sse_events(std::string_view(body).substr(consumed_), payloads);
  BenchResult& r = runner_.results[index_];
  for (const auto& p : payloads) {
    if (p == "[DONE]") continue;
    json chunk = json::parse(p, nullptr, false);
    if (chunk.is_discarded()) return fail("unparsable event: " + p.substr(0, 200));
    if (chunk.contains("error")) return fail("error event: " + chunk["error"].dump());
    if (chunk.contains("usage") && chunk["usage"].is_object()) {
      r.output_tokens = chunk["usage"].value("completion_tokens", 0);
      r.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
    }
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
    const json& c = chunk["choices"][0];
    std::string text;
    if (c.contains("text") && c["text"].is_string()) text = c["text"];
    else if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
      text = c["delta"]["content"];
    if (text.empty()) continue;
    const auto now = Clock::now();
    if (!got_first_) {
      got_first_ = true;
      r.ttft_s = std::chrono::duration<double>(now - start_).count();
    } else {
      r.itl_s.push_back(std::chrono::duration<double>(now - last_).count());
    }
    last_ = now;
    ++num_chunks_;
  }
}

void Call::fail(const std::string& what) {
  if (finished_) return;
  finished_ = true;
  BenchResult& r = runner_.results[index_];
  r.success = false;
  r.error = what;
  r.latency_s = since(start_);
  beast::error_code ec;
  stream_.socket().close(ec);
  runner_.finished();
}

void Call::done() {
  if (finished_) return;
  finished_ = true;
  BenchResult& r = runner_.results[index_];
  r.success = true;
  r.latency_s = since(start_);
  if (r.output_tokens == 0) r.output_tokens = num_chunks_;  // the server sent no usage
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  runner_.finished();
}

std::string request_body(const BenchOptions& o, const BenchPrompt& p) {
  json body = {{"max_tokens", p.output_len},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", o.temperature},
               {"ignore_eos", o.ignore_eos}};
  if (!o.model.empty()) body["model"] = o.model;
  if (o.endpoint.find("chat") != std::string::npos) {
    body["messages"] = json::array({{{"role", "user"}, {"content", p.prompt}}});
  } else {
    body["prompt"] = p.prompt;
  }
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::vector<BenchResult> run_bench(const BenchOptions& options, const std::vector<BenchPrompt>& prompts,
                                   double* duration_s) {
  Runner runner(options);
  beast::error_code ec;
  tcp::resolver resolver(runner.ioc);
  auto resolved = resolver.resolve(options.host, std::to_string(options.port), ec);
  if (ec || resolved.empty()) throw Error(ErrorKind::kInvalidArgument, "--host: cannot resolve '" + options.host + "'");
  runner.endpoint = *resolved.begin();
  runner.results.resize(prompts.size());
  for (const auto& p : prompts) runner.bodies.push_back(request_body(options, p));

  // Arrival times: gamma-distributed gaps with mean 1/rate (shape 1 = exponential = Poisson).
  std::mt19937_64 rng(options.seed);
  std::vector<double> arrivals(prompts.size(), 0.0);
  if (std::isfinite(options.request_rate) && options.request_rate > 0) {
    const double shape = options.burstiness;
    std::gamma_distribution<double> gap(shape, 1.0 / (options.request_rate * shape));
    double t = 0;
    for (auto& a : arrivals) {
      a = t;
      t += gap(rng);
    }
  }
  std::vector<std::unique_ptr<net::steady_timer>> timers;
  const auto start = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (arrivals[i] <= 0) {
      net::post(runner.ioc, [&runner, i] { runner.arrive(i); });
      continue;
    }
    auto timer = std::make_unique<net::steady_timer>(runner.ioc);
    timer->expires_at(start + std::chrono::microseconds(static_cast<int64_t>(arrivals[i] * 1e6)));
    timer->async_wait([&runner, i](beast::error_code) { runner.arrive(i); });
    timers.push_back(std::move(timer));
  }
  runner.ioc.run();
  *duration_s = since(start);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (runner.results[i].prompt_tokens == 0) runner.results[i].prompt_tokens = prompts[i].prompt_len;
  }
  return std::move(runner.results);
}

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto pct = [&](double q) {
    double pos = q * static_cast<double>(v.size() - 1);
    size_t lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(var / static_cast<double>(v.size()));
  s.median = pct(0.5);
  s.p99 = pct(0.99);
  return s;
}

json bench_report(const std::vector<BenchResult>& results, double duration_s) {
  std::vector<double> ttft, tpot, itl, e2el;
  int64_t completed = 0, input_tokens = 0, output_tokens = 0;
  json errors = json::array();
  for (const auto& r : results) {
    if (!r.success) {
      if (errors.size() < 5) errors.push_back(r.error);
      continue;
    }
    ++completed;
    input_tokens += r.prompt_tokens;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_s * 1e3);
    e2el.push_back(r.latency_s * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.latency_s - r.ttft_s) * 1e3 / (r.output_tokens - 1));
    for (double x : r.itl_s) itl.push_back(x * 1e3);
  }
  const double d = std::max(duration_s, 1e-9);
  json out = {{"duration", duration_s},
              {"completed", completed},
              {"failed", static_cast<int64_t>(results.size()) - completed},
              {"total_input_tokens", input_tokens},
              {"total_output_tokens", output_tokens},
              {"request_throughput", static_cast<double>(completed) / d},
              {"output_throughput", static_cast<double>(output_tokens) / d},
              {"total_token_throughput", static_cast<double>(input_tokens + output_tokens) / d},
              {"errors", errors}};
  auto add = [&](const char* name, std::vector<double> v) {
    Summary s = summarize(std::move(v));
    out[std::string("mean_") + name + "_ms"] = s.mean;
    out[std::string("median_") + name + "_ms"] = s.median;
    out[std::string("p99_") + name + "_ms"] = s.p99;
    out[std::string("std_") + name + "_ms"] = s.std;
  };
  add("ttft", ttft);
  add("tpot", tpot);
  add("itl", itl);
  add("e2el", e2el);
  return out;
}

std::string format_bench_report(const json& r) {
  std::string out;
  auto line = [&](const std::string& label, const std::string& value) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "%-40s %s\n", label.c_str(), value.c_str());
    out += buf;
  };
  auto num = [](double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return std::string(buf);
  };
  out += "============ Serving Benchmark Result ============\n";
  line("Successful requests:", std::to_string(r["completed"].get<int64_t>()));
  line("Failed requests:", std::to_string(r["failed"].get<int64_t>()));
  line("Benchmark duration (s):", num(r["duration"], 2));
  line("Total input tokens:", std::to_string(r["total_input_tokens"].get<int64_t>()));
  line("Total generated tokens:", std::to_string(r["total_output_tokens"].get<int64_t>()));
  line("Request throughput (req/s):", num(r["request_throughput"], 2));
  line("Output token throughput (tok/s):", num(r["output_throughput"], 2));
  line("Total token throughput (tok/s):", num(r["total_token_throughput"], 2));
  const std::pair<const char*, const char*> sections[] = {
      {"ttft", "Time to First Token"}, {"tpot", "Time per Output Token (excl. 1st token)"},
      {"itl", "Inter-token Latency"}, {"e2el", "End-to-end Latency"}};
  for (const auto& [key, title] : sections) {
    std::string head = std::string(" ") + title + " ";
    size_t pad = head.size() < 50 ? (50 - head.size()) / 2 : 0;
    out += std::string(pad, '-') + head + std::string(50 - pad - std::min<size_t>(head.size(), 50), '-') + "\n";
    std::string upper = key;
    for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    line("Mean " + upper + " (ms):", num(r[std::string("mean_") + key + "_ms"], 2));
    line("Median " + upper + " (ms):", num(r[std::string("median_") + key + "_ms"], 2));
    line("P99 " + upper + " (ms):", num(r[std::string("p99_") + key + "_ms"], 2));
  }
  out += "==================================================\n";
  for (const auto& e : r["errors"]) out += "error: " + e.get<std::string>() + "\n";
  return out;
}

}  // namespace pagellm::server
