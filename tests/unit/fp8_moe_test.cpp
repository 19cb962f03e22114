// FP8 checkpoints of mixture-of-experts models (issues 18 and 11): the tiny Qwen3-MoE and Mixtral
// references written with every linear weight in e4m3, per output channel (fbgemm_fp8) or in 16x16
// blocks (block-wise fp8, weight_scale_inv), the routers and the LM head left 16-bit as the
// published FP8 checkpoints leave them. The experts load to exactly their dequantized weights, on
// one rank and on tensor-parallel slices; the engine's greedy continuations equal those of an F32
// twin holding the dequantized experts, at TP=1 and TP=2; --quantization fp8 quantizes the experts
// per row; a missing expert scale is a one-line error naming the tensor.
#include <filesystem>
#include <map>

#include <gtest/gtest.h>

#include "fp8_checkpoint_util.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "pagellm/llm.h"
#include "parallel_greedy.h"
#include "quant/fp8_weights.h"
#include "quant/quant_config.h"

namespace pagellm {
namespace {

using nlohmann::json;

const std::filesystem::path kReference =
    std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/data/hf_reference";
const std::filesystem::path kStories = std::filesystem::path(PAGELLM_SHARED_DIR) / "models/stories260K";

enum class Scales { kChannel, kBlock16 };

// The linear layers an FP8 export quantizes: attention, dense MLP and expert projections (Mixtral's
// experts are w1 / w2 / w3), not the routers ("mlp.gate", "block_sparse_moe.gate"). experts_only:
// the experts alone (an export that left the rest in 16 bits).
bool quantized_by_export(const std::string& name, bool experts_only) {
  if (experts_only && name.find(".experts.") == std::string::npos) return false;
  return name.ends_with("proj.weight") || name.ends_with(".w1.weight") ||
         name.ends_with(".w2.weight") || name.ends_with(".w3.weight");
}

enum class Export { kAll, kExpertsOnly, kExpertsDequantized };

struct Fp8Moe {
  std::filesystem::path dir;
  std::map<std::string, std::vector<float>> dequantized;  // by tensor name
};

// Writes reference model `name` in FP8 with `scales` into tmp (with stories260K's tokenizer, whose
// vocabulary the tiny models share); `drop` names a scale tensor left out. kExpertsDequantized: the
// experts-only export's twin with the same quantization_config and every tensor 16-bit (F32), its
// experts holding the dequantized values.
Fp8Moe write_fp8_moe(const std::string& name, Scales scales, const testing::TempDir& tmp,
                     Export what = Export::kAll, const std::string& drop = "") {
  Fp8Moe m;
  m.dir = tmp.path() / (name + (what == Export::kExpertsDequantized ? "_f32" : ""));
  std::filesystem::create_directories(m.dir);
  json config = json::parse(testing::read_file(kReference / name / "config.json"));
  config["quantization_config"] =
        scales == Scales::kChannel
          ? json{{"quant_method", "fbgemm_fp8"}}
          : json{{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}};
  testing::write_file(m.dir / "config.json", config.dump());
  std::filesystem::copy_file(kReference / name / "generation_config.json",
                             m.dir / "generation_config.json");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    if (std::filesystem::exists(kStories / f)) std::filesystem::copy_file(kStories / f, m.dir / f);
  const io::WeightStore src = io::WeightStore::open(kReference / name);
  testing::SafetensorsBuilder b;
  for (const std::string& t : src.names()) {
    const io::TensorView& v = src.get(t);
    std::vector<float> w = quant::read_f32(v);
    if (!quantized_by_export(t, what != Export::kAll)) {
      b.add_f32_values(t, v.shape, w);
      continue;
    }
    const int64_t n = v.shape[0], k = v.shape[1];
    const bool channel = scales == Scales::kChannel;
    std::string bytes;
    std::vector<float> s;
    m.dequantized[t] = testing::quantize_fp8(w, n, k, channel ? 1 : 16, channel ? k : 16, bytes, s);
    if (what == Export::kExpertsDequantized) {
      b.add_f32_values(t, v.shape, m.dequantized[t]);
      continue;
    }
    testing::add_raw(b, t, "F8_E4M3", v.shape, bytes);
    const std::string scale = quant::sibling_name(t, channel ? "weight_scale" : "weight_scale_inv");
    if (scale == drop) continue;
    if (channel)
      b.add_f32_values(scale, {n, 1}, s);
    else
      b.add_f32_values(scale, {(n + 15) / 16, (k + 15) / 16}, s);
  }
  testing::write_file(m.dir / "model.safetensors", b.bytes());
  return m;
}

// The expert slots of the rank's weights against the dequantized parts; returns how many expert
// parts were compared.
int expect_experts_dequantized(const Fp8Moe& m, const parallel::ShardSpec& shard) {
  const io::ModelConfig c = io::load_model_config(m.dir);
  const io::WeightStore store = io::WeightStore::open(m.dir);
  models::LlamaWeights w = models::load_llama_weights(c, store, shard);
  return testing::expect_parts_dequantized(w, c, shard, m.dequantized, quant::fp8_expert_slot);
}

TEST(Fp8Moe, ExpertsLoadToTheirDequantizedWeights) {
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"})
    for (Scales s : {Scales::kChannel, Scales::kBlock16}) {
      testing::TempDir tmp;
      const Fp8Moe m = write_fp8_moe(name, s, tmp);
      const io::ModelConfig c = io::load_model_config(m.dir);
      ASSERT_TRUE(c.quant.fp8_checkpoint()) << name;
      // Qwen3: two MoE layers of 8 experts; Mixtral: two of 4; gate and up, and down, each.
      const int parts = std::string(name) == "qwen3_moe_tiny" ? 2 * 8 * 3 : 2 * 4 * 3;
      EXPECT_EQ(expect_experts_dequantized(m, {}), parts) << name;
      for (int r = 0; r < 2; ++r) {  // TP=2: gate/up rows and down columns split, scales with them
        parallel::ShardSpec shard;
        shard.tp_size = 2, shard.tp_rank = r;
        EXPECT_EQ(expect_experts_dequantized(m, shard), parts) << name << " rank " << r;
      }
    }
}

std::vector<std::vector<int32_t>> greedy(const Fp8Moe& m, int tp) {
  std::vector<PromptInput> prompts;
  for (const char* t : {"Once upon a time", "The little dog"})
    prompts.push_back(PromptInput::from_text(t));
  std::vector<std::vector<int32_t>> out;
  for (const RequestOutput& r : testing::parallel_greedy(m.dir.string(), tp, 1, prompts, 12, 0.05))
    out.push_back(r.outputs.at(0).token_ids);
  return out;
}

// Experts alone in FP8, the rest 16-bit (whose activations stay unquantized, as on the GPU): the
// engine's greedy tokens equal those of the 16-bit twin holding the dequantized experts, on one
// rank and at TP=2.
TEST(Fp8Moe, TheEngineServesThemAsTheirDequantizedTwin) {
  if (!std::filesystem::exists(kStories / "tokenizer.json")) GTEST_SKIP();
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"})
    for (Scales s : {Scales::kChannel, Scales::kBlock16}) {
      testing::TempDir tmp;
      const Fp8Moe m = write_fp8_moe(name, s, tmp, Export::kExpertsOnly);
      const Fp8Moe twin = write_fp8_moe(name, s, tmp, Export::kExpertsDequantized);
      const auto ref = greedy(twin, 1);
      for (const auto& ids : ref) EXPECT_EQ(ids.size(), 12u) << name;
      EXPECT_EQ(greedy(m, 1), ref) << name;
      EXPECT_EQ(greedy(m, 2), ref) << name << " TP=2";
    }
}

// --quantization fp8 on the 16-bit checkpoint: every expert row quantized per channel to e4m3 and
// back on the CPU (the GPU keeps the codes), the routers untouched; the engine runs it.
TEST(Fp8Moe, OnlineQuantizationQuantizesTheExpertsPerRow) {
  io::ModelConfig c = io::load_model_config(kReference / "qwen3_moe_tiny");
  c.quant = quant::resolve_quantization(c.quant, "fp8", "test");
  const io::WeightStore store = io::WeightStore::open(kReference / "qwen3_moe_tiny");
  std::map<std::string, std::vector<float>> want;
  for (const std::string& name : store.names()) {
    if (name.find(".experts.") == std::string::npos) continue;
    const io::TensorView& v = store.get(name);
    std::vector<float> w = quant::read_f32(v);
    quant::fake_quantize_rows(w.data(), v.shape[0], v.shape[1]);
    want[name] = std::move(w);
  }
  models::LlamaWeights w = models::load_llama_weights(c, store);
  EXPECT_EQ(testing::expect_parts_dequantized(w, c, {}, want, quant::fp8_expert_slot), 2 * 8 * 3);
  if (!std::filesystem::exists(kStories / "tokenizer.json")) return;
  testing::TempDir tmp;
  const auto dir = tmp.path() / "qwen3_moe_tiny";
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
    std::filesystem::copy_file(kReference / "qwen3_moe_tiny" / f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(kStories / f, dir / f);
  EngineArgs args;
  args.model = dir.string();
  args.quantization = "fp8";
  args.kv_cache_memory_gib = 0.05;
  LLM llm(args);
  SamplingParams p;
  p.temperature = 0.0f, p.max_tokens = 8, p.ignore_eos = true;
  const auto out = llm.generate({PromptInput::from_text("Once upon a time")}, p);
  EXPECT_EQ(out.at(0).outputs.at(0).token_ids.size(), 8u);
}

TEST(Fp8Moe, AMissingExpertScaleIsOneLineNamingTheTensor) {
  testing::TempDir tmp;
  const std::string scale = "model.layers.2.mlp.experts.5.up_proj.weight_scale_inv";
  const Fp8Moe m = write_fp8_moe("qwen3_moe_tiny", Scales::kBlock16, tmp, Export::kAll, scale);
  const io::ModelConfig c = io::load_model_config(m.dir);
  const io::WeightStore store = io::WeightStore::open(m.dir);
  const std::string msg = testing::error_message_of([&] { models::check_llama_checkpoint(c, store); });
  EXPECT_NE(msg.find("'" + scale + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("experts.5.up_proj.weight' has no scale tensor"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace pagellm
