// quantization_config parsers of the INT4 / INT8 weight formats (quant_config.h lists them), and
// the module-name matching their ignore lists and targets use. Internal to src/quant: callers use
// parse_quant_config.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "quant/quant_config.h"

namespace pagellm::quant {

// quant_method "awq": bits / w_bit (4), group_size / q_group_size, zero_point, version ("gemm"),
// modules_to_not_convert.
QuantConfig parse_awq(const nlohmann::json& j, const std::string& source);

// quant_method "gptq": bits (4 or 8), group_size, desc_act, sym, checkpoint_format ("gptq" or
// "gptq_v2").
QuantConfig parse_gptq(const nlohmann::json& j, const std::string& source);

// quant_method "auto-round" / "intel/auto-round": bits, group_size, sym, packing_format (GPTQ-style
// or AWQ-style), data_type "int", extra_config (per-module overrides: 16-bit modules only),
// block_name_to_quantize.
QuantConfig parse_auto_round(const nlohmann::json& j, const std::string& source);

// compressed-tensors with integer weights: `format` "pack-quantized" (W4A16 / W8A16) or
// "int-quantized" / "naive-quantized" (int8 weights, optionally int8 per-token activations).
QuantConfig parse_compressed_tensors_int(const nlohmann::json& j, const std::string& format,
                                         const std::string& source);

// True when a config group's weights are integers ("type": "int", the compressed-tensors default).
bool compressed_tensors_int_weights(const nlohmann::json& quantization_config);

// Whether `entry` of an ignore / targets list names `module` ("model.layers.0.mlp.down_proj"):
// kExactOrRegex: the same name, "Linear" (every projection), or "re:REGEX" matching from the start
// of the name; kSubstring: `entry` occurs in the name.
bool module_matches(const std::string& entry, const std::string& module, IgnoreMatch how);

}  // namespace pagellm::quant
