#include "models/weight_plan.h"

#include <cmath>
#include <set>

#include "common/error.h"
#include "quant/fp8_weights.h"
#include "quant/int_weights.h"
#include "quant/kv_cache_quant.h"

namespace pagellm::models {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A mixture-of-experts MLP: the router (replicated on every rank) and every expert's gate/up and
// down, named as the published checkpoints name them (Qwen3-MoE: mlp.experts.E.gate_proj; Mixtral:
// block_sparse_moe.experts.E.w1 = gate, w3 = up, w2 = down).
void add_moe_layer(const io::ModelConfig& c, const parallel::ShardGeometry& g, bool sharded, int i,
                   const std::string& p, std::vector<WeightTensorSpec>& plan) {
  const bool mixtral = c.model_type == "mixtral";
  const std::string m = p + (mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t hidden = c.hidden_size, inter = c.moe.intermediate_size;
  const TensorSlice rows = sharded ? TensorSlice{0, g.moe_inter_begin, g.moe_inter} : TensorSlice{};
  const TensorSlice cols = sharded ? TensorSlice{1, g.moe_inter_begin, g.moe_inter} : TensorSlice{};
  plan.push_back({WeightSlot::kRouter,
                  i,
                  m + "gate.weight",
                  {{m + "gate.weight", {c.moe.num_experts, hidden}, {}}}});
  WeightTensorSpec gate_up{WeightSlot::kExpertsGateUp, i, m + "experts.gate_up", {}};
  WeightTensorSpec down{WeightSlot::kExpertsDown, i, m + "experts.down", {}};
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    const std::string x = m + "experts." + std::to_string(e) + ".";
    gate_up.parts.push_back(
        {x + (mixtral ? "w1" : "gate_proj") + ".weight", {inter, hidden}, rows});
    gate_up.parts.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", {inter, hidden}, rows});
    down.parts.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", {hidden, inter}, cols});
  }
  plan.push_back(std::move(gate_up));
  plan.push_back(std::move(down));
}

// A dense MLP: gate/up split by rows (column-parallel), down by columns (row-parallel). Phi-3
// stores gate/up as one gate_up_proj [2 * inter, hidden], gate rows first.
void add_dense_mlp(const io::ModelConfig& c, const parallel::ShardGeometry& g, bool sharded, int i,
                   const std::string& p, std::vector<WeightTensorSpec>& plan) {
  const int64_t hidden = c.hidden_size, inter = c.intermediate_size;
  const TensorSlice rows = sharded ? TensorSlice{0, g.inter_begin, g.inter} : TensorSlice{};
  const TensorSlice cols = sharded ? TensorSlice{1, g.inter_begin, g.inter} : TensorSlice{};
  if (c.model_type == "phi3") {
    const std::string name = p + "mlp.gate_up_proj.weight";
    plan.push_back({WeightSlot::kGateUp,
                    i,
                    p + "gate_up",
                    {{name, {2 * inter, hidden}, {0, g.inter_begin, g.inter}},
                     {name, {2 * inter, hidden}, {0, inter + g.inter_begin, g.inter}}}});
  } else {
    plan.push_back({WeightSlot::kGateUp,
                    i,
                    p + "gate_up",
                    {{p + "mlp.gate_proj.weight", {inter, hidden}, rows},
                     {p + "mlp.up_proj.weight", {inter, hidden}, rows}}});
  }
  const std::string down = p + "mlp.down_proj.weight";
  plan.push_back({WeightSlot::kDown, i, down, {{down, {hidden, inter}, cols}}});
}

}  // namespace

std::vector<int64_t> HfTensorSpec::local_shape() const {
  std::vector<int64_t> s = shape;
  if (slice.dim >= 0) s[static_cast<size_t>(slice.dim)] = slice.count;
  return s;
}

int64_t HfTensorSpec::num_elements() const {
  int64_t n = 1;
  for (int64_t d : local_shape()) n *= d;
  return n;
}

int64_t WeightTensorSpec::num_elements() const {
  int64_t n = 0;
  for (const HfTensorSpec& p : parts) n += p.num_elements();
  return n;
}

