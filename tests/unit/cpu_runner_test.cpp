// CpuRunner's SchedulerOutput contract: sampling rows, prompt logprobs, copy-on-write block copies,
// KV pool sizing, and load_model's demo and dummy paths.
#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "common/error.h"
#include "cpu_test_util.h"
#include "model_files_util.h"
#include "runner/model_loader.h"

namespace pagellm {
namespace {

using testing::make_batch;
using testing::TestSeq;

const std::filesystem::path kStories =
    std::filesystem::path(PAGELLM_SHARED_DIR) / "models/stories260K";

runner::LoadedModel load(const std::string& model, int num_kv_blocks = 32, int block_size = 4) {
  EngineArgs args;
  args.model = model;
  args.num_kv_blocks = num_kv_blocks;
  args.block_size = block_size;
  return runner::load_model(args);
}

runner::CpuRunner& cpu(runner::LoadedModel& m) {
  return dynamic_cast<runner::CpuRunner&>(*m.runner);
}

const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378, 426, 261, 275};

TEST(CpuRunner, GreedyExecuteMatchesArgmaxAndPromptLogprobs) {
  if (!std::filesystem::exists(kStories / "model.safetensors")) GTEST_SKIP();
  auto m = load(kStories.string());
  SamplingParams params;
  params.temperature = 0.0f;
  params.prompt_logprobs = 2;
  TestSeq seq(0, 8, kPrompt);
  // Prefill in two chunks (5 + 3): prompt logprobs come for positions 0..6, the sample from
  // position 7.
  std::vector<TokenLogprobs> prompt_lps;
  for (int chunk : {5, 3}) {
    engine::ScheduledSeq s = seq.schedule(chunk);
    s.params = &params;
    s.prompt_logprobs = 2;
    s.prompt_token_ids = kPrompt;
    const auto out = m.runner->execute(make_batch({s}));
    ASSERT_EQ(out.sampled_token_ids.size(), 1u);
    for (const auto& lp : out.prompt_logprobs[0]) prompt_lps.push_back(lp);
    seq.num_computed += static_cast<int32_t>(s.token_ids.size());
    if (chunk == 5) {
      EXPECT_EQ(out.sampled_token_ids[0], -1);
      EXPECT_FALSE(out.sampled_logprobs[0].has_value());
      continue;
    }
    // Same prefix again through execute_logits (fresh blocks) gives the argmax that execute
    // sampled.
    TestSeq again(1, 8, kPrompt);
    const auto logits = cpu(m).execute_logits(make_batch({again.schedule()}));
    EXPECT_EQ(out.sampled_token_ids[0], testing::argmax(logits[0]));
    ASSERT_TRUE(out.sampled_logprobs[0].has_value());
    EXPECT_EQ(out.sampled_logprobs[0]->token_id, out.sampled_token_ids[0]);
    EXPECT_LE(out.sampled_logprobs[0]->logprob, 0.0f);
  }
  ASSERT_EQ(prompt_lps.size(), kPrompt.size() - 1);
  for (size_t i = 0; i < prompt_lps.size(); ++i) {
    EXPECT_EQ(prompt_lps[i].token_id, kPrompt[i + 1]);
    EXPECT_EQ(prompt_lps[i].top.size(), 2u);
    EXPECT_LE(prompt_lps[i].logprob, 0.0f);
  }
}

// A greedy chain (the draft model's steps) gives per seq the tokens that greedy execute() gives
// one step at a time: seqs with different step counts, a prefill and a 2-token catch-up step.
TEST(CpuRunner, GreedyChainMatchesStepwiseGreedyExecute) {
  if (!std::filesystem::exists(kStories / "model.safetensors")) GTEST_SKIP();
  auto m = load(kStories.string(), 64);
  SamplingParams params;
  params.temperature = 0.0f;
  const std::vector<int> steps = {4, 1, 3};
  auto make_seqs = [&] {
    std::vector<TestSeq> seqs = {TestSeq(0, 8, kPrompt), TestSeq(1, 8, {1, 403, 407}),
                                 TestSeq(2, 8, {1, 275, 261, 378, 426})};
    seqs[2].num_computed = 3;  // tokens 3 and 4 are new: a catch-up step
    return seqs;
  };
  // Reference: seq 2's first 3 tokens' KV, then greedy execute() step by step.
  std::vector<TestSeq> ref = make_seqs();
  ref[2].num_computed = 0;
  m.runner->execute_logits(make_batch({ref[2].schedule(3)}));
  ref[2].num_computed = 3;
  std::vector<std::vector<int32_t>> want(3);
  for (int j = 0; j < 4; ++j) {
    std::vector<engine::ScheduledSeq> batch;
    std::vector<size_t> owner;
    for (size_t i = 0; i < 3; ++i) {
      if (j >= steps[i]) continue;
      batch.push_back(ref[i].schedule());
      batch.back().params = &params;
      owner.push_back(i);
    }
    const auto out = m.runner->execute(make_batch(batch));
    for (size_t b = 0; b < owner.size(); ++b) {
      TestSeq& t = ref[owner[b]];
      t.num_computed = static_cast<int32_t>(t.tokens.size());
      t.tokens.push_back(out.sampled_token_ids[b]);
      want[owner[b]].push_back(out.sampled_token_ids[b]);
    }
  }
  // The chain, on blocks of its own (seq ids 3..5), with the same first 3 tokens of seq 2 cached.
  std::vector<TestSeq> seqs = make_seqs();
  std::vector<engine::ScheduledSeq> first;
  for (size_t i = 0; i < 3; ++i) {
    seqs[i] = TestSeq(int64_t(i) + 3, 8, seqs[i].tokens);
    if (i == 2) {
      m.runner->execute_logits(make_batch({seqs[2].schedule(3)}));
      seqs[2].num_computed = 3;
    }
    first.push_back(seqs[i].schedule());
    first.back().params = &params;
  }
  EXPECT_EQ(m.runner->execute_greedy_chain(make_batch(first), steps), want);
  // Bad chains: a count per seq, each >= 1, on sampled rows.
  EXPECT_THROW(m.runner->execute_greedy_chain(make_batch(first), std::vector<int>{1, 1}), Error);
  EXPECT_THROW(m.runner->execute_greedy_chain(make_batch(first), std::vector<int>{1, 0, 1}), Error);
  first[1].needs_sample = false;
  EXPECT_THROW(m.runner->execute_greedy_chain(make_batch(first), std::vector<int>{1, 1, 1}), Error);
}

// Masks may be built while the forward pass runs (EngineCore's MaskBuilder): the runner waits on
// the batch's fence before it samples, and samples from the mask as it stands then.
TEST(CpuRunner, WaitsForPendingMasksBeforeSampling) {
  if (!std::filesystem::exists(kStories / "model.safetensors")) GTEST_SKIP();
  auto m = load(kStories.string());
  SamplingParams params;
  params.temperature = 0.0f;
  const int32_t vocab = static_cast<int32_t>(m.runner->config().vocab_size);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab + 31) / 32, 0u);  // nothing allowed yet
  struct Fence : engine::MaskFence {
    std::vector<uint32_t>* mask;
    mutable int num_waits = 0;
    void wait() const override {  // the mask is "built" now: only token 300 allowed
      ++num_waits;
      (*mask)[300 / 32] = 1u << (300 % 32);
    }
  } fence;
  fence.mask = &mask;
  TestSeq seq(0, 8, kPrompt);
  engine::ScheduledSeq s = seq.schedule();
  s.params = &params;
  s.allowed_token_mask = mask;
  engine::SchedulerOutput batch = make_batch({s});
  batch.pending_masks = &fence;
  const auto out = m.runner->execute(batch);
  EXPECT_EQ(fence.num_waits, 1);
  EXPECT_EQ(out.sampled_token_ids[0], 300);
}

