// Hugging Face config.json and generation_config.json for the Llama family (Llama, Mistral, Qwen2,
// Qwen3), its mixture-of-experts variants (Qwen3-MoE, Mixtral), Phi-3 and Gemma 2 / 3 (text).
// Parsing validates every field it reads; a malformed file throws pagellm::Error naming the file
// and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "quant/quant_config.h"

namespace pagellm::io {

struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kLongRope };
  Type type = Type::kNone;
  double factor = 1.0;
  // llama3 only
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // longrope (Phi-3's "longrope" / "su"): frequency i is divided by long_factor[i] when use_long,
  // else by short_factor[i] ([head_dim / 2] each), and cos / sin are scaled by attention_factor.
  // use_long follows the served context as vLLM's does: max_model_len >
  // original_max_position_embeddings (parsing assumes max_model_len = max_position_embeddings; the
  // model loader sets it from --max-model-len), so a sequence never changes factors midway.
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;
  bool use_long = false;
};

// A sparse mixture-of-experts MLP (Qwen3-MoE, Mixtral): a router picks top_k of num_experts
// SwiGLU experts per token from the softmax of its logits; the token's output is the sum of those
// experts' outputs weighted by their probabilities (renormalised over the top_k when
// norm_topk_prob). Layers listed as dense run the ordinary MLP of intermediate_size.
struct MoeConfig {
  int64_t num_experts = 0;        // 0: a dense model
  int64_t top_k = 0;              // num_experts_per_tok
  int64_t intermediate_size = 0;  // each expert's (Qwen3-MoE: moe_intermediate_size)
  bool norm_topk_prob = true;
  std::vector<bool> dense_layer;  // [num_hidden_layers]: true where the layer's MLP is dense
};

// What Gemma 2 and Gemma 3 (text) change in the Llama recipe. With `enabled`: RMSNorm scales by
// (1 + w); the embedding is multiplied by sqrt(hidden_size); the MLP is gelu-tanh(gate) * up; each
// layer normalises its attention and MLP outputs before adding them (post_attention_layernorm,
// post_feedforward_layernorm) and its MLP input with pre_feedforward_layernorm.
struct GemmaConfig {
  bool enabled = false;
  double query_pre_attn_scalar = 256.0;  // attention scores scale by its inverse square root
  double attn_logit_softcapping = 0.0;   // > 0: scores = cap * tanh(scores / cap) (Gemma 2)
  double final_logit_softcapping = 0.0;  // > 0: the same on the logits (Gemma 2)
  double local_rope_theta = 0.0;         // > 0: sliding layers' rotary base, unscaled (Gemma 3)
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::string model_type;    // e.g. "llama"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  // > 0: config.json's sliding_window cuts the context: the layers marked in sliding_layer attend
  // only the last sliding_window positions (the query's own included), on both backends.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layer;  // [num_hidden_layers] when sliding_window > 0
  // The window of (whole-model) layer `layer`, 0 for full attention.
  int64_t layer_window(int64_t layer) const {
    return sliding_window > 0 && sliding_layer.at(static_cast<size_t>(layer)) ? sliding_window : 0;
  }
  // Set by the model loader, not config.json: the KV cache groups layers by window so sliding
  // layers free what their window has passed (kv/kv_layout.h). Needs sliding layers and no
  // pipeline parallelism.
  bool hybrid_kv_cache = false;
  // Set by the EAGLE proposer's loader (spec/eagle_proposer.h), not config.json: this is an EAGLE
  // draft head. Its first layer takes fc(concat(embedding, feature)) of each token, layer 0 has no
  // input norm, there is no final norm, and the embedding and LM head are the target's. Tensor
  // names are eagle_prefix + "N.self_attn..." ("layers." or "model.layers."), plus fc.weight
  // [hidden, 2 * hidden] and, when eagle_fc_bias, fc.bias.
  bool eagle = false;
  bool eagle_fc_bias = false;
  std::string eagle_prefix = "layers.";
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2: always)
  bool qk_norm = false;         // per-head RMSNorm on q and k before RoPE (Qwen3)
  DType torch_dtype = DType::kF32;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  // config.json's quantization_config, combined with --quantization by the model loader.
  quant::QuantConfig quant;
  MoeConfig moe;
  GemmaConfig gemma;
  bool is_moe() const { return moe.num_experts > 0; }
  // Whether the MLP of (whole-model) layer `layer` is a mixture of experts.
  bool moe_layer(int64_t layer) const {
    return is_moe() && !moe.dense_layer.at(static_cast<size_t>(layer));
  }
};

// Default sampling values and stop ids from generation_config.json (all optional).
struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  // int or list in the file
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_new_tokens;
};

// Parses config.json text; `source` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& model_dir);

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& source);
// Returns an empty config when the folder has no generation_config.json.
GenerationConfig load_generation_config(const std::filesystem::path& model_dir);

}  // namespace pagellm::io
