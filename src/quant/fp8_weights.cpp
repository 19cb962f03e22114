#include "quant/fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/fp8.h"
#include "quant/tensor_errors.h"

namespace pagellm::quant {

namespace {

// What the scale tensor of an [n, k] weight holds, from its shape; throws for a shape that fits
// no layout the config allows.
WeightScales scale_layout(const io::TensorView& s, int64_t n, int64_t k, const QuantConfig& q) {
  const std::vector<int64_t>& sh = s.shape;
  if (q.weight_scales == WeightScales::kBlock) {
    const std::vector<int64_t> want{ceil_div(n, q.block_n), ceil_div(k, q.block_k)};
    if (sh != want)
      bad_tensor(s, "has shape " + shape_str(sh) + " but " + std::to_string(q.block_n) + "x" +
                        std::to_string(q.block_k) + " block scales of a [" + std::to_string(n) +
                        ", " + std::to_string(k) + "] weight need " + shape_str(want));
    return WeightScales::kBlock;
  }
  if (scalar_shape(sh)) return WeightScales::kTensor;
  if ((sh.size() == 1 && sh[0] == n) || (sh.size() == 2 && sh[0] == n && sh[1] == 1))
    return WeightScales::kChannel;
  bad_tensor(s, "has shape " + shape_str(sh) + " but a per-tensor ([] or [1]) or per-channel ([" +
                    std::to_string(n) + "] or [" + std::to_string(n) +
                    ", 1]) weight scale is expected");
}

// Scales must be finite and positive (a zero or NaN scale silently zeroes or poisons a layer).
void check_positive(const io::TensorView& t) {
  for (float v : read_f32(t))
    if (!(std::isfinite(v) && v > 0))
      bad_tensor(t, "holds " + std::to_string(v) + "; scales must be finite and positive");
}

const io::TensorView& scale_tensor(const io::WeightStore& store, const models::HfTensorSpec& part,
                                   const QuantConfig& q) {
  const std::string name = sibling_name(part.name, q.scale_suffix);
  const io::TensorView* s = store.find(name);
  if (!s)
    invalid_argument(store.source() + ": FP8 weight '" + part.name + "' has no scale tensor '" +
                     name + "'");
  return *s;
}

}  // namespace

std::vector<float> read_f32(const io::TensorView& t) {
  std::vector<float> out(size_t(t.num_elements()));
  std::vector<uint8_t> aligned(t.num_bytes);  // data offsets need not be aligned
  if (t.num_bytes > 0) std::memcpy(aligned.data(), t.data, t.num_bytes);
  convert_to_f32(t.dtype, aligned.data(), out.data(), out.size());
  return out;
}

bool scalar_shape(const std::vector<int64_t>& s) {
  return s.empty() || (s.size() == 1 && s[0] == 1) || (s.size() == 2 && s[0] == 1 && s[1] == 1);
}

bool quantized_slot(models::WeightSlot slot) {
  using models::WeightSlot;
  return slot == WeightSlot::kQkv || slot == WeightSlot::kOProj || slot == WeightSlot::kGateUp ||
         slot == WeightSlot::kDown;
}

bool fp8_expert_slot(models::WeightSlot slot) {
  return slot == models::WeightSlot::kExpertsGateUp || slot == models::WeightSlot::kExpertsDown;
}

bool quantizable_slot(models::WeightSlot slot) {
  return quantized_slot(slot) || fp8_expert_slot(slot);
}

std::string sibling_name(const std::string& weight_name, const std::string& suffix) {
  const std::string tail = ".weight";
  if (!weight_name.ends_with(tail)) return weight_name + "." + suffix;
  return weight_name.substr(0, weight_name.size() - tail.size() + 1) + suffix;
}

bool part_is_fp8(const io::WeightStore& store, const models::HfTensorSpec& part) {
  return is_fp8(store.get(part.name).dtype);
}

void check_fp8_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                    const QuantConfig& q, std::set<std::string, std::less<>>& used) {
  const io::TensorView& w = store.get(part.name);
  if (w.dtype == DType::kF8E5M2)
    bad_tensor(w, "is F8_E5M2; FP8 weights must be F8_E4M3");
  for (const char* suffix : {"input_scale", "input_scale_ub"}) {
    const io::TensorView* in = store.find(sibling_name(part.name, suffix));
    if (!in) continue;
    if (!scalar_shape(in->shape) || is_fp8(in->dtype) || is_integer(in->dtype))
      bad_tensor(*in, "must be a scalar ([] or [1]) F32/BF16/F16 activation scale, got " +
                          std::string(dtype_name(in->dtype)) + " " + shape_str(in->shape));
    check_positive(*in);
    used.insert(in->name);
  }
  // Static activation schemes promise an input scale for every FP8 layer (vLLM refuses the
  // checkpoint without one; pagellm quantizes activations per token, but a missing tensor means a
  // broken export).
  if (q.static_activations && w.dtype == DType::kF8E4M3 &&
      !store.find(sibling_name(part.name, "input_scale")))
    invalid_argument(store.source() + ": FP8 weight '" + part.name + "' has no '" +
                     sibling_name(part.name, "input_scale") +
                     "', which its static activation scheme needs");
  const io::TensorView* s = store.find(sibling_name(part.name, q.scale_suffix));
  if (w.dtype != DType::kF8E4M3) {  // a module the checkpoint left in 16 bits
    if (s) bad_tensor(*s, "scales '" + part.name + "', which is not FP8 but " +
                              std::string(dtype_name(w.dtype)));
    return;
  }
  const io::TensorView& scale = scale_tensor(store, part, q);
  if (is_fp8(scale.dtype) || is_integer(scale.dtype))
    bad_tensor(scale, "is " + std::string(dtype_name(scale.dtype)) +
                          "; weight scales must be F32, BF16 or F16");
  scale_layout(scale, part.shape[0], part.shape[1], q);
  check_positive(scale);
  used.insert(scale.name);
}

