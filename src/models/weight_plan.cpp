#include "models/weight_plan.h"

#include <cmath>
#include <set>

#include "common/error.h"

namespace pagellm::models {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

int64_t HfTensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t WeightTensorSpec::num_elements() const {
  int64_t n = 0;
  for (const HfTensorSpec& p : parts) n += p.num_elements();
  return n;
}

std::vector<WeightTensorSpec> llama_weight_plan(const io::ModelConfig& c) {
  // Sizes are bounded by parse_model_config, so no product below overflows.
  const int64_t hidden = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  std::vector<WeightTensorSpec> plan;
  auto add = [&](WeightSlot slot, int layer, std::string label, std::vector<HfTensorSpec> parts) {
    plan.push_back({slot, layer, std::move(label), std::move(parts)});
  };
  auto one = [&](WeightSlot slot, int layer, const std::string& name, std::vector<int64_t> shape) {
    add(slot, layer, name, {{name, std::move(shape)}});
  };
  one(WeightSlot::kEmbed, -1, "model.embed_tokens.weight", {c.vocab_size, hidden});
  for (int i = 0; i < int(c.num_hidden_layers); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    one(WeightSlot::kInputNorm, i, p + "input_layernorm.weight", {hidden});
    add(WeightSlot::kQkv, i, p + "qkv",
        {{p + "self_attn.q_proj.weight", {q_rows, hidden}},
         {p + "self_attn.k_proj.weight", {kv_rows, hidden}},
         {p + "self_attn.v_proj.weight", {kv_rows, hidden}}});
    if (c.attention_bias)
      add(WeightSlot::kQkvBias, i, p + "qkv_bias",
          {{p + "self_attn.q_proj.bias", {q_rows}},
           {p + "self_attn.k_proj.bias", {kv_rows}},
           {p + "self_attn.v_proj.bias", {kv_rows}}});
    if (c.qk_norm) {
      one(WeightSlot::kQNorm, i, p + "self_attn.q_norm.weight", {hd});
      one(WeightSlot::kKNorm, i, p + "self_attn.k_norm.weight", {hd});
    }
    one(WeightSlot::kOProj, i, p + "self_attn.o_proj.weight", {hidden, q_rows});
    one(WeightSlot::kPostNorm, i, p + "post_attention_layernorm.weight", {hidden});
    add(WeightSlot::kGateUp, i, p + "gate_up",
        {{p + "mlp.gate_proj.weight", {inter, hidden}},
         {p + "mlp.up_proj.weight", {inter, hidden}}});
    one(WeightSlot::kDown, i, p + "mlp.down_proj.weight", {hidden, inter});
  }
  one(WeightSlot::kFinalNorm, -1, "model.norm.weight", {hidden});
  if (!c.tie_word_embeddings)
    one(WeightSlot::kLmHead, -1, "lm_head.weight", {c.vocab_size, hidden});
  return plan;
}

uint64_t plan_num_elements(const std::vector<WeightTensorSpec>& plan) {
  uint64_t n = 0;
  for (const WeightTensorSpec& t : plan) n += static_cast<uint64_t>(t.num_elements());
  return n;
}

void check_llama_checkpoint(const io::ModelConfig& config, const io::WeightStore& store,
                            const std::vector<WeightTensorSpec>& plan) {
  std::set<std::string, std::less<>> used;
  for (const WeightTensorSpec& t : plan) {
    for (const HfTensorSpec& part : t.parts) {
      const io::TensorView& v = store.get(part.name);
      if (v.shape != part.shape)
        invalid_argument(v.file + ": tensor '" + part.name + "' has shape " + shape_str(v.shape) +
                         " but config.json implies " + shape_str(part.shape));
      used.insert(part.name);
    }
  }
  for (const std::string& name : store.names()) {
    if (used.count(name) != 0) continue;
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older exports saved
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    invalid_argument(store.find(name)->file + ": unexpected tensor '" + name + "' for " +
                     config.architecture + " with this config.json");
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

DummyFill dummy_fill(const HfTensorSpec& tensor, uint64_t seed) {
  DummyFill f;
  if (tensor.name.ends_with("norm.weight")) {
    f.ones = true;
    return f;
  }
  f.key = seed;
  for (char c : tensor.name) f.key = splitmix64(f.key ^ static_cast<uint8_t>(c));
  // The bound is computed in float, as the loaders always did, so the numbers stay unchanged.
  float bound = 0.02f;
  if (tensor.shape.size() == 2)
    bound = tensor.name.find("embed_tokens") != std::string::npos
                ? 1.0f
                : 1.0f / std::sqrt(static_cast<float>(tensor.shape[1]));
  f.bound = bound;
  return f;
}

}  // namespace pagellm::models