TEST(CpuRunner, CopyOnWriteBlocksCarryTheCachedPrefix) {
  if (!std::filesystem::exists(kStories / "model.safetensors")) GTEST_SKIP();
  auto m = load(kStories.string(), 16, 4);
  auto& runner = cpu(m);
  TestSeq a(0, 2, kPrompt);  // blocks 0, 1 hold all 8 positions
  const auto solo = runner.execute_logits(make_batch({a.schedule()}))[0];
  // Seq b reuses a's prefix through copies of its blocks (5 <- 0, 6 <- 1) and computes only the
  // last token, as after a prefix-cache hit on a block it must write to.
  TestSeq b(0, 2, kPrompt);
  b.block_table = {5, 6};
  b.num_computed = static_cast<int32_t>(kPrompt.size()) - 1;
  auto batch = make_batch({b.schedule()});
  batch.blocks_to_copy = {{0, 5}, {1, 6}};
  EXPECT_EQ(runner.execute_logits(batch)[0], solo);
  // Without the copy, blocks 5/6 hold nothing useful and the logits differ.
  TestSeq c(0, 2, kPrompt);
  c.block_table = {9, 10};
  c.num_computed = b.num_computed;
  EXPECT_NE(runner.execute_logits(make_batch({c.schedule()}))[0], solo);
}

