#include <atomic>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/error.h"
#include "common/phase_times.h"
#include "common/thread_pool.h"

namespace pagellm {
namespace {

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16MatchesKnownEncodings) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -16)), 0x0300);  // subnormal 3 * 2^-16 = 0x300 * 2^-24
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips exactly
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
}

TEST(DType, ParsesNames) {
  EXPECT_EQ(dtype_from_safetensors("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_safetensors("I8"), DType::kI8);  // integer storage (INT4 / INT8 checkpoints)
  EXPECT_EQ(dtype_from_safetensors("I32"), DType::kI32);
  EXPECT_FALSE(dtype_from_safetensors("F64").has_value());
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_from_torch_name("bfloat16"), DType::kBF16);
  EXPECT_EQ(dtype_from_torch_name("float32"), DType::kF32);
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  for (size_t n : {0u, 1u, 3u, 4u, 17u, 1000u}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1);
  }
}

// Chunks are claimed dynamically: many back-to-back jobs (some with fewer chunks than threads) each
// cover every index once, and an exception thrown in any chunk reaches the caller, after which the
// pool keeps working.
TEST(ThreadPool, BackToBackJobsAndExceptions) {
  ThreadPool pool(3);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + static_cast<size_t>(round % 37);
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) hits[i]++;
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << round;
  }
  for (size_t bad : {0u, 63u}) {
    EXPECT_THROW(pool.parallel_for(64, [&](size_t b, size_t e) {
      if (b <= bad && bad < e) throw std::runtime_error("chunk failed");
    }),
                 std::runtime_error);
  }
  std::atomic<size_t> total{0};
  pool.parallel_for(100, [&](size_t b, size_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 100u);
}

TEST(Error, CarriesKind) {
  try {
    invalid_argument("temperature must be >= 0");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_STREQ(e.what(), "temperature must be >= 0");
  }
}

TEST(ThreadPool, ConfigureGlobalReportsAFixedSize) {
  const int n = ThreadPool::global().num_threads();  // the pool exists from here on
  EXPECT_TRUE(ThreadPool::configure_global(n));
  EXPECT_FALSE(ThreadPool::configure_global(n + 1));
  EXPECT_EQ(ThreadPool::global().num_threads(), n);
  ThreadPool::configure_global(0);
}

// The table lists each phase that ran, with its calls, total and mean; phases never timed stay out.
TEST(PhaseTimes, ReportsWhatWasAdded) {
  phase::add(phase::kMaskWait, 3'000'000);  // 3 ms
  phase::add(phase::kMaskWait, 1'000'000);
  phase::add(phase::kNumPhases, 5);  // not a phase: ignored
  const std::string table = phase::report();
  const size_t at = table.find("runner: wait for masks");
  ASSERT_NE(at, std::string::npos) << table;
  const std::string line = table.substr(at, table.find('\n', at) - at);
  EXPECT_NE(line.find(" 2 "), std::string::npos) << line;
  EXPECT_NE(line.find("4.00"), std::string::npos) << line;
  EXPECT_NE(line.find("2000.00"), std::string::npos) << line;
  EXPECT_EQ(table.find("masks: build"), std::string::npos) << table;
}

}  // namespace
}  // namespace pagellm
