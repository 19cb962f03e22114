// `pagellm bench latency`'s statistics (cli/latency_stats.h): percentiles as numpy computes them
// (linear between the closest ranks), the printed report and vLLM's JSON keys.
#include <gtest/gtest.h>

#include "cli/latency_stats.h"
#include "common/error.h"

namespace pagellm::cli {
namespace {

TEST(LatencyStats, PercentilesInterpolateBetweenRanksAsNumpyDoes) {
  // numpy.percentile([4, 1, 3, 2], p) for p = 0, 10, 25, 50, 75, 99, 100.
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 10), 1.3);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 1.75);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 75), 3.25);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({7.5}, 90), 7.5);
  EXPECT_THROW(percentile({}, 50), Error);
  EXPECT_THROW(percentile(v, 101), Error);
  EXPECT_THROW(percentile(v, -1), Error);
}

TEST(LatencyStats, ReportPrintsVllmsLinesAndWritesItsJsonKeys) {
  LatencyReport r;
  r.latencies = {0.5, 0.25, 0.75, 0.5};
  r.batch_size = 8;
  r.output_len = 100;
  EXPECT_DOUBLE_EQ(r.mean(), 0.5);
  const std::string text = r.format();
  EXPECT_NE(text.find("Avg latency: 0.500000 seconds\n"), std::string::npos) << text;
  EXPECT_NE(text.find("50% percentile latency: 0.500000 seconds\n"), std::string::npos) << text;
  EXPECT_NE(text.find("10% percentile latency: 0.325000 seconds\n"), std::string::npos) << text;
  EXPECT_NE(text.find("99% percentile latency: 0.742500 seconds\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Per output token: 5.000 ms (batch 8, 100 tokens each"), std::string::npos)
      << text;
  const nlohmann::json j = r.to_json();
  EXPECT_DOUBLE_EQ(j.at("avg_latency").get<double>(), 0.5);
  EXPECT_EQ(j.at("latencies").size(), 4u);
  for (const char* key : {"10", "25", "50", "75", "90", "99"})
    EXPECT_TRUE(j.at("percentiles").contains(key)) << key;
  EXPECT_DOUBLE_EQ(j.at("percentiles").at("75").get<double>(), 0.5625);
}

}  // namespace
}  // namespace pagellm::cli