std::vector<WeightTensorSpec> llama_weight_plan(const io::ModelConfig& c,
                                                const parallel::ShardSpec& shard) {
  // Sizes are bounded by parse_model_config, so no product below overflows.
  const parallel::ShardGeometry g = parallel::shard_geometry(c, shard);
  const int64_t hidden = c.hidden_size, hd = c.head_dim;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  const bool sharded = shard.tp_size > 1;
  // Phi-3 stores q/k/v fused; each runtime part is a row range of the fused tensor.
  const bool fused = c.model_type == "phi3";
  // Slices are left out (whole tensors) without tensor parallelism.
  auto rows = [&](int64_t begin, int64_t count) {
    return sharded ? TensorSlice{0, begin, count} : TensorSlice{};
  };
  auto cols = [&](int64_t begin, int64_t count) {
    return sharded ? TensorSlice{1, begin, count} : TensorSlice{};
  };
  const TensorSlice q_slice = rows(g.q_head_begin * hd, g.num_q_heads * hd);
  const TensorSlice kv_slice = rows(g.kv_head_begin * hd, g.num_kv_heads * hd);
  const TensorSlice vocab_slice = rows(g.vocab_begin, g.vocab);
  std::vector<WeightTensorSpec> plan;
  auto add = [&](WeightSlot slot, int layer, std::string label, std::vector<HfTensorSpec> parts) {
    plan.push_back({slot, layer, std::move(label), std::move(parts)});
  };
  auto one = [&](WeightSlot slot, int layer, const std::string& name, std::vector<int64_t> shape,
                 TensorSlice slice = {}) {
    add(slot, layer, name, {{name, std::move(shape), slice}});
  };
  if (c.eagle) {
    one(WeightSlot::kEagleFc, -1, "fc.weight", {hidden, 2 * hidden});
    if (c.eagle_fc_bias) one(WeightSlot::kEagleFcBias, -1, "fc.bias", {hidden});
  } else if (shard.first_stage()) {
    one(WeightSlot::kEmbed, -1, "model.embed_tokens.weight", {c.vocab_size, hidden}, vocab_slice);
  }
  const std::string layer_prefix = c.eagle ? c.eagle_prefix : "model.layers.";
  for (int64_t layer = g.layer_begin; layer < g.layer_end; ++layer) {
    const int i = int(layer - g.layer_begin);
    const std::string p = layer_prefix + std::to_string(layer) + ".";
    if (!c.eagle || layer > 0)  // EAGLE's first layer takes fc's output unnormalised
      one(WeightSlot::kInputNorm, i, p + "input_layernorm.weight", {hidden});
    if (fused) {  // Phi-3: one qkv_proj [q_rows + 2 kv_rows, hidden], split by rows
      const std::string name = p + "self_attn.qkv_proj.weight";
      const std::vector<int64_t> shape = {q_rows + 2 * kv_rows, hidden};
      add(WeightSlot::kQkv, i, p + "qkv",
          {{name, shape, {0, g.q_head_begin * hd, g.num_q_heads * hd}},
           {name, shape, {0, q_rows + g.kv_head_begin * hd, g.num_kv_heads * hd}},
           {name, shape, {0, q_rows + kv_rows + g.kv_head_begin * hd, g.num_kv_heads * hd}}});
    } else {
      add(WeightSlot::kQkv, i, p + "qkv",
          {{p + "self_attn.q_proj.weight", {q_rows, hidden}, q_slice},
           {p + "self_attn.k_proj.weight", {kv_rows, hidden}, kv_slice},
           {p + "self_attn.v_proj.weight", {kv_rows, hidden}, kv_slice}});
    }
    if (c.attention_bias)
      add(WeightSlot::kQkvBias, i, p + "qkv_bias",
          {{p + "self_attn.q_proj.bias", {q_rows}, q_slice},
           {p + "self_attn.k_proj.bias", {kv_rows}, kv_slice},
           {p + "self_attn.v_proj.bias", {kv_rows}, kv_slice}});
    if (c.qk_norm) {
      one(WeightSlot::kQNorm, i, p + "self_attn.q_norm.weight", {hd});
      one(WeightSlot::kKNorm, i, p + "self_attn.k_norm.weight", {hd});
    }
    one(WeightSlot::kOProj, i, p + "self_attn.o_proj.weight", {hidden, q_rows},
        cols(g.q_head_begin * hd, g.num_q_heads * hd));
    if (c.gemma.enabled) {  // post_attention_layernorm normalises the attention's output
      one(WeightSlot::kAttnOutNorm, i, p + "post_attention_layernorm.weight", {hidden});
      one(WeightSlot::kPostNorm, i, p + "pre_feedforward_layernorm.weight", {hidden});
      one(WeightSlot::kMlpOutNorm, i, p + "post_feedforward_layernorm.weight", {hidden});
    } else {
      one(WeightSlot::kPostNorm, i, p + "post_attention_layernorm.weight", {hidden});
    }
    if (c.moe_layer(layer)) {
      add_moe_layer(c, g, sharded, i, p, plan);
      continue;
    }
    add_dense_mlp(c, g, sharded, i, p, plan);
  }
  if (shard.last_stage() && !c.eagle) {
    one(WeightSlot::kFinalNorm, -1, "model.norm.weight", {hidden});
    if (!c.tie_word_embeddings)
      one(WeightSlot::kLmHead, -1, "lm_head.weight", {c.vocab_size, hidden}, vocab_slice);
    else if (!shard.first_stage())  // tied, but the embedding lives on the first stage
      add(WeightSlot::kLmHead, -1, "lm_head.weight (tied)",
          {{"model.embed_tokens.weight", {c.vocab_size, hidden}, vocab_slice}});
  }
  return plan;
}

