// The one description of a Llama-family checkpoint that every loader follows: which Hugging Face
// tensors exist, which shapes config.json implies for them, and how they are concatenated into the
// runtime's fused tensors (q/k/v rows into qkv, gate/up rows into gate_up). The CPU loader
// (llama_weights.cpp) and the CUDA runner's streaming loader both walk this plan, so names, shapes,
// fusion order, validation errors and dummy weights cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace pagellm::models {

// The runtime tensor a plan entry fills: model-level (embed, final norm, LM head) or per layer.
enum class WeightSlot {
  kEmbed,      // [vocab, hidden]
  kInputNorm,  // [hidden]
  kQkv,        // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]: q, k, v rows
  kQkvBias,    // [(num_heads + 2 * num_kv_heads) * head_dim]
  kQNorm,      // [head_dim]
  kKNorm,      // [head_dim]
  kOProj,      // [hidden, num_heads * head_dim]
  kPostNorm,   // [hidden]
  kGateUp,     // [2 * intermediate, hidden]: gate rows, then up rows
  kDown,       // [hidden, intermediate]
  kFinalNorm,  // [hidden]
  kLmHead,     // [vocab, hidden]; only when not tied to the embedding
};

// One tensor of a Hugging Face checkpoint, with the shape config.json implies for it.
struct HfTensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t num_elements() const;
};

// One runtime tensor: its parts concatenated along dimension 0, in order.
struct WeightTensorSpec {
  WeightSlot slot = WeightSlot::kEmbed;
  int layer = -1;     // -1 for model-level tensors
  std::string label;  // for messages: "model.layers.3.qkv", or the HF name of a one-part tensor
  std::vector<HfTensorSpec> parts;
  int64_t num_elements() const;
};

// The plan of a config, in load order (embedding, layer by layer, final norm, LM head).
std::vector<WeightTensorSpec> llama_weight_plan(const io::ModelConfig& config);

// The runtime tensor of `model` that plan entry `t` fills. Model is any weight holder that names
// its tensors like LlamaWeights (embed, final_norm, lm_head, layers[i].qkv, ...), so the CPU
// weights and the CUDA runner's device tensors share this mapping.
template <typename Model>
auto& weight_slot(Model& model, const WeightTensorSpec& t) {
  if (t.layer < 0) {
    switch (t.slot) {
      case WeightSlot::kEmbed:
        return model.embed;
      case WeightSlot::kFinalNorm:
        return model.final_norm;
      case WeightSlot::kLmHead:
        return model.lm_head;
      default:
        break;
    }
  } else {
    auto& l = model.layers.at(static_cast<size_t>(t.layer));
    switch (t.slot) {
      case WeightSlot::kInputNorm:
        return l.input_norm;
      case WeightSlot::kQkv:
        return l.qkv;
      case WeightSlot::kQkvBias:
        return l.qkv_bias;
      case WeightSlot::kQNorm:
        return l.q_norm;
      case WeightSlot::kKNorm:
        return l.k_norm;
      case WeightSlot::kOProj:
        return l.o_proj;
      case WeightSlot::kPostNorm:
        return l.post_norm;
      case WeightSlot::kGateUp:
        return l.gate_up;
      case WeightSlot::kDown:
        return l.down;
      default:
        break;
    }
  }
  throw_error(ErrorKind::kInternal, "weight plan: " + t.label + " names no runtime tensor");
}

// Total elements of all runtime tensors of a plan.
uint64_t plan_num_elements(const std::vector<WeightTensorSpec>& plan);

// Checks that the checkpoint holds exactly the plan's tensors with the plan's shapes, before any
// weight is read. Throws pagellm::Error naming the file and tensor: "FILE: missing tensor NAME",
// "FILE: tensor 'NAME' has shape [...] but config.json implies [...]", or "FILE: unexpected tensor
// 'NAME' ..." (rotary_emb.inv_freq buffers, and lm_head.weight of a tied model, are ignored as
// Hugging Face ignores them).
void check_llama_checkpoint(const io::ModelConfig& config, const io::WeightStore& store,
                            const std::vector<WeightTensorSpec>& plan);

// How --load-format dummy fills one HF tensor, shared by the CPU and GPU generators so both build
// the same random model: norm weights are 1 (as HF initialises them); everything else is
// (2u - 1) * bound with u = (splitmix64(key + i) >> 11) * 2^-53 for element i, the key derived from
// (seed, name) and bound = 1 for the embedding, 1/sqrt(fan_in) for matrices, 0.02 for vectors.
struct DummyFill {
  bool ones = false;
  uint64_t key = 0;
  double bound = 0;
};
DummyFill dummy_fill(const HfTensorSpec& tensor, uint64_t seed);

uint64_t splitmix64(uint64_t x);

}  // namespace pagellm::models
