// `bench throughput`'s lower bound (cli/throughput_bound.h) on a model small enough to count by
// hand: the demo model's shapes (hidden 64, 4 heads of 16, 2 KV heads, intermediate 176, 2 layers,
// vocabulary 258), one request of 10 prompt and 5 output tokens.
#include "cli/throughput_bound.h"

#include <gtest/gtest.h>

#include "runner/model_loader.h"

namespace pagellm::cli {
namespace {

runner::DeviceCeilings ceilings() {
  runner::DeviceCeilings c;
  c.copy_gbps = 100;    // 1e11 B/s
  c.gemm_tflops = 1.0;  // 1e12 FLOP/s
  return c;
}

TEST(ThroughputBound, CountsPrefillFlopsAndDecodeBytes) {
  const io::ModelConfig c = runner::demo_model_config();
  BoundInputs in;
  in.requests = {{10, 5}};
  const ThroughputBound b = throughput_bound(c, in, ceilings());
  // Per token and layer: q/k/v 64 x 8 x 16, o 64 x 64, gate/up/down 3 x 64 x 176 = 46,080.
  // Prefill: 2 x 92,160 x 10 tokens, one LM-head row 2 x 258 x 64, attention 4 x 4 heads x 16 x
  // (1 + ... + 10) per layer.
  EXPECT_DOUBLE_EQ(b.prefill_flop, 2.0 * 92160 * 10 + 2.0 * 16512 + 2 * 4.0 * 4 * 16 * 55);
  // 4 tokens after the first, a step each, of every weight and the LM head in 2 bytes.
  EXPECT_DOUBLE_EQ(b.decode_steps, 4);
  EXPECT_DOUBLE_EQ(b.step_bytes, (92160.0 + 16512) * 2);
  // K and V rows of 2 heads x 16 in 2 bytes, for 11 + 12 + 13 + 14 keys, in both layers.
  EXPECT_DOUBLE_EQ(b.kv_read_bytes, 128.0 * 50 * 2);
  EXPECT_DOUBLE_EQ(b.prefill_seconds, b.prefill_flop / 1e12);
  EXPECT_DOUBLE_EQ(b.decode_seconds, (4 * b.step_bytes + b.kv_read_bytes) / 1e11);
  const std::string line = describe_bound(b, ceilings(), 2 * b.seconds());
  EXPECT_NE(line.find("this run took 2.00x the bound"), std::string::npos) << line;
}

TEST(ThroughputBound, Fp8ProjectionsTakeOneByteAndTheFp8Rate) {
  const io::ModelConfig c = runner::demo_model_config();
  BoundInputs in;
  in.requests = {{10, 5}};
  in.fp8_projections = true;
  runner::DeviceCeilings fast = ceilings();
  fast.fp8_gemm_tflops = 2.0;
  const ThroughputBound b = throughput_bound(c, in, fast);
  // The same FLOPs as in 16 bits; the projections' part at the FP8 rate, the LM-head row and the
  // attention at the 16-bit one.
  const double projections = 2.0 * 92160 * 10, rest = 2.0 * 16512 + 2 * 4.0 * 4 * 16 * 55;
  EXPECT_DOUBLE_EQ(b.prefill_flop, projections + rest);
  EXPECT_DOUBLE_EQ(b.prefill_fp8_flop, projections);
  EXPECT_DOUBLE_EQ(b.prefill_seconds, projections / 2e12 + rest / 1e12);
  // A step reads the projections in 1 byte and the LM head in 2; the K/V bytes do not change.
  EXPECT_DOUBLE_EQ(b.step_bytes, 92160.0 + 16512 * 2);
  EXPECT_DOUBLE_EQ(b.kv_read_bytes, 128.0 * 50 * 2);
  const std::string line = describe_bound(b, fast, b.seconds());
  EXPECT_NE(line.find("0.00 TFLOP of FP8 projections at 2.0 TFLOP/s + "), std::string::npos)
      << line;
  EXPECT_NE(line.find("this run took 1.00x the bound"), std::string::npos) << line;
  // 16-bit weights name no FP8 part.
  in.fp8_projections = false;
  EXPECT_EQ(describe_bound(throughput_bound(c, in, fast), fast, 1.0).find("FP8"),
            std::string::npos);
}

TEST(ThroughputBound, WindowsStepsAndMixtureOfExperts) {
  io::ModelConfig c = runner::demo_model_config();
  c.sliding_window = 12;
  c.sliding_layer = {true, false};
  BoundInputs in;
  in.requests = {{10, 5}, {30, 1}, {20, 3}};
  in.max_num_seqs = 2;
  const ThroughputBound b = throughput_bound(c, in, ceilings());
  // Generated tokens after each request's first: 4 + 0 + 2 = 6, two per step, but the first
  // request's 4 take a step each.
  EXPECT_DOUBLE_EQ(b.decode_steps, 4);
  in.max_num_seqs = 1;  // then one token per step: 6
  EXPECT_DOUBLE_EQ(throughput_bound(c, in, ceilings()).decode_steps, 6);
  // Layer 0 attends at most 12 keys: 11 + 12 + 12 + 12 for the first request, 12 + 12 for the
  // third; layer 1 all of them: 11 + ... + 14 and 21 + 22.
  EXPECT_DOUBLE_EQ(b.kv_read_bytes, 128.0 * ((47 + 24) + (50 + 43)));
  // Layer 0's prompts attend 1 .. 12 keys, then 12 for each later position.
  const double attn0 = 4.0 * 4 * 16, layer0_keys = 55 + (78 + 12 * 18) + (78 + 12 * 8);
  const double layer1_keys = 55 + 465 + 210;
  EXPECT_DOUBLE_EQ(b.prefill_flop,
                   2.0 * 92160 * 60 + 3 * 2.0 * 16512 + attn0 * (layer0_keys + layer1_keys));

  // A mixture of experts: a token (and a decode step, at least) passes top_k of the experts.
  io::ModelConfig moe = runner::demo_model_config();
  moe.moe.num_experts = 8;
  moe.moe.top_k = 2;
  moe.moe.intermediate_size = 32;
  moe.moe.dense_layer = {false, true};
  in.requests = {{10, 2}};
  const ThroughputBound m = throughput_bound(moe, in, ceilings());
  const double attn = 12288, sparse = attn + 64 * 8 + 2 * 3 * 64 * 32, dense = 46080;
  EXPECT_DOUBLE_EQ(m.step_bytes, (sparse + dense + 16512) * 2);
}

}  // namespace
}  // namespace pagellm::cli