std::vector<float> part_row_scales(const io::WeightStore& store, const models::HfTensorSpec& part,
                                   const QuantConfig& q) {
  const io::TensorView& s = scale_tensor(store, part, q);
  const int64_t n = part.shape[0];
  const std::vector<float> all = read_f32(s);
  const bool row_slice = part.slice.dim == 0;
  const int64_t begin = row_slice ? part.slice.begin : 0, count = row_slice ? part.slice.count : n;
  std::vector<float> out(static_cast<size_t>(count));
  const bool per_tensor = scale_layout(s, n, part.shape[1], q) == WeightScales::kTensor;
  for (int64_t r = 0; r < count; ++r) out[size_t(r)] = per_tensor ? all[0] : all[size_t(begin + r)];
  return out;
}

std::vector<float> part_block_scales(const io::WeightStore& store, const models::HfTensorSpec& part,
                                     const QuantConfig& q) {
  const io::TensorView& s = scale_tensor(store, part, q);
  scale_layout(s, part.shape[0], part.shape[1], q);
  return read_f32(s);
}

void apply_part_scales(const io::WeightStore& store, const models::HfTensorSpec& part,
                       const QuantConfig& q, float* local) {
  const std::vector<int64_t> ls = part.local_shape();
  const int64_t rows = ls[0], cols = ls[1];
  if (q.weight_scales != WeightScales::kBlock) {
    const std::vector<float> scales = part_row_scales(store, part, q);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) local[r * cols + c] *= scales[size_t(r)];
    return;
  }
  const std::vector<float> blocks = part_block_scales(store, part, q);
  const int64_t row0 = part.slice.dim == 0 ? part.slice.begin : 0;
  const int64_t col0 = part.slice.dim == 1 ? part.slice.begin : 0;
  const int64_t block_cols = ceil_div(part.shape[1], q.block_k);
  for (int64_t r = 0; r < rows; ++r) {
    const float* srow = blocks.data() + (row0 + r) / q.block_n * block_cols;
    for (int64_t c = 0; c < cols; ++c) local[r * cols + c] *= srow[(col0 + c) / q.block_k];
  }
}

void fake_quantize_rows(float* w, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = w + r * cols;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(row[c]));
    const float scale = std::max(amax, 1e-12f) / kFp8E4M3Max;
    for (int64_t c = 0; c < cols; ++c)
      row[c] = fp8_to_f32(f32_to_fp8(row[c] / scale, Fp8Format::kE4M3), Fp8Format::kE4M3) * scale;
  }
}

}  // namespace pagellm::quant
