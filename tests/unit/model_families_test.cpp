// The families beyond dense Llama / Qwen on the CPU backend: mixture-of-experts (Qwen3-MoE,
// Mixtral) — config.json fields and their errors, routing, the per-expert checkpoint layout in the
// weight plan and its tensor-parallel slices — and Phi-3 (fused qkv / gate_up split at load,
// longrope) and Gemma 2 / 3 (fields, defaults, layer kinds, chunked prefill across the window);
// greedy generation with TP / PP against one rank. Logits against transformers are
// checked in llama_model_test.cpp (HfReference: qwen3_moe_tiny, mixtral_tiny, phi3_tiny,
// phi3_longrope_tiny).
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "backends/cpu/kernels.h"
#include "common/error.h"
#include "engine/engine_core.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "kv/kv_layout.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "pagellm/llm.h"
#include "parallel/shard.h"
#include "parallel_greedy.h"
#include "runner/model_loader.h"
#include "sanitized.h"

namespace pagellm {
namespace {

using nlohmann::json;

const std::filesystem::path kReference =
    std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/data/hf_reference";
const std::filesystem::path kModels = std::filesystem::path(PAGELLM_SHARED_DIR) / "models";

json qwen3_moe_json() {
  return json::parse(testing::read_file(kReference / "qwen3_moe_tiny" / "config.json"));
}

io::ModelConfig parse(const json& j) { return io::parse_model_config(j.dump(), "config.json"); }

std::string parse_error(const json& j) {
  return testing::error_message_of([&] { parse(j); });
}

TEST(MoeConfig, Qwen3MoeFieldsAndDenseLayers) {
  json j = qwen3_moe_json();  // transformers 5 writes num_local_experts; the Hub's use num_experts
  io::ModelConfig c = parse(j);
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.top_k, 3);
  EXPECT_EQ(c.moe.intermediate_size, 32);
  EXPECT_FALSE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.moe_layer(0));
  EXPECT_FALSE(c.moe_layer(1));  // mlp_only_layers
  EXPECT_TRUE(c.moe_layer(2));
  j.erase("num_local_experts");
  j["num_experts"] = 16;
  j["norm_topk_prob"] = true;
  j["mlp_only_layers"] = json::array();
  j["decoder_sparse_step"] = 2;  // every second layer sparse: layers 1, 3, ...
  c = parse(j);
  EXPECT_EQ(c.moe.num_experts, 16);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_FALSE(c.moe_layer(0));
  EXPECT_TRUE(c.moe_layer(1));
  EXPECT_FALSE(c.moe_layer(2));
}

TEST(MoeConfig, MixtralUsesIntermediateSizeForEveryExpert) {
  const io::ModelConfig c = io::load_model_config(kReference / "mixtral_tiny");
  EXPECT_EQ(c.model_type, "mixtral");
  EXPECT_EQ(c.moe.num_experts, 4);
  EXPECT_EQ(c.moe.top_k, 2);
  EXPECT_EQ(c.moe.intermediate_size, 48);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_TRUE(c.moe_layer(0));
  EXPECT_TRUE(c.moe_layer(1));
  EXPECT_FALSE(c.qk_norm);
}

TEST(MoeConfig, BadFieldsNameTheField) {
  json j = qwen3_moe_json();
  j["num_experts_per_tok"] = 9;  // more than the 8 experts
  EXPECT_NE(parse_error(j).find("num_experts_per_tok"), std::string::npos);
  j = qwen3_moe_json();
  j["num_local_experts"] = 0;
  EXPECT_NE(parse_error(j).find("num_experts"), std::string::npos);
  j = qwen3_moe_json();
  j.erase("moe_intermediate_size");
  EXPECT_NE(parse_error(j).find("moe_intermediate_size"), std::string::npos);
  j = qwen3_moe_json();
  j["mlp_only_layers"] = {3};  // the model has layers 0..2
  EXPECT_NE(parse_error(j).find("mlp_only_layers"), std::string::npos);
  j["mlp_only_layers"] = "1";
  EXPECT_NE(parse_error(j).find("mlp_only_layers"), std::string::npos);
  j = qwen3_moe_json();
  j["decoder_sparse_step"] = 0;
  EXPECT_NE(parse_error(j).find("decoder_sparse_step"), std::string::npos);
  // An expert size tensor parallelism cannot split.
  j = qwen3_moe_json();
  j["moe_intermediate_size"] = 30;
  const std::string tp =
      testing::error_message_of([&] { parallel::check_parallel_config(parse(j), 4, 1); });
  EXPECT_NE(tp.find("expert intermediate size (30)"), std::string::npos) << tp;
}

