// Tensor and pipeline parallelism on the CPU backend: the in-process communicator group, shard
// geometry and its errors, weight-plan slices, and greedy generation with TP / PP / TP x PP against
// the single-rank model on real trained checkpoints.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include <unistd.h>

#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/engine_core.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "pagellm/llm.h"
#include "parallel/shard.h"
#include "parallel/step_watchdog.h"
#include "parallel/thread_group.h"
#include "parallel_greedy.h"
#include "runner/model_loader.h"
#include "sanitized.h"

namespace pagellm {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kModels = std::filesystem::path(PAGELLM_SHARED_DIR) / "models";

// Runs fn(rank) on one thread per rank and returns each rank's error message ("" when none).
template <typename Fn>
std::vector<std::string> on_ranks(int n, Fn fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(ThreadGroup, AllReduceSumsInRankOrderWithIdenticalBits) {
  const int n = 3;
  auto group = parallel::ThreadGroup::create(n);
  std::vector<std::vector<float>> data(n);
  on_ranks(n, [&](int r) {
    auto comm = group->communicator(r);
    data[size_t(r)] = {1e8f * float(r == 0), 1.0f, float(r) * 0.1f, -float(r)};
    for (int round = 0; round < 2; ++round)  // back-to-back collectives reuse the group
      comm->all_reduce_sum(data[size_t(r)].data(), 4, DType::kF32, nullptr);
  });
  // Round 1: (1e8 + 1) + 1 rounds to 1e8 in fp32 order 0,1,2; round 2 triples it.
  const float first = (0.0f + 1e8f) + 0.0f + 0.0f;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(data[size_t(r)], data[0]);
    EXPECT_FLOAT_EQ(data[size_t(r)][1], 9.0f);
    EXPECT_FLOAT_EQ(data[size_t(r)][3], -9.0f);
  }
  EXPECT_EQ(data[0][0], (first + first) + first);
}

TEST(ThreadGroup, AllGatherAndPointToPoint) {
  auto group = parallel::ThreadGroup::create(2);
  std::vector<std::vector<float>> gathered(2, std::vector<float>(4));
  std::vector<float> received(3);
  const auto errors = on_ranks(2, [&](int r) {
    auto comm = group->communicator(r);
    const float mine[2] = {float(r), float(10 + r)};
    comm->all_gather(mine, gathered[size_t(r)].data(), 2, DType::kF32, nullptr);
    const float msg[3] = {7, 8, 9};
    if (r == 0) comm->send(msg, 3, DType::kF32, 1, nullptr);
    if (r == 1) comm->recv(received.data(), 3, DType::kF32, 0, nullptr);
  });
  EXPECT_EQ(errors, std::vector<std::string>(2));
  EXPECT_EQ(gathered[0], (std::vector<float>{0, 10, 1, 11}));
  EXPECT_EQ(gathered[1], gathered[0]);
  EXPECT_EQ(received, (std::vector<float>{7, 8, 9}));
}

TEST(ThreadGroup, MissingPeerTimesOutInsteadOfHanging) {
  auto group = parallel::ThreadGroup::create(2, 200ms);
  auto comm = group->communicator(0);
  float x = 1;
  const auto start = std::chrono::steady_clock::now();
  try {
    comm->all_reduce_sum(&x, 1, DType::kF32, nullptr);
    FAIL() << "expected a timeout";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stopped answering"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // The group stays failed: the other rank fails at once too.
  auto other = group->communicator(1);
  EXPECT_THROW(other->recv(&x, 1, DType::kF32, 0, nullptr), Error);
}

TEST(ThreadGroup, AbortReachesRanksWaitingInSubgroups) {
  auto world = parallel::ThreadGroup::create(2, 30s);
  auto stage = world->subgroup(2);
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    world->abort("rank 1 failed: boom");
  });
  float x = 0;
  EXPECT_THROW(stage->communicator(0)->all_reduce_sum(&x, 1, DType::kF32, nullptr), Error);
  aborter.join();
}

io::ModelConfig config_with(int64_t heads, int64_t kv, int64_t inter, int64_t layers) {
  io::ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = 37;
  c.hidden_size = 16;
  c.intermediate_size = inter;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  return c;
}

