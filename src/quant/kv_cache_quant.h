// The FP8 KV cache (--kv-cache-dtype fp8 / fp8_e4m3 / fp8_e5m2), shared by the CPU and CUDA
// runners: the flag's values, the per-layer K/V scales a checkpoint may carry, and the host
// reference of the cache's rounding.
//
// Elements are stored as fp8(x / scale) with one scale per layer for K and one for V (vLLM's
// per-tensor scheme) and read back as code * scale. Scales come from the checkpoint
// ("model.layers.N.self_attn.k_scale" / ".v_scale", as compressed-tensors' kv_cache_scheme writes
// them; the older "self_attn.k_proj.output_scale" / ".v_proj.output_scale"; or one
// "self_attn.kv_scale" for both), else are 1.0, or are computed from the first batch
// (--calculate-kv-scales: 2 * amax / fp8_max).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/fp8.h"
#include "io/hf_config.h"
#include "io/safetensors.h"

namespace pagellm::quant {

// --kv-cache-dtype: "auto" -> nullopt (the model dtype); "fp8" / "fp8_e4m3" -> kF8E4M3;
// "fp8_e5m2" -> kF8E5M2. Anything else: a one-line error listing the values.
std::optional<DType> parse_kv_cache_dtype(const std::string& flag);

// Whether `name` is one of the per-layer KV scale tensors above, of a layer in [0, num_layers).
bool is_kv_scale_tensor(std::string_view name, int64_t num_layers);

// The checkpoint's per-layer scales, [num_hidden_layers][k, v] flattened, or empty when it carries
// none. A checkpoint with scales for some layers only, or a scale that is not a finite positive
// F32 / BF16 / F16 scalar, is an error naming the tensor.
std::vector<float> read_kv_scales(const io::ModelConfig& config, const io::WeightStore& store);

// For the startup log: "fp8_e4m3 KV cache (per-layer scales from the checkpoint)"; without an FP8
// cache, a pointer to --kv-cache-dtype fp8 when the checkpoint has scales, else "".
std::string describe_kv_cache(std::optional<DType> fp8, bool checkpoint_scales, bool calculate);

// The scale --calculate-kv-scales takes from a batch whose largest magnitude is amax.
inline float kv_scale_from_amax(float amax, Fp8Format format) {
  return 2.f * std::max(amax, 1e-6f) / fp8_max(format);
}

inline Fp8Format fp8_format(DType fp8_dtype) {
  return fp8_dtype == DType::kF8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}

}  // namespace pagellm::quant
