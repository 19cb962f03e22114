// The shared weight plan (models/weight_plan.h): names, shapes and fusion order that the CPU loader
// and the CUDA runner's streaming loader both follow, checkpoint validation, and dummy fills.
#include "models/weight_plan.h"

#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include "common/error.h"
#include "io/hf_config.h"
#include "model_files_util.h"
#include "models/llama.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;
using models::HfTensorSpec;
using models::WeightSlot;
using models::WeightTensorSpec;

io::ModelConfig tiny_config() {
  testing::TempDir dir;
  testing::write_file(dir.path() / "config.json", testing::tiny_llama_config().dump());
  return io::load_model_config(dir.path());
}

std::vector<std::string> names_of(const WeightTensorSpec& t) {
  std::vector<std::string> names;
  for (const HfTensorSpec& p : t.parts) names.push_back(p.name);
  return names;
}

TEST(WeightPlan, FusesQkvAndGateUpInHfOrder) {
  const io::ModelConfig c = tiny_config();  // hidden 16, 4 heads, 2 kv heads, inter 24, untied
  const auto plan = models::llama_weight_plan(c);
  // embed, 2 x (input norm, qkv, o_proj, post norm, gate_up, down), final norm, lm_head
  ASSERT_EQ(plan.size(), 1u + 2 * 6 + 2);
  EXPECT_EQ(plan[0].slot, WeightSlot::kEmbed);
  EXPECT_EQ(plan[0].parts[0].shape, (std::vector<int64_t>{32, 16}));
  const WeightTensorSpec& qkv = plan[2];
  EXPECT_EQ(qkv.slot, WeightSlot::kQkv);
  EXPECT_EQ(qkv.layer, 0);
  EXPECT_EQ(qkv.label, "model.layers.0.qkv");
  EXPECT_EQ(names_of(qkv), (std::vector<std::string>{"model.layers.0.self_attn.q_proj.weight",
                                                     "model.layers.0.self_attn.k_proj.weight",
                                                     "model.layers.0.self_attn.v_proj.weight"}));
  EXPECT_EQ(qkv.parts[1].shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(qkv.num_elements(), (16 + 2 * 8) * 16);
  const WeightTensorSpec& gate_up = plan[5];
  EXPECT_EQ(gate_up.slot, WeightSlot::kGateUp);
  EXPECT_EQ(names_of(gate_up), (std::vector<std::string>{"model.layers.0.mlp.gate_proj.weight",
                                                         "model.layers.0.mlp.up_proj.weight"}));
  EXPECT_EQ(plan[6].parts[0].shape, (std::vector<int64_t>{16, 24}));  // down: [hidden, inter]
  EXPECT_EQ(plan[7].layer, 1);
  EXPECT_EQ(plan[plan.size() - 2].slot, WeightSlot::kFinalNorm);
  EXPECT_EQ(plan.back().slot, WeightSlot::kLmHead);
}

TEST(WeightPlan, OptionalTensorsFollowTheConfig) {
  io::ModelConfig c = tiny_config();
  c.attention_bias = true;
  c.qk_norm = true;
  c.tie_word_embeddings = true;
  const auto plan = models::llama_weight_plan(c);
  ASSERT_EQ(plan.size(), 1u + 2 * 9 + 1);  // + bias, q norm, k norm per layer; no lm_head
  EXPECT_EQ(plan[3].slot, WeightSlot::kQkvBias);
  EXPECT_EQ(names_of(plan[3]), (std::vector<std::string>{"model.layers.0.self_attn.q_proj.bias",
                                                         "model.layers.0.self_attn.k_proj.bias",
                                                         "model.layers.0.self_attn.v_proj.bias"}));
  EXPECT_EQ(plan[4].slot, WeightSlot::kQNorm);
  EXPECT_EQ(plan[4].parts[0].shape, (std::vector<int64_t>{4}));  // head_dim
  EXPECT_EQ(plan[5].slot, WeightSlot::kKNorm);
  EXPECT_EQ(plan.back().slot, WeightSlot::kFinalNorm);
  uint64_t total = 0;
  for (const auto& t : plan) total += uint64_t(t.num_elements());
  EXPECT_EQ(models::plan_num_elements(plan), total);
  EXPECT_EQ(models::llama_weight_bytes(c), 4 * total);
}

class CheckpointCheck : public ::testing::Test {
 protected:
  void write(const std::function<void(testing::SafetensorsBuilder&)>& edit) {
    testing::SafetensorsBuilder b;
    testing::add_tiny_llama_tensors(b);
    edit(b);
    testing::write_file(dir_.path() / "model.safetensors", b.bytes());
  }
  std::string error(const io::ModelConfig& c) {
    const io::WeightStore store = io::WeightStore::open(dir_.path());
    try {
      models::check_llama_checkpoint(c, store);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string file() const { return (dir_.path() / "model.safetensors").string(); }
  testing::TempDir dir_;
  io::ModelConfig config_ = tiny_config();
};

TEST_F(CheckpointCheck, AcceptsTheTinyFolderAndIgnoresWhatHfIgnores) {
  write([](testing::SafetensorsBuilder& b) {
    b.add_f32("model.layers.0.self_attn.rotary_emb.inv_freq", {2});
  });
  EXPECT_EQ(error(config_), "");
  io::ModelConfig tied = config_;
  tied.tie_word_embeddings = true;
  EXPECT_EQ(error(tied), "");  // lm_head.weight of a tied model is ignored
}

TEST_F(CheckpointCheck, NamesMisshapedMissingAndUnexpectedTensors) {
  write([](testing::SafetensorsBuilder& b) {
    b.header.erase("model.layers.1.self_attn.k_proj.weight");
    b.add_f32("model.layers.1.self_attn.k_proj.weight", {16, 16});
  });
  EXPECT_EQ(error(config_), file() +
                                ": tensor 'model.layers.1.self_attn.k_proj.weight' has shape [16, "
                                "16] but config.json implies [8, 16]");
  write(
      [](testing::SafetensorsBuilder& b) { b.header.erase("model.layers.1.mlp.up_proj.weight"); });
  const std::string missing = error(config_);
  EXPECT_NE(missing.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;
  write([](testing::SafetensorsBuilder& b) { b.add_f32("model.layers.0.mlp.extra.weight", {2}); });
  EXPECT_EQ(error(config_), file() +
                                ": unexpected tensor 'model.layers.0.mlp.extra.weight' for "
                                "LlamaForCausalLM with this config.json");
  io::ModelConfig biased = config_;
  biased.attention_bias = true;
  write([](testing::SafetensorsBuilder&) {});
  EXPECT_NE(error(biased).find("model.layers.0.self_attn.q_proj.bias"), std::string::npos);
}

TEST(WeightPlan, DummyFillsKeyOnSeedAndName) {
  const auto norm = models::dummy_fill({"model.norm.weight", {16}, {}}, 1);
  EXPECT_TRUE(norm.ones);
  const auto embed = models::dummy_fill({"model.embed_tokens.weight", {32, 16}, {}}, 1);
  EXPECT_FALSE(embed.ones);
  EXPECT_EQ(embed.bound, 1.0);
  const auto down = models::dummy_fill({"model.layers.0.mlp.down_proj.weight", {16, 25}, {}}, 1);
  EXPECT_EQ(down.bound, double(1.0f / std::sqrt(25.0f)));
  EXPECT_EQ(models::dummy_fill({"model.layers.0.self_attn.q_proj.bias", {16}, {}}, 1).bound,
            double(0.02f));
  EXPECT_NE(down.key, models::dummy_fill({"model.layers.0.mlp.down_proj.weight", {16, 25}, {}}, 2).key);
  EXPECT_NE(down.key, models::dummy_fill({"model.layers.1.mlp.down_proj.weight", {16, 25}, {}}, 1).key);
}

// A fused tensor's parts are generated independently (as the GPU generates them in place), so the
// k rows of qkv start over at element 0 of k_proj's stream.
TEST(WeightPlan, RandomWeightsFuseIndependentlyGeneratedParts) {
  const io::ModelConfig c = tiny_config();
  const models::LlamaWeights w = models::random_llama_weights(c, 5);
  const auto k = models::dummy_fill({"model.layers.0.self_attn.k_proj.weight", {8, 16}, {}}, 5);
  const double u = double(models::splitmix64(k.key) >> 11) * 0x1.0p-53;
  EXPECT_EQ(w.layers[0].qkv[16 * 16], float((2.0 * u - 1.0) * k.bound));
  EXPECT_EQ(w.layers[0].qkv.size(), size_t((16 + 2 * 8) * 16));
  EXPECT_EQ(w.layers[1].input_norm, std::vector<float>(16, 1.0f));
}

}  // namespace
}  // namespace pagellm