TEST(ShardGeometry, BadSplitsNameTheConfigField) {
  auto message = [](const io::ModelConfig& c, int tp, int pp) {
    try {
      parallel::check_parallel_config(c, tp, pp);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(config_with(6, 2, 8, 2), 4, 1).find("num_attention_heads (6)"), std::string::npos);
  EXPECT_NE(message(config_with(12, 3, 8, 2), 2, 1).find("num_key_value_heads (3)"), std::string::npos);
  EXPECT_NE(message(config_with(4, 2, 6, 2), 4, 1).find("intermediate_size (6)"), std::string::npos);
  EXPECT_NE(message(config_with(4, 2, 8, 2), 1, 3).find("num_hidden_layers (2)"), std::string::npos);
  EXPECT_NE(message(config_with(4, 2, 8, 2), 0, 1).find("at least 1"), std::string::npos);
  EXPECT_EQ(message(config_with(8, 2, 8, 3), 8, 3), "");
}

TEST(ShardGeometry, ReplicatesKvHeadsWhenFewerThanRanksAndSplitsLayersEvenly) {
  const io::ModelConfig c = config_with(8, 2, 8, 5);
  for (int r = 0; r < 4; ++r) {
    const auto g = parallel::shard_geometry(c, {r, 4, 0, 1});
    EXPECT_EQ(g.num_q_heads, 2);
    EXPECT_EQ(g.num_kv_heads, 1);
    // q heads 2r, 2r + 1 read KV head (2r) / 4 under GQA 4.
    EXPECT_EQ(g.kv_head_begin, (2 * r) / 4);
    EXPECT_EQ(g.vocab_shard, 10);
    EXPECT_EQ(g.vocab, r < 3 ? 10 : 7);
  }
  std::vector<int64_t> begins;
  for (int p = 0; p < 3; ++p) begins.push_back(parallel::shard_geometry(c, {0, 1, p, 3}).layer_begin);
  EXPECT_EQ(begins, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(parallel::shard_geometry(c, {0, 1, 2, 3}).layer_end, 5);
}

// A rank's dummy weights are exactly the slices of the whole model's.
TEST(WeightPlanShards, RankSlicesEqualTheFullModelsRowsAndColumns) {
  io::ModelConfig c = config_with(4, 2, 8, 2);
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  const models::LlamaWeights full = models::random_llama_weights(c, 3);
  for (int r = 0; r < 2; ++r) {
    const models::LlamaWeights part = models::random_llama_weights(c, 3, {r, 2, 0, 1});
    const int64_t hidden = 16, hd = 4;
    // qkv rows: q heads [2r, 2r+2), k head r, v head r.
    const auto& fq = full.layers[1].qkv;
    const auto& pq = part.layers[1].qkv;
    ASSERT_EQ(pq.size(), size_t((2 + 1 + 1) * hd * hidden));
    auto rows_equal = [&](int64_t part_row, int64_t full_row, int64_t count) {
      return std::equal(pq.begin() + part_row * hidden, pq.begin() + (part_row + count) * hidden,
                        fq.begin() + full_row * hidden);
    };
    EXPECT_TRUE(rows_equal(0, 2 * r * hd, 2 * hd));
    EXPECT_TRUE(rows_equal(2 * hd, (4 + r) * hd, hd));
    EXPECT_TRUE(rows_equal(3 * hd, (6 + r) * hd, hd));
    // o_proj [hidden, 16] columns [8r, 8r + 8).
    for (int64_t row = 0; row < hidden; ++row)
      for (int64_t col = 0; col < 8; ++col)
        ASSERT_EQ(part.layers[0].o_proj[size_t(row * 8 + col)],
                  full.layers[0].o_proj[size_t(row * 16 + 8 * r + col)]);
    EXPECT_EQ(part.embed.size(), size_t(19 - r) * hidden);  // vocab 37: shards of 19 and 18
  }
  // The last of two stages holds the tied LM head, the first the embedding.
  const auto stage1 = models::random_llama_weights(c, 3, {0, 1, 1, 2});
  EXPECT_TRUE(stage1.embed.empty());
  EXPECT_EQ(stage1.lm_head, full.embed);
  EXPECT_EQ(stage1.layers.size(), 1u);
  EXPECT_EQ(stage1.layers[0].down, full.layers[1].down);
}

// Greedy continuations of `prompts` with tp x pp ranks, with the top-2 logprobs of every step.
std::vector<RequestOutput> greedy(const std::string& model, int tp, int pp,
                                  const std::vector<PromptInput>& prompts, int max_tokens) {
  return testing::parallel_greedy(model, tp, pp, prompts, max_tokens, 0.25, 2);
}

// Same greedy tokens as the reference, or the logprob-closeness rule: at the first difference the
// reference's top two candidates are within 0.05 nats (a near-tie that fp32 reduction order may
// split), after which the continuations are no longer comparable.
void expect_same_greedy(const std::vector<RequestOutput>& ref, const std::vector<RequestOutput>& got,
                        const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  int near_ties = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const CompletionOutput& a = ref[i].outputs.at(0);
    const CompletionOutput& b = got[i].outputs.at(0);
    ASSERT_EQ(a.token_ids.size(), b.token_ids.size());
    for (size_t t = 0; t < a.token_ids.size(); ++t) {
      if (a.token_ids[t] == b.token_ids[t]) continue;
      const auto& top = a.logprobs.at(t).top;
      ASSERT_GE(top.size(), 2u);
      EXPECT_LT(top[0].second - top[1].second, 0.05f)
          << what << ": prompt " << i << " differs at token " << t << " with a clear argmax";
      ++near_ties;
      break;
    }
  }
  EXPECT_LE(near_ties, int(ref.size()) / 4) << what;
}

std::vector<PromptInput> python_prompts() {
  std::vector<std::string> texts = {
      "def parse_args(argv):\n",
      "class Config:\n    def __init__(self, path):\n",
      "import os\nimport sys\n\n\ndef main():\n",
      "def fibonacci(n):\n    if n < 2:\n",
      "for i in range(10):\n    print(",
      "with open(filename) as f:\n    for line in f:\n",
      "try:\n    import numpy as np\nexcept ImportError:\n",
      "def __repr__(self):\n        return",
  };
  std::vector<PromptInput> out;
  for (auto& t : texts) out.push_back(PromptInput::from_text(t));
  return out;
}

TEST(TensorParallelCpu, PycodeTp2Pp2AndTp2xPp2MatchOneRank) {
  const auto model = kModels / "pycode-25M";
  if (!std::filesystem::exists(model / "config.json")) GTEST_SKIP();
  auto prompts = python_prompts();
  const int tokens = testing::kSanitized ? 12 : 64;
  if (testing::kSanitized) prompts.erase(prompts.begin() + 2, prompts.end());
  const auto ref = greedy(model.string(), 1, 1, prompts, tokens);
  expect_same_greedy(ref, greedy(model.string(), 2, 1, prompts, tokens), "TP=2");
  expect_same_greedy(ref, greedy(model.string(), 1, 2, prompts, tokens), "PP=2");
  expect_same_greedy(ref, greedy(model.string(), 2, 2, prompts, tokens), "TP=2 x PP=2");
}

TEST(TensorParallelCpu, Stories260KTp2AndTp4MatchOneRank) {
  const auto model = kModels / "stories260K";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP();
  std::vector<PromptInput> prompts;
  for (const char* t : {"Once upon a time", "The little dog", "Lily and Tom went", "One day, a"})
    prompts.push_back(PromptInput::from_text(t));
  const auto ref = greedy(model.string(), 1, 1, prompts, 48);
  expect_same_greedy(ref, greedy(model.string(), 2, 1, prompts, 48), "TP=2");
  expect_same_greedy(ref, greedy(model.string(), 4, 1, prompts, 48), "TP=4");
  expect_same_greedy(ref, greedy(model.string(), 4, 3, prompts, 48), "TP=4 x PP=3");
}

// A random Llama whose every split divides by 8 (two KV heads, so TP=8 replicates each one on four
// ranks), with stories260K's tokenizer: the eight-rank layouts of issue 17 (TP=8, TP=4 x PP=2) and
// PP=4, on the CPU communicator. Weights are drawn at a scale that keeps the logits well apart, so
// fp32 reduction order cannot flip an argmax except on a rare near-tie.
std::filesystem::path write_random_eight_way_llama(const std::filesystem::path& dir) {
  nlohmann::json config = testing::tiny_llama_config();
  config["vocab_size"] = 512;
  config["hidden_size"] = 64;
  config["intermediate_size"] = 128;
  config["num_hidden_layers"] = 4;
  config["num_attention_heads"] = 8;
  config["num_key_value_heads"] = 2;
  std::filesystem::create_directories(dir);
  testing::write_file(dir / "config.json", config.dump(2));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(kModels / "stories260K" / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
  std::mt19937 rng(17);
  testing::SafetensorsBuilder b;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
    for (float& x : v) x = shape.size() == 1 ? 1.0f + normal(rng) : normal(rng);
    b.add_f32_values(name, shape, v);
  };
  add("model.embed_tokens.weight", {512, 64}, 1.0f);
  for (int l = 0; l < 4; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {64}, 0.1f);
    add(p + "self_attn.q_proj.weight", {64, 64}, 0.25f);
    add(p + "self_attn.k_proj.weight", {16, 64}, 0.25f);
    add(p + "self_attn.v_proj.weight", {16, 64}, 0.125f);
    add(p + "self_attn.o_proj.weight", {64, 64}, 0.125f);
    add(p + "post_attention_layernorm.weight", {64}, 0.1f);
    add(p + "mlp.gate_proj.weight", {128, 64}, 0.125f);
    add(p + "mlp.up_proj.weight", {128, 64}, 0.125f);
    add(p + "mlp.down_proj.weight", {64, 128}, 0.125f);
  }
  add("model.norm.weight", {64}, 0.1f);
  add("lm_head.weight", {512, 64}, 0.5f);
  testing::write_file(dir / "model.safetensors", b.bytes());
  return dir;
}