// All layers' K and V of one device block, [num_layers, 2, block_size, kv_heads, head_dim].
std::vector<float> device_block(runner::CpuRunner& r, int block) {
  const io::ModelConfig& c = r.config();
  const size_t n = static_cast<size_t>(r.block_size() * c.num_key_value_heads * c.head_dim);
  std::vector<float> out;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const cpu::KvLayerView v = r.kv_cache().layer(l);
    out.insert(out.end(), v.k + block * n, v.k + (block + 1) * n);
    out.insert(out.end(), v.v + block * n, v.v + (block + 1) * n);
  }
  return out;
}

TEST(CpuRunner, SwapOutAndInCarryTheKvBlocks) {
  if (!std::filesystem::exists(kStories / "model.safetensors")) GTEST_SKIP();
  EngineArgs args;
  args.model = kStories.string();
  args.num_kv_blocks = 16;
  args.block_size = 4;
  const io::ModelConfig config = io::load_model_config(kStories);
  args.swap_space_gib =
      8.5 * static_cast<double>(runner::CpuRunner::kv_bytes_per_block(config, 4)) / 1073741824.0;
  auto m = runner::load_model(args);
  auto& runner = cpu(m);
  ASSERT_EQ(runner.num_swap_blocks(), 8);  // floor(8.5 blocks)
  TestSeq a(0, 2, kPrompt);  // blocks 0, 1 hold all 8 positions
  const auto solo = runner.execute_logits(make_batch({a.schedule()}))[0];
  const std::vector<float> block0 = device_block(runner, 0), block1 = device_block(runner, 1);
  // A step that only moves blocks: swap both out.
  engine::SchedulerOutput out;
  out.blocks_to_swap_out = {{0, 3}, {1, 7}};
  EXPECT_TRUE(runner.execute(out).sampled_token_ids.empty());
  const auto host3 = runner.swap_block(3), host7 = runner.swap_block(7);
  EXPECT_EQ(std::vector<float>(host3.begin(), host3.end()), block0);
  EXPECT_EQ(std::vector<float>(host7.begin(), host7.end()), block1);
  // Another prompt overwrites the device blocks.
  TestSeq other(0, 2, {1, 300, 301, 302, 303, 304, 305, 306});
  runner.execute_logits(make_batch({other.schedule()}));
  ASSERT_NE(device_block(runner, 0), block0);
  // Swap in elsewhere (5 <- 3, 6 <- 7) in the step that computes the last token from them.
  TestSeq b(0, 2, kPrompt);
  b.block_table = {5, 6};
  b.num_computed = static_cast<int32_t>(kPrompt.size()) - 1;
  auto batch = make_batch({b.schedule()});
  batch.blocks_to_swap_in = {{3, 5}, {7, 6}};
  EXPECT_EQ(runner.execute_logits(batch)[0], solo);
  EXPECT_EQ(device_block(runner, 5), block0);
  // Within one step a swap-out precedes a swap-in through the same host block.
  engine::SchedulerOutput through;
  through.blocks_to_swap_out = {{5, 0}};
  through.blocks_to_swap_in = {{0, 9}};
  runner.execute(through);
  EXPECT_EQ(device_block(runner, 9), block0);
  // Invalid ids are internal errors and move nothing.
  const std::vector<std::pair<int32_t, int32_t>> bad_pairs = {{16, 0}, {0, 8}, {-1, 0}, {0, -1}};
  for (const auto& bad : bad_pairs) {
    engine::SchedulerOutput o;
    o.blocks_to_swap_out = {{5, 1}, bad};
    try {
      runner.execute(o);
      ADD_FAILURE() << "swap-out " << bad.first << " -> " << bad.second << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal);
    }
    engine::SchedulerOutput i;
    i.blocks_to_swap_in = {{bad.second, bad.first}};
    EXPECT_THROW(runner.execute(i), Error);
  }
  EXPECT_NE(std::vector<float>(runner.swap_block(1).begin(), runner.swap_block(1).end()), block0);
}

