// Weight-name mapping of Hugging Face Llama-family checkpoints onto LlamaWeights, and dummy
// weights.
#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "common/error.h"
#include "common/thread_pool.h"
#include "models/llama.h"

namespace pagellm::models {

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Where weights come from: a checkpoint or a random generator. fill() writes the tensor `name` of
// the given HF shape as fp32 into dst.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual void fill(const std::string& name, const std::vector<int64_t>& shape, float* dst) = 0;
};

class CheckpointSource : public WeightSource {
 public:
  explicit CheckpointSource(const io::WeightStore& store) : store_(store) {}

  void fill(const std::string& name, const std::vector<int64_t>& shape, float* dst) override {
    const io::TensorView& t = store_.get(name);
    if (t.shape != shape)
      invalid_argument(t.file + ": tensor '" + name + "' has shape " + shape_str(t.shape) +
                       " but config.json implies " + shape_str(shape));
    const size_t count = static_cast<size_t>(t.num_elements());
    // Data offsets inside a file need not be aligned to the element size; convert from an aligned
    // copy.
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0 && t.dtype != DType::kF32) {
      std::vector<uint16_t> aligned(count);
      std::memcpy(aligned.data(), t.data, t.num_bytes);
      convert_to_f32(t.dtype, aligned.data(), dst, count);
    } else {
      convert_to_f32(t.dtype, t.data, dst, count);  // F32 is a memcpy: alignment is irrelevant
    }
    used_.insert(name);
  }

  // Every checkpoint tensor must have been consumed, except ones HF ignores too.
  void check_all_used(const io::ModelConfig& config) const {
    for (const std::string& name : store_.names()) {
      if (used_.count(name) != 0) continue;
      if (name.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older exports saved
      if (name == "lm_head.weight" && config.tie_word_embeddings) continue;
      invalid_argument(store_.find(name)->file + ": unexpected tensor '" + name + "' for " +
                       config.architecture + " with this config.json");
    }
  }

 private:
  const io::WeightStore& store_;
  std::set<std::string> used_;
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Counter-based uniform weights: element i of tensor `name` depends only on (seed, name, i), so the
// fill can be threaded and is reproducible. Norm weights are 1 (as HF initialises them); matrices
// are uniform with a 1/sqrt(fan_in) bound so activations keep their scale through the layers.
class RandomSource : public WeightSource {
 public:
  explicit RandomSource(uint64_t seed) : seed_(seed) {}

  void fill(const std::string& name, const std::vector<int64_t>& shape, float* dst) override {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    if (name.ends_with("norm.weight")) {
      std::fill_n(dst, count, 1.0f);
      return;
    }
    uint64_t key = seed_;
    for (char c : name) key = splitmix64(key ^ static_cast<uint8_t>(c));
    float bound = 0.02f;
    if (shape.size() == 2)
      bound = name.find("embed_tokens") != std::string::npos
                  ? 1.0f
                  : 1.0f / std::sqrt(static_cast<float>(shape[1]));
    ThreadPool::global().parallel_for(
        static_cast<size_t>(count),
        [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) {
            const double u = static_cast<double>(splitmix64(key + i) >> 11) * 0x1.0p-53;  // [0, 1)
            dst[i] = static_cast<float>((2.0 * u - 1.0) * bound);
          }
        },
        1 << 16);
  }

 private:
  uint64_t seed_;
};