TEST(TensorParallelCpu, EightRanksTp8AndTp4xPp2AndPp4MatchOneRank) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("pagellm_eight_way_" + std::to_string(::getpid()));
  const std::string model = write_random_eight_way_llama(dir).string();
  std::vector<PromptInput> prompts;
  for (const char* t : {"Once upon a time", "The little dog", "Lily and Tom went", "One day, a"})
    prompts.push_back(PromptInput::from_text(t));
  const int tokens = testing::kSanitized ? 12 : 32;
  const auto ref = greedy(model, 1, 1, prompts, tokens);
  expect_same_greedy(ref, greedy(model, 8, 1, prompts, tokens), "TP=8");
  expect_same_greedy(ref, greedy(model, 4, 2, prompts, tokens), "TP=4 x PP=2");
  expect_same_greedy(ref, greedy(model, 1, 4, prompts, tokens), "PP=4");
  std::filesystem::remove_all(dir);
}

// Counts the batches a runner has in flight (the engine's batch queue at work).
class CountingRunner : public runner::ModelRunner {
 public:
  explicit CountingRunner(std::unique_ptr<runner::ModelRunner> inner) : inner_(std::move(inner)) {}
  int num_kv_blocks() const override { return inner_->num_kv_blocks(); }
  int num_swap_blocks() const override { return inner_->num_swap_blocks(); }
  int block_size() const override { return inner_->block_size(); }
  const io::ModelConfig& config() const override { return inner_->config(); }
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& b) override { return inner_->execute(b); }
  int max_batches_in_flight() const override { return inner_->max_batches_in_flight(); }
  void submit(const engine::SchedulerOutput& b) override {
    inner_->submit(b);
    max_seen = std::max(max_seen, ++outstanding);
  }
  engine::ModelRunnerOutput wait_next() override {
    --outstanding;
    return inner_->wait_next();
  }
  int outstanding = 0;
  int max_seen = 0;

 private:
  std::unique_ptr<runner::ModelRunner> inner_;
};