TEST(ModelLoader, SwapSpaceIsValidatedAndFitsInMemory) {
  EngineArgs args;  // demo model
  args.swap_space_gib = -1;
  EXPECT_THROW(runner::load_model(args), Error);
  args.swap_space_gib = 1e9;  // an exabyte of host swap
  try {
    runner::load_model(args);
    ADD_FAILURE() << "1e9 GiB of swap space was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
  }
  args.swap_space_gib = 0;
  EXPECT_EQ(runner::load_model(args).runner->num_swap_blocks(), 0);
}

TEST(CpuRunner, RejectsBadBatches) {
  auto m = load("");
  auto& runner = cpu(m);
  TestSeq seq(0, 2, {1, 2, 3});
  auto swap = make_batch({seq.schedule()});
  swap.blocks_to_swap_out = {{0, 0}};
  EXPECT_THROW(runner.execute_logits(swap), Error);
  TestSeq bad_token(0, 2, {1, 9999});
  EXPECT_THROW(runner.execute_logits(make_batch({bad_token.schedule()})), Error);
  TestSeq short_table(0, 1, std::vector<int32_t>(5, 3));  // 5 tokens, one block of 4
  EXPECT_THROW(runner.execute_logits(make_batch({short_table.schedule()})), Error);
  auto copy = make_batch({seq.schedule()});
  copy.blocks_to_copy = {{0, 1000}};
  EXPECT_THROW(runner.execute_logits(copy), Error);
}

TEST(ModelLoader, DemoModelIsSeededAndSized) {
  const io::ModelConfig demo = runner::demo_model_config();
  EXPECT_EQ(demo.vocab_size, 258);
  EXPECT_EQ(demo.bos_token_id, 256);
  EXPECT_EQ(demo.eos_token_ids, (std::vector<int64_t>{257}));
  EngineArgs args;
  args.num_kv_blocks = 8;
  auto a = runner::load_model(args);
  auto b = runner::load_model(args);
  args.seed = 42;
  auto c = runner::load_model(args);
  EXPECT_EQ(a.name, "demo");
  EXPECT_EQ(a.generation_config.eos_token_ids, (std::vector<int64_t>{257}));
  const std::vector<int32_t> prompt = {256, 72, 105};
  const auto la = cpu(a).execute_logits(make_batch({TestSeq(0, 2, prompt).schedule()}))[0];
  const auto lb = cpu(b).execute_logits(make_batch({TestSeq(0, 2, prompt).schedule()}))[0];
  const auto lc = cpu(c).execute_logits(make_batch({TestSeq(0, 2, prompt).schedule()}))[0];
  ASSERT_EQ(la.size(), 258u);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la, lc);
  for (float v : la) EXPECT_TRUE(std::isfinite(v));
}

