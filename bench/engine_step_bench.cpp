// The engine's own per-step CPU cost (schedule + KV bookkeeping + output processing) with 256 running
// requests and a runner that does no model work: it returns one scripted token per sequence, so
// everything measured is engine overhead. Target: < 100 µs per step.
//   cmake -S . -B build-bench -G Ninja -DPAGELLM_BENCH=ON && cmake --build build-bench --target engine_step_bench
//   ./build-bench/engine_step_bench
#include <benchmark/benchmark.h>

#include "engine/engine_core.h"
#include "runner/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

// Emits printable byte tokens in a fixed pattern; never EOS.
class NullRunner : public runner::ModelRunner {
 public:
  NullRunner(int num_blocks, int block_size) : num_blocks_(num_blocks), block_size_(block_size) {
    config_.vocab_size = 258;
    config_.max_position_embeddings = 1 << 20;
  }
  int num_kv_blocks() const override { return num_blocks_; }
  int block_size() const override { return block_size_; }
  const io::ModelConfig& config() const override { return config_; }
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override {
    engine::ModelRunnerOutput out;
    out.sampled_token_ids.reserve(batch.seqs.size());
    out.sampled_logprobs.resize(batch.seqs.size());
    out.prompt_logprobs.resize(batch.seqs.size());
    for (const auto& s : batch.seqs) {
      const int32_t token = s.needs_sample ? static_cast<int32_t>('a' + (s.output_token_ids.size() + s.seq_id) % 26) : -1;
      out.sampled_token_ids.push_back(token);
      if (s.needs_sample) out.sampled_logprobs[out.sampled_token_ids.size() - 1] = TokenLogprobs{token, -1.0f, {}};
    }
    return out;
  }

 private:
  int num_blocks_;
  int block_size_;
  io::ModelConfig config_;
};

// Steady state: 256 sequences decoding (prompt 128 tokens, streaming deltas, a stop string to check),
// measured per step.
void BM_EngineStepDecode256(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const bool prefix_caching = state.range(1) != 0;
  const bool detokenize = state.range(2) != 0;
  EngineArgs args;
  args.max_num_seqs = num_seqs;
  args.enable_prefix_caching = prefix_caching;
  auto runner = std::make_unique<NullRunner>(num_seqs * 2000 / 16 + 64, 16);
  io::GenerationConfig gen;
  gen.eos_token_ids = {257};
  EngineCore core(args, std::move(runner), tok::Tokenizer::byte_level_demo(), gen, "null");
  SamplingParams params;
  params.max_tokens = 1800;
  params.ignore_eos = true;
  params.detokenize = detokenize;
  if (detokenize) params.stop = {"never-seen-stop"};
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<int32_t> prompt(128);
    for (int k = 0; k < 128; ++k) prompt[static_cast<size_t>(k)] = 32 + (i * 7 + k) % 90;
    core.add_request("r" + std::to_string(i), PromptInput::from_ids(prompt), params, {}, /*stream_deltas=*/true);
  }
  // Warm up past the prefills so every measured step is 256 decodes.
  for (int i = 0; i < 40; ++i) core.step();
  size_t num_outputs = 0;
  for (auto _ : state) {
    auto outputs = core.step();
    num_outputs += outputs.size();
    benchmark::DoNotOptimize(outputs);
  }
  state.counters["outputs/step"] = static_cast<double>(num_outputs) / static_cast<double>(state.iterations());
  state.counters["running"] = core.counters().num_running;
}
// Args: running sequences, prefix caching, detokenize + stop strings.
BENCHMARK(BM_EngineStepDecode256)
    ->Args({256, 1, 1})
    ->Args({256, 0, 1})
    ->Args({256, 1, 0})
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(1500);

}  // namespace
}  // namespace pagellm

BENCHMARK_MAIN();