// Greedy token ids of every prompt with tp x pp ranks and up to `in_flight` batches in flight
// (EngineArgs::max_batches_in_flight); *max_seen: the most batches that were in flight at once.
std::vector<std::vector<int32_t>> pipelined_greedy(const std::string& model, int tp, int pp,
                                                   int in_flight, const std::vector<PromptInput>& prompts,
                                                   int max_tokens, int* max_seen) {
  EngineArgs args;
  args.model = model;
  args.tensor_parallel_size = tp;
  args.pipeline_parallel_size = pp;
  args.max_batches_in_flight = in_flight;
  args.kv_cache_memory_gib = 0.25;
  args.max_num_batched_tokens = 64;  // prompts are chunked over several batches
  runner::LoadedModel m = runner::load_model(args);
  auto counting = std::make_unique<CountingRunner>(std::move(m.runner));
  CountingRunner* counter = counting.get();
  EngineCore core(args, std::move(counting), tok::Tokenizer::from_dir(model), m.generation_config,
                  m.name);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  for (size_t i = 0; i < prompts.size(); ++i)
    core.add_request(std::to_string(i), prompts[i], p, {}, false);
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (core.has_unfinished())
    for (RequestOutput& o : core.step())
      if (o.finished) out[std::stoul(o.request_id)] = o.outputs.at(0).token_ids;
  *max_seen = counter->max_seen;
  return out;
}

