// LlamaWeights (the CPU backend's fp32 host weights) filled by walking the shared weight plan
// (weight_plan.h): from a checkpoint, or with dummy weights.
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/thread_pool.h"
#include "models/llama.h"
#include "models/weight_plan.h"

namespace pagellm::models {

namespace {

// Where weights come from: a checkpoint or a random generator. fill() writes the HF tensor
// `tensor` as fp32 into dst.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual void fill(const HfTensorSpec& tensor, float* dst) = 0;
};

// Reads a checkpoint that check_llama_checkpoint() has validated (names and shapes).
class CheckpointSource : public WeightSource {
 public:
  explicit CheckpointSource(const io::WeightStore& store) : store_(store) {}

  void fill(const HfTensorSpec& tensor, float* dst) override {
    const io::TensorView& t = store_.get(tensor.name);
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
  }

 private:
  const io::WeightStore& store_;
};

// Counter-based uniform weights (dummy_fill): element i of a tensor depends only on (seed, name,
// i), so the fill can be threaded and is reproducible, and the GPU generator makes the same
// numbers.
class RandomSource : public WeightSource {
 public:
  explicit RandomSource(uint64_t seed) : seed_(seed) {}

  void fill(const HfTensorSpec& tensor, float* dst) override {
    const int64_t count = tensor.num_elements();
    const DummyFill f = dummy_fill(tensor, seed_);
    if (f.ones) {
      std::fill_n(dst, count, 1.0f);
      return;
    }
    ThreadPool::global().parallel_for(
        static_cast<size_t>(count),
        [&](size_t begin, size_t end) {
          for (size_t i = begin; i < end; ++i) {
            const double u =
                static_cast<double>(splitmix64(f.key + i) >> 11) * 0x1.0p-53;  // [0, 1)
            dst[i] = static_cast<float>((2.0 * u - 1.0) * f.bound);
          }
        },
        1 << 16);
  }

 private:
  uint64_t seed_;
};

// Allocates and fills all weights in the HF layout, fusing parts as the plan says.
LlamaWeights build_weights(const io::ModelConfig& c, const std::vector<WeightTensorSpec>& plan,
                           WeightSource& src) {
  LlamaWeights w;
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (const WeightTensorSpec& t : plan) {
    std::vector<float>& dst = weight_slot(w, t);
    dst.resize(static_cast<size_t>(t.num_elements()));
    float* out = dst.data();
    for (const HfTensorSpec& part : t.parts) {
      src.fill(part, out);
      out += part.num_elements();
    }
  }
  return w;
}

}  // namespace

LlamaWeights load_llama_weights(const io::ModelConfig& config, const io::WeightStore& store) {
  const std::vector<WeightTensorSpec> plan = llama_weight_plan(config);
  check_llama_checkpoint(config, store, plan);
  CheckpointSource src(store);
  return build_weights(config, plan, src);
}

LlamaWeights random_llama_weights(const io::ModelConfig& config, uint64_t seed) {
  RandomSource src(seed);
  return build_weights(config, llama_weight_plan(config), src);
}

uint64_t llama_weight_bytes(const io::ModelConfig& c) {
  return 4 * plan_num_elements(llama_weight_plan(c));
}

}  // namespace pagellm::models