// Allocates and fills all weights in the HF layout, fusing q/k/v and gate/up as it goes.
LlamaWeights build_weights(const io::ModelConfig& c, WeightSource& src) {
  const int64_t hidden = c.hidden_size, hd = c.head_dim, inter = c.intermediate_size;
  const int64_t q_rows = c.num_attention_heads * hd, kv_rows = c.num_key_value_heads * hd;
  LlamaWeights w;
  w.embed.resize(static_cast<size_t>(c.vocab_size * hidden));
  src.fill("model.embed_tokens.weight", {c.vocab_size, hidden}, w.embed.data());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LlamaLayerWeights& l = w.layers.emplace_back();
    l.input_norm.resize(static_cast<size_t>(hidden));
    src.fill(p + "input_layernorm.weight", {hidden}, l.input_norm.data());
    l.qkv.resize(static_cast<size_t>((q_rows + 2 * kv_rows) * hidden));
    src.fill(p + "self_attn.q_proj.weight", {q_rows, hidden}, l.qkv.data());
    src.fill(p + "self_attn.k_proj.weight", {kv_rows, hidden}, l.qkv.data() + q_rows * hidden);
    src.fill(p + "self_attn.v_proj.weight", {kv_rows, hidden},
             l.qkv.data() + (q_rows + kv_rows) * hidden);
    if (c.attention_bias) {
      l.qkv_bias.resize(static_cast<size_t>(q_rows + 2 * kv_rows));
      src.fill(p + "self_attn.q_proj.bias", {q_rows}, l.qkv_bias.data());
      src.fill(p + "self_attn.k_proj.bias", {kv_rows}, l.qkv_bias.data() + q_rows);
      src.fill(p + "self_attn.v_proj.bias", {kv_rows}, l.qkv_bias.data() + q_rows + kv_rows);
    }
    if (c.qk_norm) {
      l.q_norm.resize(static_cast<size_t>(hd));
      l.k_norm.resize(static_cast<size_t>(hd));
      src.fill(p + "self_attn.q_norm.weight", {hd}, l.q_norm.data());
      src.fill(p + "self_attn.k_norm.weight", {hd}, l.k_norm.data());
    }
    l.o_proj.resize(static_cast<size_t>(hidden * q_rows));
    src.fill(p + "self_attn.o_proj.weight", {hidden, q_rows}, l.o_proj.data());
    l.post_norm.resize(static_cast<size_t>(hidden));
    src.fill(p + "post_attention_layernorm.weight", {hidden}, l.post_norm.data());
    l.gate_up.resize(static_cast<size_t>(2 * inter * hidden));
    src.fill(p + "mlp.gate_proj.weight", {inter, hidden}, l.gate_up.data());
    src.fill(p + "mlp.up_proj.weight", {inter, hidden}, l.gate_up.data() + inter * hidden);
    l.down.resize(static_cast<size_t>(hidden * inter));
    src.fill(p + "mlp.down_proj.weight", {hidden, inter}, l.down.data());
  }
  w.final_norm.resize(static_cast<size_t>(hidden));
  src.fill("model.norm.weight", {hidden}, w.final_norm.data());
  if (!c.tie_word_embeddings) {
    w.lm_head.resize(static_cast<size_t>(c.vocab_size * hidden));
    src.fill("lm_head.weight", {c.vocab_size, hidden}, w.lm_head.data());
  }
  return w;
}

}  // namespace

LlamaWeights load_llama_weights(const io::ModelConfig& config, const io::WeightStore& store) {
  CheckpointSource src(store);
  LlamaWeights w = build_weights(config, src);
  src.check_all_used(config);
  return w;
}

LlamaWeights random_llama_weights(const io::ModelConfig& config, uint64_t seed) {
  RandomSource src(seed);
  return build_weights(config, src);
}

uint64_t llama_weight_bytes(const io::ModelConfig& c) {
  // Sizes are bounded by parse_model_config, so this cannot overflow.
  const uint64_t hidden = static_cast<uint64_t>(c.hidden_size),
                 hd = static_cast<uint64_t>(c.head_dim);
  const uint64_t q_rows = static_cast<uint64_t>(c.num_attention_heads) * hd;
  const uint64_t kv_rows = static_cast<uint64_t>(c.num_key_value_heads) * hd;
  const uint64_t per_layer = (q_rows + 2 * kv_rows) * hidden + hidden * q_rows +
                             3 * static_cast<uint64_t>(c.intermediate_size) * hidden + 2 * hidden;
  const uint64_t embed =
      static_cast<uint64_t>(c.vocab_size) * hidden * (c.tie_word_embeddings ? 1 : 2);
  return 4 * (per_layer * static_cast<uint64_t>(c.num_hidden_layers) + embed + hidden);
}

}  // namespace pagellm::models
