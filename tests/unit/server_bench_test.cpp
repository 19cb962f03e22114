// The `bench serve` load generator against the real HTTP layer over a fake engine.
#include <gtest/gtest.h>

#include "server/bench_client.h"
#include "server/http_server.h"
#include "server/routes.h"
#include "server_fake_engine.h"

namespace pagellm::server {
namespace {

TEST(ServerBench, SseParsingKeepsPartialEvents) {
  std::vector<std::string> payloads;
  std::string data = "data: {\"a\":1}\n\ndata: [DONE]\n\ndata: {\"partial";
  size_t used = parse_sse_events(data, payloads);
  ASSERT_EQ(payloads.size(), 2u);
  EXPECT_EQ(payloads[0], "{\"a\":1}");
  EXPECT_EQ(payloads[1], "[DONE]");
  EXPECT_EQ(data.substr(used), "data: {\"partial");
}

TEST(ServerBench, Summaries) {
  Summary s = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_NEAR(s.p99, 3.97, 1e-9);
  EXPECT_EQ(summarize({}).mean, 0);
}

TEST(ServerBench, RunsAgainstTheServer) {
  testing::FakeEngine engine(512);
  ServerConfig config;
  config.log_requests = false;
  ApiServer api(engine, config);
  HttpServerOptions http_options;
  http_options.port = 0;
  HttpServer http(http_options, api);
  http.start();

  BenchOptions o;
  o.port = http.port();
  o.max_concurrency = 8;
  o.request_rate = 500;  // Poisson arrivals
  std::vector<BenchPrompt> prompts;
  for (int i = 0; i < 40; ++i) {
    BenchPrompt p;
    p.prompt = std::vector<int32_t>{10, 11, 12, 13 + i};
    p.prompt_len = 4;
    p.output_len = 5;
    prompts.push_back(p);
  }
  double duration = 0;
  auto results = run_bench(o, prompts, &duration);
  ASSERT_EQ(results.size(), prompts.size());
  for (const auto& r : results) {
    EXPECT_TRUE(r.success) << r.error;
    EXPECT_EQ(r.output_tokens, 5);
    EXPECT_EQ(r.prompt_tokens, 4);
    EXPECT_GT(r.ttft_s, 0);
    EXPECT_EQ(r.itl_s.size(), 4u);
    EXPECT_GE(r.latency_s, r.ttft_s);
  }
  auto report = bench_report(results, duration);
  EXPECT_EQ(report["completed"], 40);
  EXPECT_EQ(report["failed"], 0);
  EXPECT_EQ(report["total_output_tokens"], 200);
  EXPECT_GT(report["request_throughput"].get<double>(), 0);
  EXPECT_GT(report["p99_ttft_ms"].get<double>(), 0);
  EXPECT_NE(format_bench_report(report).find("Mean TTFT (ms):"), std::string::npos);

  // Failures are reported, not thrown: an unknown model is a 404 for every request.
  o.model = "nope";
  prompts.resize(3);
  auto failed = run_bench(o, prompts, &duration);
  for (const auto& r : failed) {
    EXPECT_FALSE(r.success);
    EXPECT_NE(r.error.find("404"), std::string::npos) << r.error;
  }
  http.stop();
}

}  // namespace
}  // namespace pagellm::server
