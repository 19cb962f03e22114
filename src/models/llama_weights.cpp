// LlamaWeights (the CPU backend's fp32 host weights) filled by walking the shared weight plan
// (weight_plan.h): from a checkpoint, or with dummy weights.
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/thread_pool.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "quant/fp8_weights.h"
#include "quant/int_weights.h"

namespace pagellm::models {

namespace {

// Where weights come from: a checkpoint or a random generator. fill() writes the HF tensor
// `tensor` as fp32 into dst.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual void fill(const HfTensorSpec& tensor, float* dst) = 0;
  // True when the source stores `tensor` in FP8: fill() then gives the dequantized weight.
  virtual bool stored_fp8(const HfTensorSpec& tensor) const { return false; }
  // Writes an INT4 / INT8 config's quantized linear weight, dequantized (random weights: fill()).
  virtual void fill_int(const HfTensorSpec& tensor, float* dst) { fill(tensor, dst); }
};

// Reads a checkpoint that check_llama_checkpoint() has validated (names and shapes).
class CheckpointSource : public WeightSource {
 public:
  CheckpointSource(const io::WeightStore& store, const quant::QuantConfig& quant)
      : store_(store), quant_(quant) {}

  bool stored_fp8(const HfTensorSpec& tensor) const override {
    return quant_.fp8_checkpoint() && quant::part_is_fp8(store_, tensor);
  }

  // Reads only the rank's slice, run by run, straight from the mapping.
  void fill(const HfTensorSpec& tensor, float* dst) override {
    const io::TensorView& t = store_.get(tensor.name);
    const size_t esz = dtype_size(t.dtype);
    std::vector<uint16_t> aligned;
    for_each_slice_run(tensor, [&](int64_t full, int64_t local, int64_t count) {
      const uint8_t* src = t.data + size_t(full) * esz;
      // Data offsets inside a file need not be aligned to the element size; convert from an
      // aligned copy (F32 is a memcpy: alignment is irrelevant).
      if (reinterpret_cast<uintptr_t>(src) % esz != 0 && t.dtype != DType::kF32) {
        aligned.resize(size_t(count));
        std::memcpy(aligned.data(), src, size_t(count) * esz);
        src = reinterpret_cast<const uint8_t*>(aligned.data());
      }
      convert_to_f32(t.dtype, src, dst + local, size_t(count));
    });
    if (is_fp8(t.dtype)) quant::apply_part_scales(store_, tensor, quant_, dst);
  }

  void fill_int(const HfTensorSpec& tensor, float* dst) override {
    quant::dequantize_int_part(store_, tensor, quant_, dst);
  }

 private:
  const io::WeightStore& store_;
  const quant::QuantConfig& quant_;
};

// Counter-based uniform weights (dummy_fill): element i of a tensor depends only on (seed, name,
// i), so the fill can be threaded and is reproducible, and the GPU generator makes the same
// numbers.
class RandomSource : public WeightSource {
 public:
  explicit RandomSource(uint64_t seed) : seed_(seed) {}

  void fill(const HfTensorSpec& tensor, float* dst) override {
    const DummyFill f = dummy_fill(tensor, seed_);
    if (f.ones) {
      std::fill_n(dst, tensor.num_elements(), 1.0f);
      return;
    }
    // Element i of the full tensor gets key + i, so a slice holds the full model's numbers.
    for_each_slice_run(tensor, [&](int64_t full, int64_t local, int64_t count) {
      ThreadPool::global().parallel_for(
          static_cast<size_t>(count),
          [&](size_t begin, size_t end) {
            for (size_t i = begin; i < end; ++i) {
              const double u =
                  static_cast<double>(splitmix64(f.key + uint64_t(full) + i) >> 11) * 0x1.0p-53;
              dst[size_t(local) + i] = static_cast<float>((2.0 * u - 1.0) * f.bound);  // u in [0,1)
            }
          },
          1 << 16);
    });
  }

