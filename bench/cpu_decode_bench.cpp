// Single-stream greedy decode through CpuRunner::execute (forward pass + LM head + sampler), the
// workload of llama2.c's run.c: from BOS, one token per step, 256 positions. Reports tokens/s.
//   cmake -S . -B build -DPAGELLM_BENCH=ON && cmake --build build --target cpu_decode_bench
//   PAGELLM_BENCH_MODEL=../shared/models/stories260K ./build/cpu_decode_bench
#include <cstdlib>
#include <vector>

#include <benchmark/benchmark.h>

#include "common/logging.h"
#include "runner/model_loader.h"

namespace pagellm {
namespace {

void BM_GreedyDecode(benchmark::State& state) {
  log::set_level(log::Level::kWarning);
  const char* env = std::getenv("PAGELLM_BENCH_MODEL");
  EngineArgs args;
  args.device = "cpu";
  args.model = env != nullptr ? env : PAGELLM_SHARED_DIR "/models/stories260K";
  const int steps = static_cast<int>(state.range(0));
  args.block_size = 16;
  args.num_kv_blocks = steps / args.block_size + 2;
  auto model = runner::load_model(args);
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<int32_t> block_table;  // [num_kv_blocks]
  for (int b = 0; b < args.num_kv_blocks; ++b) block_table.push_back(b);
  int64_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = {1};
    for (int pos = 0; pos < steps; ++pos) {
      engine::SchedulerOutput batch;
      engine::ScheduledSeq& s = batch.seqs.emplace_back();
      s.token_ids = std::span<const int32_t>(&ids[static_cast<size_t>(pos)], 1);
      s.num_computed_tokens = pos;
      s.block_table = block_table;
      s.needs_sample = true;
      s.params = &params;
      s.prompt_token_ids = std::span<const int32_t>(ids.data(), 1);
      s.output_token_ids = std::span<const int32_t>(ids.data() + 1, ids.size() - 1);
      batch.num_scheduled_tokens = 1;
      const auto out = model.runner->execute(batch);
      ids.push_back(out.sampled_token_ids[0]);
    }
    tokens += steps;
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GreedyDecode)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace pagellm

BENCHMARK_MAIN();