uint64_t plan_num_elements(const std::vector<WeightTensorSpec>& plan) {
  uint64_t n = 0;
  for (const WeightTensorSpec& t : plan) n += static_cast<uint64_t>(t.num_elements());
  return n;
}

void check_llama_checkpoint(const io::ModelConfig& config, const io::WeightStore& store) {
  const std::vector<WeightTensorSpec> plan = llama_weight_plan(config);
  std::set<std::string, std::less<>> used;
  for (const WeightTensorSpec& t : plan) {
    const bool int_slot = config.quant.int_weights() && quant::quantizable_slot(t.slot);
    for (const HfTensorSpec& part : t.parts) {
      if (int_slot && quant::int_part_quantized(config.quant, part.name)) {
        quant::check_int_part(store, part, config.quant, used);
        continue;
      }
      if (int_slot && !store.find(part.name))
        invalid_argument(store.source() + ": missing tensor '" + part.name + "' (" +
                         config.quant.name + " leaves this module in 16 bits: ignore list / "
                         "targets of quantization_config)");
      const io::TensorView& v = store.get(part.name);
      if (v.shape != part.shape)
        invalid_argument(v.file + ": tensor '" + part.name + "' has shape " + shape_str(v.shape) +
                         " but config.json implies " + shape_str(part.shape));
      used.insert(part.name);
      if (config.quant.fp8_checkpoint() && quant::quantizable_slot(t.slot)) {
        quant::check_fp8_part(store, part, config.quant, used);
      } else if (is_integer(v.dtype)) {
        invalid_argument(v.file + ": tensor '" + part.name + "' is " +
                         std::string(dtype_name(v.dtype)) + " but must be F32, BF16 or F16" +
                         (config.quant.int_weights() ? "" : " (config.json has no INT4/INT8 "
                                                            "quantization_config)"));
      } else if (is_fp8(v.dtype)) {
        invalid_argument(v.file + ": tensor '" + part.name + "' is " +
                         std::string(dtype_name(v.dtype)) +
                         (config.quant.fp8_checkpoint()
                              ? ", but only the linear layers' weights may be FP8"
                              : " but config.json has no FP8 quantization_config"));
      }
    }
  }
  for (const std::string& name : store.names()) {
    if (used.count(name) != 0) continue;
    if (name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older exports saved
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
    // An EAGLE head may carry a copy of the target's embedding (or LM head): the target's serve.
    if (config.eagle && (name == "embed_tokens.weight" || name == "model.embed_tokens.weight" ||
                         name == "lm_head.weight"))
      continue;
    if (quant::is_kv_scale_tensor(name, config.num_hidden_layers)) continue;  // validated by read_kv_scales below
    invalid_argument(store.find(name)->file + ": unexpected tensor '" + name + "' for " +
                     config.architecture + " with this config.json");
  }
  (void)quant::read_kv_scales(config, store);
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