TEST(MoeRoute, SoftmaxTopKInDescendingOrderWithOptionalRenormalisation) {
  // Token 0: probabilities of logits {0, ln 2, ln 4, 0}: 1/8, 2/8, 4/8, 1/8.
  // Token 1: a tie between experts 1 and 3 (the lower id wins).
  const float ln2 = std::log(2.0f);
  const std::vector<float> logits = {0, ln2, 2 * ln2, 0, 0, 1, 0, 1};
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  cpu::moe_route(logits.data(), 2, 4, 2, false, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 1, 1, 3}));
  EXPECT_NEAR(w[0], 0.5f, 1e-6f);
  EXPECT_NEAR(w[1], 0.25f, 1e-6f);
  EXPECT_NEAR(w[2], w[3], 0.0f);
  cpu::moe_route(logits.data(), 2, 4, 2, true, ids.data(), w.data());
  EXPECT_NEAR(w[0], 2.0f / 3.0f, 1e-6f);
  EXPECT_NEAR(w[1], 1.0f / 3.0f, 1e-6f);
  EXPECT_NEAR(w[2], 0.5f, 1e-6f);
  cpu::moe_route(logits.data(), 1, 4, 4, false, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 1, 0, 3}));
}

TEST(MoeWeights, PlanNamesEveryExpertAndSlicesThemForTensorParallelism) {
  const io::ModelConfig mixtral = io::load_model_config(kReference / "mixtral_tiny");
  const auto plan = models::llama_weight_plan(mixtral);
  const models::WeightTensorSpec* gate_up = nullptr;
  for (const auto& t : plan)
    if (t.layer == 1 && t.slot == models::WeightSlot::kExpertsGateUp) gate_up = &t;
  ASSERT_NE(gate_up, nullptr);
  ASSERT_EQ(gate_up->parts.size(), 8u);  // 4 experts x (w1, w3)
  EXPECT_EQ(gate_up->parts[0].name, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
  EXPECT_EQ(gate_up->parts[1].name, "model.layers.1.block_sparse_moe.experts.0.w3.weight");
  EXPECT_EQ(gate_up->num_elements(), 4 * 2 * 48 * 64);
  // Rank 1 of 2 holds rows [24, 48) of every expert's gate and up, columns [24, 48) of its down.
  const auto full = models::random_llama_weights(mixtral, 5);
  const auto rank1 = models::random_llama_weights(mixtral, 5, {1, 2, 0, 1});
  const auto& f = full.layers[0];
  const auto& r = rank1.layers[0];
  EXPECT_EQ(r.router, f.router);
  ASSERT_EQ(r.experts_gate_up.size(), f.experts_gate_up.size() / 2);
  for (int64_t e = 0; e < 4; ++e) {
    for (int64_t row = 0; row < 48; ++row) {  // rank rows: gate 24..47, then up 24..47
      const int64_t full_row = e * 96 + (row < 24 ? 24 + row : 48 + row);
      ASSERT_TRUE(std::equal(r.experts_gate_up.begin() + (e * 48 + row) * 64,
                             r.experts_gate_up.begin() + (e * 48 + row + 1) * 64,
                             f.experts_gate_up.begin() + full_row * 64))
          << "expert " << e << " row " << row;
    }
    for (int64_t h = 0; h < 64; ++h)
      ASSERT_TRUE(std::equal(r.experts_down.begin() + (e * 64 + h) * 24,
                             r.experts_down.begin() + (e * 64 + h + 1) * 24,
                             f.experts_down.begin() + (e * 64 + h) * 48 + 24));
  }
}

TEST(MoeWeights, ExpertCountAndMissingExpertTensorsAreNamed) {
  const auto dir = kReference / "qwen3_moe_tiny";
  const io::ModelConfig c = io::load_model_config(dir);
  {
    io::ModelConfig more = c;  // the config promises a ninth expert: the router has 8 rows
    more.moe.num_experts = 9;
    const io::WeightStore store = io::WeightStore::open(dir);
    const std::string msg =
        testing::error_message_of([&] { models::load_llama_weights(more, store); });
    EXPECT_NE(msg.find("'model.layers.0.mlp.gate.weight' has shape [8, 64] but config.json "
                       "implies [9, 64]"),
              std::string::npos)
        << msg;
  }
  // The same checkpoint with one expert tensor renamed (same length, so the offsets hold).
  testing::TempDir tmp;
  std::string bytes = testing::read_file(dir / "model.safetensors");
  const std::string name = "model.layers.2.mlp.experts.5.up_proj.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, name.size(), "model.layers.2.mlp.experts.5.up_pro_.weight");
  for (const char* f : {"config.json", "generation_config.json"})
    std::filesystem::copy_file(dir / f, tmp.path() / f);
  testing::write_file(tmp.path() / "model.safetensors", bytes);
  const io::WeightStore store = io::WeightStore::open(tmp.path());
  const std::string msg = testing::error_message_of([&] { models::load_llama_weights(c, store); });
  EXPECT_NE(msg.find("missing tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find(name), std::string::npos) << msg;
}

// A reference model with stories260K's tokenizer (the same 512-token vocabulary), so the engine
// can run it from text prompts.
std::filesystem::path with_tokenizer(const std::string& name, const testing::TempDir& tmp) {
  const auto dir = tmp.path() / name;
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    std::filesystem::copy_file(kReference / name / f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(kModels / "stories260K" / f, dir / f);
  return dir;
}

std::vector<std::vector<int32_t>> greedy_ids(const std::filesystem::path& model, int tp, int pp,
                                             int max_tokens) {
  std::vector<PromptInput> prompts;
  for (const char* t : {"Once upon a time", "The little dog", "Lily and Tom went", "One day, a"})
    prompts.push_back(PromptInput::from_text(t));
  std::vector<std::vector<int32_t>> out;
  for (const RequestOutput& r :
       testing::parallel_greedy(model.string(), tp, pp, prompts, max_tokens, 0.05))
    out.push_back(r.outputs.at(0).token_ids);
  return out;
}

// Tensor parallelism splits every expert's intermediate (the router is replicated, so every rank
// routes identically); the sum over ranks then differs from one rank's only by fp32 order. The
// tiny random models' logits are far apart, so the greedy tokens agree exactly.
TEST(MoeEngine, TensorAndPipelineParallelGreedyMatchesOneRank) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  const int tokens = testing::kSanitized ? 8 : 24;
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"}) {
    const auto model = with_tokenizer(name, tmp);
    const auto ref = greedy_ids(model, 1, 1, tokens);
    for (const auto& ids : ref) EXPECT_EQ(ids.size(), size_t(tokens)) << name;
    EXPECT_EQ(greedy_ids(model, 2, 1, tokens), ref) << name << " TP=2";
    EXPECT_EQ(greedy_ids(model, 1, 2, tokens), ref) << name << " PP=2";
    if (!testing::kSanitized) {
      EXPECT_EQ(greedy_ids(model, 4, 2, tokens), ref) << name << " TP=4 x PP=2";
    }
  }
}

TEST(Phi3, FusedProjectionsSplitIntoTheRuntimeLayoutAndItsShards) {
  const io::ModelConfig c = io::load_model_config(kReference / "phi3_tiny");
  EXPECT_EQ(c.model_type, "phi3");
  const io::WeightStore store = io::WeightStore::open(kReference / "phi3_tiny");
  const auto full = models::load_llama_weights(c, store);
  // Unsharded, the fused tensors are the runtime tensors as they are.
  std::vector<float> qkv(128 * 64), gate_up(256 * 64);
  convert_to_f32(DType::kF32, store.get("model.layers.1.self_attn.qkv_proj.weight").data,
                 qkv.data(), qkv.size());
  convert_to_f32(DType::kF32, store.get("model.layers.1.mlp.gate_up_proj.weight").data,
                 gate_up.data(), gate_up.size());
  EXPECT_EQ(full.layers[1].qkv, qkv);
  EXPECT_EQ(full.layers[1].gate_up, gate_up);
  // Rank 1 of 2: q heads 2-3 (rows 32..63), KV head 1 of k (rows 64 + 16..31) and of v
  // (rows 96 + 16..31); gate rows 64..127 and up rows 128 + 64..127.
  const auto r1 = models::load_llama_weights(c, store, {1, 2, 0, 1});
  auto rows = [](const std::vector<float>& m, int64_t begin, int64_t count) {
    return std::vector<float>(m.begin() + begin * 64, m.begin() + (begin + count) * 64);
  };
  std::vector<float> want = rows(qkv, 32, 32);
  for (int64_t begin : {80, 112}) {
    const auto part = rows(qkv, begin, 16);
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(r1.layers[1].qkv, want);
  want = rows(gate_up, 64, 64);
  const auto up = rows(gate_up, 192, 64);
  want.insert(want.end(), up.begin(), up.end());
  EXPECT_EQ(r1.layers[1].gate_up, want);
}

TEST(Phi3, LongRopeFieldsAndErrors) {
  json j = json::parse(testing::read_file(kReference / "phi3_longrope_tiny" / "config.json"));
  io::ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, io::RopeScaling::Type::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_TRUE(c.rope_scaling.use_long);  // max_position_embeddings 64 > 16
  EXPECT_EQ(c.rope_scaling.long_factor.size(), 8u);
  // Phi-3-mini-128k's (transformers 4) form: rope_scaling type "su", the original context at the
  // top level, an explicit attention_factor.
  json old = j;
  old.erase("rope_parameters");
  old["rope_theta"] = 10000.0;
  old["rope_scaling"] = j["rope_parameters"];
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"].erase("original_max_position_embeddings");
  old["rope_scaling"]["type"] = "su";
  old["rope_scaling"]["attention_factor"] = 1.5;
  c = parse(old);
  EXPECT_EQ(c.rope_scaling.type, io::RopeScaling::Type::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_EQ(c.rope_scaling.attention_factor, 1.5);
  json bad = j;
  bad["rope_parameters"]["short_factor"] = {1.0, 2.0};
  EXPECT_NE(parse_error(bad).find("'short_factor' must be a list of head_dim / 2 = 8 numbers"),
            std::string::npos)
      << parse_error(bad);
  bad = j;
  bad["rope_parameters"]["long_factor"][3] = -1.0;
  EXPECT_NE(parse_error(bad).find("long_factor"), std::string::npos);
  bad = j;
  bad["rope_parameters"].erase("original_max_position_embeddings");
  bad.erase("original_max_position_embeddings");
  EXPECT_NE(parse_error(bad).find("original_max_position_embeddings"), std::string::npos);
  bad = j;
  bad["rope_parameters"]["partial_rotary_factor"] = 0.75;  // Phi-4-mini
  EXPECT_NE(parse_error(bad).find("partial_rotary_factor"), std::string::npos);
}

TEST(Phi3, MaxModelLenPicksTheLongRopeFactors) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  EngineArgs args;
  args.model = with_tokenizer("phi3_longrope_tiny", tmp).string();
  args.kv_cache_memory_gib = 0.01;
  EXPECT_TRUE(runner::load_model(args).config.rope_scaling.use_long);
  args.max_model_len = 16;  // within the original context: the short factors
  EXPECT_FALSE(runner::load_model(args).config.rope_scaling.use_long);
  args.max_model_len = 17;
  EXPECT_TRUE(runner::load_model(args).config.rope_scaling.use_long);
}

TEST(Phi3, TensorAndPipelineParallelGreedyMatchesOneRank) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  const int tokens = testing::kSanitized ? 8 : 24;
  const auto model = with_tokenizer("phi3_tiny", tmp);
  const auto ref = greedy_ids(model, 1, 1, tokens);
  EXPECT_EQ(greedy_ids(model, 2, 1, tokens), ref) << "TP=2";
  EXPECT_EQ(greedy_ids(model, 2, 2, tokens), ref) << "TP=2 x PP=2";
}

// A GPTQ config over 16-bit expert tensors: INT experts load on the CPU backend now, so the
// checkpoint check names the packed tensor that is missing, in one line.
TEST(MoeEngine, IntExpertsWithoutTheirPackedTensorsFailInOneLine) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  const auto dir = with_tokenizer("qwen3_moe_tiny", tmp);
  json config = qwen3_moe_json();
  config["quantization_config"] = {{"quant_method", "gptq"},
                                   {"bits", 4},
                                   {"group_size", 32},
                                   {"desc_act", false},
                                   {"sym", true}};
  testing::write_file(dir / "config.json", config.dump());
  EngineArgs args;
  args.model = dir.string();
  args.kv_cache_memory_gib = 0.05;
  const std::string msg = testing::error_message_of([&] { LLM llm(args); });
  EXPECT_NE(msg.find(".qweight'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

json reference_json(const std::string& name, const char* file = "config.json") {
  return json::parse(testing::read_file(kReference / name / file));
}

TEST(Gemma, ConfigFieldsDefaultsAndLayerKinds) {
  json j = reference_json("gemma2_tiny");
  io::ModelConfig c = parse(j);
  EXPECT_TRUE(c.gemma.enabled);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.gemma.query_pre_attn_scalar, 24.0);
  EXPECT_EQ(c.gemma.attn_logit_softcapping, 5.0);
  EXPECT_EQ(c.gemma.final_logit_softcapping, 3.0);
  EXPECT_EQ(c.layer_window(0), 8);
  EXPECT_EQ(c.layer_window(1), 0);
  EXPECT_EQ(c.layer_window(2), 8);
  j.erase("attn_logit_softcapping");  // transformers' Gemma 2 defaults
  j.erase("layer_types");             // every other layer from the first slides
  j.erase("tie_word_embeddings");
  c = parse(j);
  EXPECT_EQ(c.gemma.attn_logit_softcapping, 50.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.layer_window(0), 8);
  EXPECT_EQ(c.layer_window(1), 0);
  j["final_logit_softcapping"] = nullptr;  // null: no cap
  EXPECT_EQ(parse(j).gemma.final_logit_softcapping, 0.0);

  // Gemma 3: transformers 5's per-layer-kind rope_parameters, and the 4.x fields real checkpoints
  // carry (rope_theta, rope_local_base_freq, rope_scaling, sliding_window_pattern).
  j = reference_json("gemma3_tiny");
  for (int v4 = 0; v4 < 2; ++v4) {
    c = parse(j);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.gemma.attn_logit_softcapping, 0.0);
    EXPECT_EQ(c.rope_theta, 1e6);
    EXPECT_EQ(c.rope_scaling.type, io::RopeScaling::Type::kLinear);
    EXPECT_EQ(c.rope_scaling.factor, 2.0);
    EXPECT_EQ(c.gemma.local_rope_theta, 1e4);
    EXPECT_EQ(c.layer_window(0), 6);
    EXPECT_EQ(c.layer_window(1), 6);
    EXPECT_EQ(c.layer_window(2), 0);
    j.erase("rope_parameters");
    j.erase("layer_types");
    j["rope_theta"] = 1e6;
    j["rope_local_base_freq"] = 1e4;
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
    j["sliding_window_pattern"] = 3;
  }
}

TEST(Gemma, UnsupportedVariantsNameTheField) {
  json j = reference_json("gemma3_tiny");
  j["architectures"] = {"Gemma3ForConditionalGeneration"};
  EXPECT_NE(parse_error(j).find("vision tower"), std::string::npos) << parse_error(j);
  j = reference_json("gemma3_tiny");
  j["use_bidirectional_attention"] = true;
  EXPECT_NE(parse_error(j).find("'use_bidirectional_attention'"), std::string::npos);
  j = reference_json("gemma2_tiny");
  j["hidden_activation"] = "relu";
  EXPECT_NE(parse_error(j).find("hidden_activation 'relu'"), std::string::npos) << parse_error(j);
  j = reference_json("gemma2_tiny");
  j["layer_types"] = {"sliding_attention"};
  EXPECT_NE(parse_error(j).find("'layer_types'"), std::string::npos) << parse_error(j);
  j["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  EXPECT_NE(parse_error(j).find("chunked_attention"), std::string::npos) << parse_error(j);
}

// The 40-token reference prompt in chunks of 5 through the cache: rows after the window edge
// (8 for gemma2_tiny, 6 for gemma3_tiny) attend across chunks and blocks to the window only.
TEST(Gemma, ChunkedPrefillAcrossTheWindowMatchesTransformers) {
  for (const char* name : {"gemma2_tiny", "gemma3_tiny"}) {
    const io::ModelConfig config = io::load_model_config(kReference / name);
    const io::WeightStore store = io::WeightStore::open(kReference / name);
    models::LlamaModel model(config, models::load_llama_weights(config, store));
    const json prompt = reference_json(name, "reference.json")["prompts"][1];
    const auto ids = prompt["token_ids"].get<std::vector<int32_t>>();
    const auto expected = prompt["logits"].get<std::vector<std::vector<float>>>();
    const int64_t n = int64_t(ids.size()), block_size = 4, vocab = config.vocab_size;
    models::KvCache cache(config.num_hidden_layers, (n + block_size - 1) / block_size + 1,
                          block_size, config.num_key_value_heads, config.head_dim);
    std::vector<int32_t> table;  // blocks in reverse pool order: positions never match slots
    for (int64_t b = cache.num_blocks() - 1; b >= 0; --b) table.push_back(int32_t(b));
    for (int64_t c0 = 0; c0 < n; c0 += 5) {
      const int64_t len = std::min<int64_t>(5, n - c0);
      std::vector<int32_t> positions;
      std::vector<int64_t> slots, rows;
      for (int64_t i = c0; i < c0 + len; ++i) {
        positions.push_back(int32_t(i));
        slots.push_back(table[size_t(i / block_size)] * block_size + i % block_size);
        rows.push_back(i - c0);
      }
      const cpu::AttentionSeq seq{0, len, c0, table};
      const models::ForwardBatch batch{std::span(ids).subspan(size_t(c0), size_t(len)), positions,
                                       slots, std::span<const cpu::AttentionSeq>(&seq, 1)};
      std::vector<float> logits(size_t(len * vocab));
      model.compute_logits(model.forward(batch, cache), rows, logits.data());
      for (int64_t r = 0; r < len; ++r) {
        float scale = 1.0f, max_err = 0.0f;
        for (int64_t v = 0; v < vocab; ++v) {
          const float want = expected[size_t(c0 + r)][size_t(v)];
          scale = std::max(scale, std::fabs(want));
          max_err = std::max(max_err, std::fabs(logits[size_t(r * vocab + v)] - want));
        }
        EXPECT_LE(max_err, 1e-4f * scale) << name << " position " << c0 + r;
      }
    }
  }
}

// Tensor parallelism normalises the attention and MLP outputs after the all-reduce and scales the
// vocab-parallel embedding; pipeline stages pass the scaled stream on.
TEST(Gemma, TensorAndPipelineParallelGreedyMatchesOneRank) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  const int tokens = testing::kSanitized ? 8 : 24;
  for (const char* name : {"gemma2_tiny", "gemma3_tiny"}) {
    const auto model = with_tokenizer(name, tmp);
    const auto ref = greedy_ids(model, 1, 1, tokens);
    for (const auto& ids : ref) EXPECT_EQ(ids.size(), size_t(tokens)) << name;
    EXPECT_EQ(greedy_ids(model, 2, 1, tokens), ref) << name << " TP=2";
    EXPECT_EQ(greedy_ids(model, 1, 3, tokens), ref) << name << " PP=3";
  }
}

// One greedy request through EngineCore: its tokens, and the most KV memory it held at once in
// layer-blocks (blocks in use x the layers one block holds).
struct HeldRun {
  std::vector<int32_t> tokens;
  int64_t max_layer_blocks = 0;
};

HeldRun run_holding(const std::filesystem::path& model, bool hybrid, int prompt_len,
                    int max_tokens) {
  EngineArgs args;
  args.model = model.string();
  args.block_size = 8;
  args.max_num_batched_tokens = 16;  // prefill chunks cross the window edge
  args.kv_cache_memory_gib = 0.01;
  args.disable_hybrid_kv_cache_manager = !hybrid;
  EngineCore core(args);
  io::ModelConfig config = io::load_model_config(model);
  config.hybrid_kv_cache = hybrid;
  const int slots = kv::kv_layout_of(config).slots;
  PromptInput prompt;
  for (int i = 0; i < prompt_len; ++i) prompt.token_ids.push_back(int32_t(3 + (i * 37) % 500));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  core.add_request("r", prompt, p, RequestOptions{}, false);
  HeldRun run;
  while (core.has_unfinished()) {
    for (RequestOutput& o : core.step())
      if (o.finished) run.tokens = o.outputs.at(0).token_ids;
    const kv::KVCacheManager& kv = core.kv_cache();
    run.max_layer_blocks =
        std::max(run.max_layer_blocks, int64_t(kv.num_blocks() - kv.num_free_blocks()) * slots);
  }
  EXPECT_EQ(core.kv_cache().num_free_blocks(), core.kv_cache().num_blocks()) << "KV leaked";
  return run;
}

// The hybrid KV layout (kv/kv_layout.h): sliding layers give back the blocks their window has
// passed, with the same greedy tokens as every layer keeping every token, in less memory.
TEST(Gemma, HybridKvCacheMatchesTheFullLayoutInLessMemory) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  const int prompt_len = 64, max_tokens = testing::kSanitized ? 40 : 96;
  for (const char* name : {"gemma2_tiny", "gemma3_tiny"}) {
    const auto model = with_tokenizer(name, tmp);
    const HeldRun hybrid = run_holding(model, true, prompt_len, max_tokens);
    const HeldRun full = run_holding(model, false, prompt_len, max_tokens);
    EXPECT_EQ(hybrid.tokens.size(), size_t(max_tokens)) << name;
    EXPECT_EQ(hybrid.tokens, full.tokens) << name;
    // One full layer in three keeps every block; the two sliding ones about their window's.
    EXPECT_LT(double(hybrid.max_layer_blocks), 0.6 * double(full.max_layer_blocks))
        << name << ": " << hybrid.max_layer_blocks << " vs " << full.max_layer_blocks;
  }
}

// A prefix hit through the hybrid layout: the second run of a prompt reuses the full layer's blocks
// and the sliding layers' window blocks (still cached after the first run gave them back), and
// continues exactly as the first.
TEST(Gemma, HybridKvCachePrefixHitsContinueExactly) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  const auto model = with_tokenizer("gemma3_tiny", tmp);
  EngineArgs args;
  args.model = model.string();
  args.block_size = 8;
  args.max_num_batched_tokens = 16;
  args.kv_cache_memory_gib = 0.01;
  EngineCore core(args);
  PromptInput prompt;
  for (int i = 0; i < 70; ++i) prompt.token_ids.push_back(int32_t(5 + (i * 53) % 500));
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = 24;
  p.ignore_eos = true;
  std::vector<std::vector<int32_t>> outputs;
  for (const char* id : {"first", "second"}) {
    core.add_request(id, prompt, p, RequestOptions{}, false);
    while (core.has_unfinished())
      for (RequestOutput& o : core.step())
        if (o.finished) outputs.push_back(o.outputs.at(0).token_ids);
  }
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(core.kv_cache().prefix_cache_hits(), 64u) << "8 full blocks of the 70-token prompt";
  EXPECT_EQ(core.kv_cache().num_free_blocks(), core.kv_cache().num_blocks());
}

// --quantization fp8 on a Gemma checkpoint: the CPU backend quantizes its projections as any
// family's (the GPU refuses quantized Gemma in one line, model_loader.cpp).
TEST(Gemma, OnlineFp8QuantizationRunsOnTheCpu) {
  if (!std::filesystem::exists(kModels / "stories260K" / "tokenizer.json")) GTEST_SKIP();
  testing::TempDir tmp;
  EngineArgs args;
  args.model = with_tokenizer("gemma2_tiny", tmp).string();
  args.quantization = "fp8";
  args.kv_cache_memory_gib = 0.05;
  LLM llm(args);
  SamplingParams p;
  p.temperature = 0.0f, p.max_tokens = 8, p.ignore_eos = true;
  const auto out = llm.generate({PromptInput::from_text("Once upon a time")}, p);
  EXPECT_EQ(out.at(0).outputs.at(0).token_ids.size(), 8u);
}

}  // namespace
}  // namespace pagellm
