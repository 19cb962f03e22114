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
#include "parallel/shard.h"

namespace pagellm::models {

// The runtime tensor a plan entry fills: model-level (embed, final norm, LM head) or per layer.
enum class WeightSlot {
  kEmbed,        // [vocab, hidden]
  kInputNorm,    // [hidden]
  kQkv,          // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]: q, k, v rows
  kQkvBias,      // [(num_heads + 2 * num_kv_heads) * head_dim]
  kQNorm,        // [head_dim]
  kKNorm,        // [head_dim]
  kOProj,        // [hidden, num_heads * head_dim]
  kPostNorm,     // [hidden]: the MLP's input norm
  kAttnOutNorm,  // [hidden]: Gemma's norm of the attention output
  kMlpOutNorm,   // [hidden]: Gemma's norm of the MLP output
  kGateUp,       // [2 * intermediate, hidden]: gate rows, then up rows
  kDown,         // [hidden, intermediate]
  // A mixture-of-experts layer's MLP instead of kGateUp / kDown: the router and the experts
  // stacked, each expert's tensors concatenated from its own checkpoint tensors.
  kRouter,         // [num_experts, hidden]
  kExpertsGateUp,  // [num_experts, 2 * expert intermediate, hidden]: per expert gate rows, up rows
  kExpertsDown,    // [num_experts, hidden, expert intermediate]
  kFinalNorm,      // [hidden]
  kLmHead,         // [vocab, hidden]; only when not tied to the embedding
  // An EAGLE head's input projection (io::ModelConfig::eagle): fc(concat(embedding, feature)).
  kEagleFc,      // [hidden, 2 * hidden]
  kEagleFcBias,  // [hidden]
};

// The part of a checkpoint tensor one rank holds: `count` indices from `begin` along dimension
// `dim` (0: rows, 1: columns of a matrix); dim -1 is the whole tensor.
struct TensorSlice {
  int dim = -1;
  int64_t begin = 0;
  int64_t count = 0;
};

// One tensor of a Hugging Face checkpoint, with the full shape config.json implies for it, and the
// slice of it this rank loads (the whole tensor without tensor parallelism).
struct HfTensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // the checkpoint's shape
  TensorSlice slice;
  // Shape and element count of the slice (of the whole tensor when unsliced).
  std::vector<int64_t> local_shape() const;
  int64_t num_elements() const;
};

// Calls fn(full_offset, local_offset, count) for each contiguous run of t's slice, in elements of
// the full tensor's row-major order and of the slice's: one run for an unsliced tensor or a row
// slice, one per row for a column slice.
template <typename Fn>
void for_each_slice_run(const HfTensorSpec& t, Fn&& fn) {
  const int64_t total = [&] {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return n;
  }();
  if (t.slice.dim < 0) {
    fn(int64_t{0}, int64_t{0}, total);
    return;
  }
  const int64_t rows = t.shape[0], inner = rows > 0 ? total / rows : 0;
  if (t.slice.dim == 0) {
    fn(t.slice.begin * inner, int64_t{0}, t.slice.count * inner);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) fn(r * inner + t.slice.begin, r * t.slice.count, t.slice.count);
}

// One runtime tensor: its parts concatenated along dimension 0, in order.
struct WeightTensorSpec {
  WeightSlot slot = WeightSlot::kEmbed;
  int layer = -1;     // -1 for model-level tensors
  std::string label;  // for messages: "model.layers.3.qkv", or the HF name of a one-part tensor
  std::vector<HfTensorSpec> parts;
  int64_t num_elements() const;
};

// The plan of a config for one rank, in load order (embedding, layer by layer, final norm, LM
// head; an EAGLE head: fc, then its layers without layer 0's input norm, and no embedding, final
// norm or LM head, which are the target's): the stage's layers only; column-parallel parts sliced
// by rows, row-parallel ones by columns, the embedding and LM head by vocabulary rows (see
// parallel/shard.h). The first stage holds the embedding, the last the final norm and LM head
// (taken from the embedding when tied and the embedding lives on another stage). Layer indices in
// the plan are stage-local.
std::vector<WeightTensorSpec> llama_weight_plan(const io::ModelConfig& config,
                                                const parallel::ShardSpec& shard = {});

// The runtime tensor of `model` that plan entry `t` fills. Model is any weight holder that names
// its tensors like LlamaWeights (embed, final_norm, lm_head, layers[i].qkv, ...), so the CPU
// weights and the CUDA runner's device tensors share this mapping.
template <typename Model>
auto& weight_slot(Model& model, const WeightTensorSpec& t) {
  // An EAGLE head's fc: only the holders that run EAGLE heads have it (the CPU's LlamaWeights).
  if constexpr (requires { model.eagle_fc; }) {
    if (t.slot == WeightSlot::kEagleFc) return model.eagle_fc;
    if (t.slot == WeightSlot::kEagleFcBias) return model.eagle_fc_bias;
  }
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
      case WeightSlot::kAttnOutNorm:
        return l.attn_out_norm;
      case WeightSlot::kMlpOutNorm:
        return l.mlp_out_norm;
      case WeightSlot::kGateUp:
        return l.gate_up;
      case WeightSlot::kDown:
        return l.down;
      case WeightSlot::kRouter:
        return l.router;
      case WeightSlot::kExpertsGateUp:
        return l.experts_gate_up;
      case WeightSlot::kExpertsDown:
        return l.experts_down;
      default:
        break;
    }
  }
  throw_error(ErrorKind::kInternal, "weight plan: " + t.label + " names no runtime tensor");
}

// Total elements of all runtime tensors of a plan.
uint64_t plan_num_elements(const std::vector<WeightTensorSpec>& plan);

// Checks that the checkpoint holds exactly the full model's tensors with config.json's shapes, before
// any weight is read (every rank checks the whole checkpoint: a rank's plan names a subset). Throws pagellm::Error naming the file and tensor: "FILE: missing tensor NAME",
// "FILE: tensor 'NAME' has shape [...] but config.json implies [...]", or "FILE: unexpected tensor
// 'NAME' ..." (rotary_emb.inv_freq buffers, and lm_head.weight of a tied model, are ignored as
// Hugging Face ignores them).
void check_llama_checkpoint(const io::ModelConfig& config, const io::WeightStore& store);

// How --load-format dummy fills one HF tensor, shared by the CPU and GPU generators so both build
// the same random model: norm weights are 1 (as HF initialises them); everything else is
// (2u - 1) * bound with u = (splitmix64(key + i) >> 11) * 2^-53 for element i, the key derived from
// (seed, name) and bound = 1 for the embedding, 1/sqrt(fan_in) for matrices, 0.02 for vectors. i
// is the element's index in the full tensor, so a rank's slice holds the full model's numbers.
struct DummyFill {
  bool ones = false;
  uint64_t key = 0;
  double bound = 0;
};
DummyFill dummy_fill(const HfTensorSpec& tensor, uint64_t seed);

uint64_t splitmix64(uint64_t x);

}  // namespace pagellm::models
