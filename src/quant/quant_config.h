// The quantization of a checkpoint: one QuantConfig parsed from config.json's
// "quantization_config" (or made by --quantization), naming how the linear layers' weights are
// stored and how their activations are quantized. Supported:
//   FP8 (e4m3) weights in every format vLLM loads —
//   - compressed-tensors "float-quantized" / "naive-quantized" with 8-bit float weights (strategy
//     tensor, channel or block) and dynamic per-token or static per-tensor activations;
//   - quant_method "fp8" (AutoFP8 / vLLM: per-tensor weight_scale, static or dynamic activations;
//     with "weight_block_size" the block-wise layout of DeepSeek-V3 / Qwen3-FP8, weight_scale_inv);
//   - "fbgemm_fp8" (per-channel weight_scale, dynamic per-token activations);
//   - --quantization fp8 on a 16-bit checkpoint (per-channel scales computed at load).
//   The runtime form of every one of them is an e4m3 weight with one scale per output channel (or,
//   for 128x128 blocks that the shard keeps whole, per block), and activations are quantized
//   dynamically per token (or per 128-column group for block weights): a static input_scale is
//   checked and then not needed, since per-token scales are at least as accurate.
//   INT4 / INT8 weights (quant/int_weights.h; the CPU backend only, dequantized at load) —
//   - "awq": AutoAWQ's GEMM layout, 4-bit, zero points or symmetric;
//   - "gptq": AutoGPTQ / GPTQModel, 4 or 8 bits, sym or asym, act-order (g_idx), v1 zeros (stored
//     zero - 1) or checkpoint_format "gptq_v2";
//   - compressed-tensors "pack-quantized" (W4A16 / W8A16, group or channel scales, packed zero
//     points, optional g_idx) and "int-quantized" W8A8 (int8 weights per channel or tensor,
//     activations quantized per token to int8 at run time);
//   - "auto-round" / "intel/auto-round": exports with GPTQ-style or AWQ-style packing.
// Everything else (other widths, other layouts, static int8 activations) is refused with a message
// that names it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagellm::quant {

enum class Method {
  kNone,      // 16-bit weights
  kFp8,       // e4m3 weights (from the checkpoint, or quantized at load when `online`)
  kAwq,       // AWQ GEMM: qweight I32 [in, out / 8] packed along out in AWQ's nibble order
  kGptq,      // GPTQ: qweight I32 [in / (32 / bits), out] packed along in, g_idx
  kCtPacked,  // compressed-tensors pack-quantized: weight_packed I32 [out, in / (32 / bits)]
  kCtInt8,    // compressed-tensors int-quantized / naive-quantized: weight I8 [out, in]
};

// How an ignore list names the modules a checkpoint left in 16 bits.
enum class IgnoreMatch {
  kExactOrRegex,  // compressed-tensors / AutoRound: the module name, or "re:" + a regex matched
                  // at the start of the name
  kSubstring,     // AWQ modules_to_not_convert: any entry that occurs in the module name
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

  // INT4 / INT8 weights (int_weights()): the dequantized weight is (q - zero) * scale, with one
  // scale (and zero) per output row and group of `group_size` input columns.
  int bits = 0;                    // 4 or 8
  int group_size = -1;             // -1: one group spans all input columns (per channel)
  bool zero_points = false;        // asymmetric: zeros come from the checkpoint; else 2^(bits-1)
  bool desc_act = false;           // GPTQ act-order: g_idx assigns columns to groups
  bool gptq_v2 = false;            // GPTQ qzeros hold the zero itself (v1: zero - 1)
  bool int8_activations = false;   // W8A8: activations quantized per token to int8 and back
  IgnoreMatch ignore_match = IgnoreMatch::kExactOrRegex;
  // compressed-tensors config group targets ("Linear", module names, "re:" regexes) and AutoRound's
  // block_name_to_quantize prefixes (as "re:" + escaped prefix): when non-empty, only matching
  // modules are quantized.
  std::vector<std::string> targets;

  bool fp8() const { return method == Method::kFp8; }
  // True for the INT4 / INT8 weight formats.
  bool int_weights() const {
    return method == Method::kAwq || method == Method::kGptq || method == Method::kCtPacked ||
           method == Method::kCtInt8;
  }
  // Any quantized checkpoint or --quantization mode.
  bool quantized() const { return method != Method::kNone; }
  // True when the checkpoint itself stores FP8 weights (and scale tensors).
  bool fp8_checkpoint() const { return fp8() && !online; }
  // One line for the startup log: "fp8 (compressed-tensors, per-channel weights, dynamic
  // per-token activations)", "awq (4-bit, group 128, zero points)".
  std::string describe() const;
};

// Parses a config.json "quantization_config" object; `source` names the file in errors. Throws
// pagellm::Error (kUnsupported for a scheme pagellm does not run, kInvalidArgument for a malformed
// object) naming the field.
QuantConfig parse_quant_config(const nlohmann::json& quantization_config, const std::string& source);

// Parses config.json text's "quantization_config" (kNone when it has none). For fuzzing and tests.
QuantConfig parse_quant_config_text(const std::string& config_json, const std::string& source);

// Combines the checkpoint's config with --quantization (vLLM's values: "" / "auto" = the
// checkpoint's; "none" only for a 16-bit checkpoint; "fp8" quantizes a 16-bit checkpoint at load,
// and agrees with any FP8 checkpoint; "fbgemm_fp8" / "compressed-tensors" / "auto-round" / "awq"
// (also awq_marlin) / "gptq" (also gptq_marlin, marlin) must match the checkpoint's method).
// Anything else is a one-line error naming the flag's value and what the checkpoint holds.
QuantConfig resolve_quantization(QuantConfig from_checkpoint, const std::string& flag,
                                 const std::string& source);

}  // namespace pagellm::quant
