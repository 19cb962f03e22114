// The quantization of a checkpoint: one QuantConfig parsed from config.json's
// "quantization_config" (or made by --quantization), naming how the linear layers' weights are
// stored and how their activations are quantized. Supported today: FP8 (e4m3) weights in every
// format vLLM loads —
//   - compressed-tensors "float-quantized" / "naive-quantized" with 8-bit float weights (strategy
//     tensor, channel or block) and dynamic per-token or static per-tensor activations;
//   - quant_method "fp8" (AutoFP8 / vLLM: per-tensor weight_scale, static or dynamic activations;
//     with "weight_block_size" the block-wise layout of DeepSeek-V3 / Qwen3-FP8, weight_scale_inv);
//   - "fbgemm_fp8" (per-channel weight_scale, dynamic per-token activations);
//   - --quantization fp8 on a 16-bit checkpoint (per-channel scales computed at load).
// The runtime form of every one of them is an e4m3 weight with one scale per output channel (or,
// for 128x128 blocks that the shard keeps whole, per block), and activations are quantized
// dynamically per token (or per 128-column group for block weights): a static input_scale is
// checked and then not needed, since per-token scales are at least as accurate. Everything else
// (INT4/INT8 schemes, other float widths) is refused with a message that names it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagellm::quant {

enum class Method {
  kNone,  // 16-bit weights
  kFp8,   // e4m3 weights (from the checkpoint, or quantized at load when `online`)
};

// How an FP8 checkpoint scales its weights. The scale tensors' shapes must agree.
enum class WeightScales {
  kTensor,   // one scale per tensor ("weight_scale": [] or [1])
  kChannel,  // one per output row ("weight_scale": [n] or [n, 1])
  kBlock,    // one per block_n x block_k block ([ceil(n / block_n), ceil(k / block_k)])
};

struct QuantConfig {
  Method method = Method::kNone;
  std::string name;     // quant_method as written ("fp8", "compressed-tensors", "fbgemm_fp8")
  bool online = false;  // --quantization fp8 on a 16-bit checkpoint
  WeightScales weight_scales = WeightScales::kChannel;
  int block_n = 0, block_k = 0;           // kBlock only
  std::string scale_suffix = "weight_scale";  // "weight_scale_inv" for the block-wise fp8 layout
  bool static_activations = false;        // the checkpoint carries input_scale tensors
  std::vector<std::string> ignore;        // modules the checkpoint left unquantized
  // compressed-tensors kv_cache_scheme: the checkpoint carries per-layer FP8 KV cache scales
  // (quant/kv_cache_quant.h), used with --kv-cache-dtype fp8.
  bool kv_cache_scales = false;

  bool fp8() const { return method == Method::kFp8; }
  // True when the checkpoint itself stores FP8 weights (and scale tensors).
  bool fp8_checkpoint() const { return fp8() && !online; }
  // One line for the startup log: "fp8 (compressed-tensors, per-channel weights, dynamic
  // per-token activations)".
  std::string describe() const;
};

// Parses a config.json "quantization_config" object; `source` names the file in errors. Throws
// pagellm::Error (kUnsupported for a scheme pagellm does not run, kInvalidArgument for a malformed
// object) naming the field.
QuantConfig parse_quant_config(const nlohmann::json& quantization_config, const std::string& source);

// Parses config.json text's "quantization_config" (kNone when it has none). For fuzzing and tests.
QuantConfig parse_quant_config_text(const std::string& config_json, const std::string& source);

// Combines the checkpoint's config with --quantization (vLLM's values: "" / "auto" / "none" = the
// checkpoint's; "fp8" quantizes a 16-bit checkpoint at load, and agrees with any FP8 checkpoint;
// "fbgemm_fp8" / "compressed-tensors" must match the checkpoint's method). Anything else is a
// one-line error naming the flag's value and what the checkpoint holds.
QuantConfig resolve_quantization(QuantConfig from_checkpoint, const std::string& flag,
                                 const std::string& source);

}  // namespace pagellm::quant