TEST(ModelLoader, KvPoolFromMemoryAndDummyWeights) {
  if (!std::filesystem::exists(kStories / "config.json")) GTEST_SKIP();
  EngineArgs args;
  args.model = kStories.string();
  args.load_format = "dummy";
  args.kv_cache_memory_gib = 0.001;
  auto m = runner::load_model(args);
  // stories260K: 2 (K, V) * 5 layers * 16 tokens * 4 kv heads * 8 dims * 4 bytes = 20480 bytes a
  // block.
  EXPECT_EQ(runner::CpuRunner::kv_bytes_per_block(m.config, 16), 20480);
  EXPECT_EQ(m.runner->num_kv_blocks(), static_cast<int>(0.001 * 1073741824.0 / 20480));
  EXPECT_EQ(m.runner->block_size(), 16);
  auto logits = cpu(m).execute_logits(make_batch({TestSeq(0, 2, {1, 2}).schedule()}))[0];
  EXPECT_EQ(logits.size(), 512u);
  args.load_format = "gguf";
  EXPECT_THROW(runner::load_model(args), Error);
  args.load_format = "auto";
  args.kv_cache_memory_gib = 1e-9;  // not even one block
  EXPECT_THROW(runner::load_model(args), Error);
}

// bf16 and f16 checkpoints (odd data offsets included: the header length is arbitrary) load to
// the same fp32 weights as an f32 checkpoint of the rounded values.
TEST(ModelLoader, HalfPrecisionCheckpointsConvertExactly) {
  testing::SafetensorsBuilder source;
  testing::add_tiny_llama_tensors(source);
  testing::SafetensorsBuilder bf16, f16, bf16_ref, f16_ref;
  bf16.header["__metadata__"] = {{"format", "pt"}, {"pad", "x"}};  // shifts the data start
  for (const auto& [name, entry] : source.header.items()) {
    const auto shape = entry["shape"].get<std::vector<int64_t>>();
    const size_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    std::vector<float> v((end - begin) / 4), vb, vh;
    std::memcpy(v.data(), source.data.data() + begin, end - begin);
    for (float x : v) {
      vb.push_back(bf16_to_f32(f32_to_bf16(x)));
      vh.push_back(f16_to_f32(f32_to_f16(x)));
    }
    bf16.add_bf16(name, shape, vb);
    f16.add_f16(name, shape, vh);
    bf16_ref.add_f32_values(name, shape, vb);
    f16_ref.add_f32_values(name, shape, vh);
  }
  testing::TempDir tmp;
  auto logits_of = [&](const std::string& sub, const testing::SafetensorsBuilder& b) {
    const auto dir = tmp.path() / sub;
    testing::write_tiny_llama(dir);
    testing::write_file(dir / "model.safetensors", b.bytes());
    auto m = load(dir.string());
    return cpu(m).execute_logits(make_batch({TestSeq(0, 2, {1, 5, 9}).schedule()}))[0];
  };
  const auto want_bf16 = logits_of("bf16_ref", bf16_ref);
  EXPECT_EQ(logits_of("bf16", bf16), want_bf16);
  EXPECT_EQ(logits_of("f16", f16), logits_of("f16_ref", f16_ref));
  EXPECT_NE(want_bf16, logits_of("f16_ref", f16_ref));  // the rounding differs, so the check bites
}

TEST(ModelLoader, RefusesConfigsLargerThanMemory) {
  testing::TempDir tmp;
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}},
                      {"vocab_size", 1 << 24},
                      {"hidden_size", 1 << 20},
                      {"intermediate_size", 1 << 20},
                      {"num_hidden_layers", 4096},
                      {"num_attention_heads", 4096},
                      {"max_position_embeddings", 4096}};
  std::ofstream(tmp.path() / "config.json") << c.dump();
  EngineArgs args;
  args.model = tmp.path().string();
  args.load_format = "dummy";
  args.num_kv_blocks = 1;
  try {
    runner::load_model(args);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagellm
