// engine::sample_token per row on realistic logits (normal(0, 3) - 2 with a few high spikes), for
// the CPU runner's stories260K vocabulary (512) and real ones (32000, 128256), with plain
// temperature, top-k + top-p and top-p alone.
//   cmake -S . -B build-bench -G Ninja -DPAGELLM_BENCH=ON && cmake --build build-bench --target
//   sampler_bench
//   ./build-bench/sampler_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampler.h"

namespace pagellm {
namespace {

std::vector<float> realistic_row(int vocab) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(static_cast<size_t>(vocab));  // [vocab]
  for (float& v : row) v = normal(rng) - 2.0f;
  std::uniform_int_distribution<int> col(0, vocab - 1);
  for (int i = 0; i < 5; ++i) row[static_cast<size_t>(col(rng))] = 16.0f + float(i);
  return row;
}

// range(0): vocab; range(1): 0 = T 0.8, 1 = T 0.8 + top-k 50 + top-p 0.9, 2 = T 0.8 + top-p 0.9.
void BM_SampleToken(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0));
  SamplingParams p;
  p.temperature = 0.8f;
  if (state.range(1) == 1) p.top_k = 50;
  if (state.range(1) >= 1) p.top_p = 0.9f;
  const std::vector<float> base = realistic_row(vocab);
  std::vector<float> row(base.size());
  engine::ScheduledSeq seq;
  seq.params = &p;
  uint64_t seed = 0;
  for (auto _ : state) {
    row = base;  // sample_token penalizes in place
    seq.seed = ++seed;
    benchmark::DoNotOptimize(engine::sample_token(row, seq).token_id);
  }
}
BENCHMARK(BM_SampleToken)
    ->ArgsProduct({{512, 32000, 128256}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagellm

BENCHMARK_MAIN();