// Batches in flight change which sequences share a batch, never a token: each stage computes the
// same layers in the same order (and the CPU kernels are batch-invariant), so PP=2 and PP=4 with
// one batch per stage in flight give PP=1's exact greedy tokens.
TEST(TensorParallelCpu, PipelineBatchesInFlightMatchOneRankExactly) {
  const auto model = kModels / "pycode-25M";
  if (!std::filesystem::exists(model / "config.json")) GTEST_SKIP();
  auto prompts = python_prompts();
  const int tokens = testing::kSanitized ? 8 : 32;
  if (testing::kSanitized) prompts.resize(4);
  int seen = 0;
  const auto ref = pipelined_greedy(model.string(), 1, 1, 0, prompts, tokens, &seen);
  EXPECT_EQ(seen, 1);
  for (const auto& [tp, pp] : {std::pair{1, 2}, std::pair{1, 4}, std::pair{2, 2}}) {
    const auto got = pipelined_greedy(model.string(), tp, pp, 0, prompts, tokens, &seen);
    EXPECT_EQ(seen, pp) << "TP=" << tp << " x PP=" << pp << ": the pipeline never filled";
    if (tp == 1) {
      EXPECT_EQ(got, ref) << "PP=" << pp;
    } else {
      // TP sums in another order than one rank: the same layout one batch at a time is the
      // reference (its closeness to TP=1 is PycodeTp2Pp2AndTp2xPp2MatchOneRank's).
      EXPECT_EQ(got, pipelined_greedy(model.string(), tp, pp, 1, prompts, tokens, &seen));
      EXPECT_EQ(seen, 1);
    }
  }
  // --max-batches-in-flight 1: one batch at a time through both stages, as before issue 10.
  EXPECT_EQ(pipelined_greedy(model.string(), 1, 2, 1, prompts, tokens, &seen), ref);
  EXPECT_EQ(seen, 1);
}

TEST(TensorParallelCpu, PipelineBatchesOfStories260KMatchOneRank) {
  const auto model = kModels / "stories260K";
  if (!std::filesystem::exists(model / "model.safetensors")) GTEST_SKIP();
  std::vector<PromptInput> prompts;
  for (const char* t : {"Once upon a time", "The little dog", "Lily and Tom went", "One day, a",
                        "The sun was", "Tim had a big"})
    prompts.push_back(PromptInput::from_text(t));
  int seen = 0;
  const auto ref = pipelined_greedy(model.string(), 1, 1, 0, prompts, 40, &seen);
  EXPECT_EQ(pipelined_greedy(model.string(), 1, 2, 0, prompts, 40, &seen), ref);
  EXPECT_EQ(seen, 2);
}

TEST(TensorParallelCpu, BadConfigurationsGetOneLineErrors) {
  const auto model = kModels / "pycode-25M";
  if (!std::filesystem::exists(model / "config.json")) GTEST_SKIP();
  auto error_of = [&](int tp, int pp) {
    EngineArgs args;
    args.model = model.string();
    args.tensor_parallel_size = tp;
    args.pipeline_parallel_size = pp;
    try {
      runner::load_model(args);
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(4, 1).find("num_attention_heads (6) is not divisible"), std::string::npos);
  EXPECT_NE(error_of(1, 9).find("num_hidden_layers (8) has fewer layers than stages"),
            std::string::npos);
  EXPECT_NE(error_of(0, 1).find("at least 1"), std::string::npos);
}

TEST(StepWatchdog, FiresOnceForAStuckStepAndNeverForQuickOnes) {
  std::atomic<int> calls{0};
  std::string message;
  std::mutex m;
  parallel::StepWatchdog dog(150ms, [&](const std::string& why) {
    std::lock_guard lock(m);
    message = why;
    ++calls;
  });
  for (int i = 0; i < 5; ++i) {  // quick steps, and idle time between them, never fire
    dog.begin_step();
    std::this_thread::sleep_for(20ms);
    dog.end_step();
    std::this_thread::sleep_for(60ms);
  }
  EXPECT_EQ(calls.load(), 0);
  dog.begin_step();
  for (int i = 0; i < 100 && calls.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(300ms);  // still stuck: no second call
  dog.end_step();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(dog.fired());
  std::lock_guard lock(m);
  EXPECT_NE(message.find("a collective is stuck"), std::string::npos) << message;
}

TEST(StepWatchdog, TimeoutFromTheEnvironment) {
  ::setenv("PAGELLM_STEP_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(parallel::StepWatchdog::default_timeout(), 2500ms);
  ::setenv("PAGELLM_STEP_TIMEOUT_S", "nonsense", 1);
  EXPECT_EQ(parallel::StepWatchdog::default_timeout(), 300000ms);
  ::unsetenv("PAGELLM_STEP_TIMEOUT_S");
}

}  // namespace
}  // namespace pagellm
