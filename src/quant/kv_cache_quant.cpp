#include "quant/kv_cache_quant.h"

#include <cmath>

#include "common/error.h"
#include "quant/fp8_weights.h"

namespace pagellm::quant {

namespace {

// The per-layer tensor names, k first: [k, v] of each naming scheme ("" = shared kv_scale below).
constexpr std::string_view kKvScaleSuffixes[][2] = {
    {"self_attn.k_scale", "self_attn.v_scale"},
    {"self_attn.k_proj.output_scale", "self_attn.v_proj.output_scale"},
};
constexpr std::string_view kSharedKvScale = "self_attn.kv_scale";

float scale_value(const io::TensorView& t) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16)
    invalid_argument(t.file + ": tensor '" + t.name + "' is " + std::string(dtype_name(t.dtype)) +
                     "; a KV cache scale must be F32, BF16 or F16");
  if (!scalar_shape(t.shape))
    invalid_argument(t.file + ": tensor '" + t.name + "' is not a scalar; KV cache scales are per "
                     "tensor ([] or [1])");
  const float v = read_f32(t)[0];
  if (!(std::isfinite(v) && v > 0))
    invalid_argument(t.file + ": tensor '" + t.name + "' holds " + std::to_string(v) +
                     "; scales must be finite and positive");
  return v;
}

}  // namespace

std::optional<DType> parse_kv_cache_dtype(const std::string& flag) {
  if (flag == "auto") return std::nullopt;
  if (flag == "fp8" || flag == "fp8_e4m3") return DType::kF8E4M3;
  if (flag == "fp8_e5m2") return DType::kF8E5M2;
  invalid_argument("--kv-cache-dtype: expected auto, fp8, fp8_e4m3 or fp8_e5m2, got '" + flag + "'");
}

std::string describe_kv_cache(std::optional<DType> fp8, bool checkpoint_scales, bool calculate) {
  if (!fp8)
    return checkpoint_scales
               ? "the checkpoint carries FP8 KV cache scales; --kv-cache-dtype fp8 uses them"
               : "";
  return std::string(*fp8 == DType::kF8E5M2 ? "fp8_e5m2" : "fp8_e4m3") + " KV cache (" +
         (calculate           ? "per-layer scales calculated from the first batch"
          : checkpoint_scales ? "per-layer scales from the checkpoint"
                              : "scales 1.0: the checkpoint has none") +
         ")";
}

bool is_kv_scale_tensor(std::string_view name, int64_t num_layers) {
  constexpr std::string_view kPrefix = "model.layers.";
  if (!name.starts_with(kPrefix)) return false;
  const std::string_view rest = name.substr(kPrefix.size());
  const size_t dot = rest.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 9) return false;
  int64_t layer = 0;
  for (char c : rest.substr(0, dot)) {
    if (c < '0' || c > '9') return false;
    layer = layer * 10 + (c - '0');
  }
  if (layer >= num_layers) return false;
  const std::string_view suffix = rest.substr(dot + 1);
  for (const auto& pair : kKvScaleSuffixes)
    if (suffix == pair[0] || suffix == pair[1]) return true;
  return suffix == kSharedKvScale;
}

std::vector<float> read_kv_scales(const io::ModelConfig& config, const io::WeightStore& store) {
  const int64_t layers = config.num_hidden_layers;
  std::vector<float> out;
  for (int64_t l = 0; l < layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    const io::TensorView* k = nullptr;
    const io::TensorView* v = nullptr;
    for (const auto& pair : kKvScaleSuffixes) {
      if (!k) k = store.find(prefix + std::string(pair[0]));
      if (!v) v = store.find(prefix + std::string(pair[1]));
    }
    if (const io::TensorView* kv = store.find(prefix + std::string(kSharedKvScale))) {
      if (!k) k = kv;
      if (!v) v = kv;
    }
    if (!k && !v) {
      if (!out.empty())
        invalid_argument(store.source() + ": layer " + std::to_string(l) +
                         " has no KV cache scales but earlier layers have ('" + prefix +
                         "self_attn.k_scale' / 'v_scale')");
      continue;
    }
    if (!k || !v)
      invalid_argument(store.source() + ": the KV cache scales are incomplete: '" + prefix +
                       (k ? "self_attn.v_scale" : "self_attn.k_scale") + "' is missing");
    if (out.empty() && l > 0)
      invalid_argument(store.source() + ": layer " + std::to_string(l) +
                       " has KV cache scales but layer 0 has none");
    out.push_back(scale_value(*k));
    out.push_back(scale_value(*v));
  }
  return out;
}

}  // namespace pagellm::quant