 private:
  uint64_t seed_;
};

void mark_fp8(LlamaLayerWeights& l, WeightSlot slot) {
  switch (slot) {
    case WeightSlot::kQkv:
      l.qkv_fp8 = true;
      break;
    case WeightSlot::kOProj:
      l.o_proj_fp8 = true;
      break;
    case WeightSlot::kGateUp:
      l.gate_up_fp8 = true;
      break;
    case WeightSlot::kDown:
      l.down_fp8 = true;
      break;
    default:
      throw_error(ErrorKind::kInternal, "FP8 weights in a slot that has no FP8 projection");
  }
}

// Allocates and fills all weights in the HF layout, fusing parts as the plan says. INT4 / INT8
// weights are dequantized (the CPU computes with them in fp32). Under an FP8
// config a quantized layer (a projection, or a mixture-of-experts layer's experts) holds the
// weights the GPU computes with: FP8 parts dequantized, and 16-bit parts (all of them with
// --quantization fp8; those of a layer the checkpoint stores partly in FP8) quantized per channel
// and dequantized.
LlamaWeights build_weights(const std::vector<WeightTensorSpec>& plan, WeightSource& src,
                           const quant::QuantConfig& quant) {
  LlamaWeights w;
  for (const WeightTensorSpec& t : plan)
    if (t.layer >= 0 && size_t(t.layer) >= w.layers.size()) w.layers.resize(size_t(t.layer) + 1);
  for (const WeightTensorSpec& t : plan) {
    std::vector<float>& dst = weight_slot(w, t);
    dst.resize(static_cast<size_t>(t.num_elements()));
    float* out = dst.data();
    // Experts quantize like projections but keep 16-bit activations (the GPU's W8A16 kernels).
    const bool fp8_slot = quant::quantizable_slot(t.slot);
    bool fp8_layer = quant.online && fp8_slot;
    if (quant.fp8_checkpoint() && fp8_slot)
      for (const HfTensorSpec& part : t.parts) fp8_layer = fp8_layer || src.stored_fp8(part);
    if (fp8_layer && quant::quantized_slot(t.slot)) mark_fp8(w.layers.at(size_t(t.layer)), t.slot);
    const bool int_slot = quant.int_weights() && quant::quantizable_slot(t.slot);
    for (const HfTensorSpec& part : t.parts) {
      if (int_slot && quant::int_part_quantized(quant, part.name))
        src.fill_int(part, out);
      else
        src.fill(part, out);
      if (fp8_layer && !src.stored_fp8(part)) {
        const std::vector<int64_t> shape = part.local_shape();
        quant::fake_quantize_rows(out, shape[0], shape[1]);
      }
      out += part.num_elements();
    }
  }
  return w;
}

}  // namespace

LlamaWeights load_llama_weights(const io::ModelConfig& config, const io::WeightStore& store,
                                const parallel::ShardSpec& shard) {
  check_llama_checkpoint(config, store);
  CheckpointSource src(store, config.quant);
  return build_weights(llama_weight_plan(config, shard), src, config.quant);
}

LlamaWeights random_llama_weights(const io::ModelConfig& config, uint64_t seed,
                                  const parallel::ShardSpec& shard) {
  RandomSource src(seed);
  // Random weights are 16-bit numbers: under any FP8 config they are quantized as a 16-bit
  // checkpoint under --quantization fp8 is (the CUDA runner does the same).
  quant::QuantConfig quant = config.quant;
  quant.online = quant.fp8();
  return build_weights(llama_weight_plan(config, shard), src, quant);
}

LlamaWeights load_target_embeddings(const io::ModelConfig& target, const io::WeightStore* store,
                                    uint64_t seed) {
  std::vector<WeightTensorSpec> plan;
  for (WeightTensorSpec& t : llama_weight_plan(target))
    if (t.slot == WeightSlot::kEmbed || t.slot == WeightSlot::kLmHead) plan.push_back(std::move(t));
  if (store) {
    CheckpointSource src(*store, target.quant);
    return build_weights(plan, src, target.quant);
  }
  RandomSource src(seed);
  return build_weights(plan, src, target.quant);
}

uint64_t llama_weight_bytes(const io::ModelConfig& c, const parallel::ShardSpec& shard) {
  return 4 * plan_num_elements(llama_weight_plan(c, shard));
}

}  // namespace pagellm::models
