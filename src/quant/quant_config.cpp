#include "quant/quant_config.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "quant/config_fields.h"
#include "quant/int_config.h"

namespace pagellm::quant {

namespace {

using namespace fields;

// [block_n, block_k]: two positive integers of at most 4096.
void read_block(const json& j, const char* key, const std::string& source, QuantConfig& q) {
  const json& b = j[key];
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer())
    bad(source, std::string("'") + key + "' must be [block_n, block_k]");
  const int64_t n = b[0].get<int64_t>(), k = b[1].get<int64_t>();
  if (n < 1 || k < 1 || n > 4096 || k > 4096)
    bad(source, std::string("'") + key + "' must hold two block sides in [1, 4096]");
  q.weight_scales = WeightScales::kBlock;
  q.block_n = int(n), q.block_k = int(k);
}

QuantConfig parse_fp8(const json& j, const std::string& source) {
  QuantConfig q;
  q.method = Method::kFp8;
  q.name = "fp8";
  q.weight_scales = WeightScales::kTensor;
  const std::string scheme = str_field(j, "activation_scheme", source, "", "dynamic");
  if (scheme != "static" && scheme != "dynamic")
    bad(source, "activation_scheme '" + scheme + "' is neither 'static' nor 'dynamic'");
  q.static_activations = scheme == "static";
  if (j.contains("weight_block_size") && !j["weight_block_size"].is_null()) {
    read_block(j, "weight_block_size", source, q);
    q.scale_suffix = "weight_scale_inv";
    if (q.static_activations)
      unsupported(source + ": quantization_config: block-wise fp8 with static activations is "
                           "not a valid combination (block-wise activations are dynamic)");
  }
  q.ignore = string_list(j, "ignored_layers", source);
  return q;
}

QuantConfig parse_fbgemm(const json& j, const std::string& source) {
  QuantConfig q;
  q.method = Method::kFp8;
  q.name = "fbgemm_fp8";
  q.weight_scales = WeightScales::kChannel;
  if (j.contains("activation_scale_ub") && !j["activation_scale_ub"].is_number())
    bad(source, "'activation_scale_ub' must be a number");
  q.ignore = string_list(j, "modules_to_not_convert", source);
  return q;
}

// One compressed-tensors quantization args object ("weights" / "input_activations"): must be 8-bit
// float. Returns its strategy.
std::string ct_float8_strategy(const json& a, const std::string& source, const std::string& where) {
  if (!a.is_object()) bad(source, where + " must be an object");
  const std::string type = str_field(a, "type", source, where + ": ", "int");
  const int64_t bits = a.contains("num_bits") && a["num_bits"].is_number_integer()
                           ? a["num_bits"].get<int64_t>()
                           : -1;
  if (type != "float" || bits != 8)
    unsupported(source + ": quantization_config: " + where + " is " + std::to_string(bits) +
                "-bit " + type + "; compressed-tensors FP8 schemes need 8-bit float weights (INT4/INT8 "
                "weights: formats pack-quantized or int-quantized)");
  return str_field(a, "strategy", source, where + ": ", "tensor");
}

void ct_weights(const json& w, const std::string& source, QuantConfig& q) {
  const std::string s = ct_float8_strategy(w, source, "weights");
  if (s == "tensor") {
    q.weight_scales = WeightScales::kTensor;
  } else if (s == "channel") {
    q.weight_scales = WeightScales::kChannel;
  } else if (s == "block") {
    if (!w.contains("block_structure")) bad(source, "block weights need 'block_structure'");
    read_block(w, "block_structure", source, q);
  } else {
    unsupported(source + ": quantization_config: FP8 weight strategy '" + s +
                "' is not supported (tensor, channel or block)");
  }
  if (w.contains("dynamic") && w["dynamic"].is_boolean() && w["dynamic"].get<bool>())
    unsupported(source + ": quantization_config: dynamic weight quantization is not supported");
}

void ct_activations(const json& a, const std::string& source, QuantConfig& q) {
  if (a.is_null()) return;  // weight-only FP8 (W8A16): activations are quantized dynamically
  const std::string s = ct_float8_strategy(a, source, "input_activations");
  const bool dynamic = a.contains("dynamic") && a["dynamic"].is_boolean() && a["dynamic"].get<bool>();
  if (s != "token" && s != "tensor" && s != "group")
    unsupported(source + ": quantization_config: FP8 activation strategy '" + s +
                "' is not supported (token, tensor or group)");
  if (!dynamic && s != "tensor")
    unsupported(source + ": quantization_config: static FP8 activations need strategy 'tensor'");
  q.static_activations = !dynamic;
}

// The FP8 formats of compressed-tensors.
QuantConfig parse_compressed_tensors_fp8(const json& j, const std::string& format,
                                         const std::string& source) {
  QuantConfig q;
  q.method = Method::kFp8;
  q.name = "compressed-tensors";
  if (format != "float-quantized" && format != "naive-quantized")
    unsupported(source + ": quantization_config: compressed-tensors format '" + format +
                "' is not supported with float weights (FP8: float-quantized or naive-quantized)");
  if (!j.contains("config_groups") || !j["config_groups"].is_object() || j["config_groups"].empty())
    bad(source, "compressed-tensors needs a non-empty 'config_groups' object");
  bool first = true;
  for (const auto& [name, group] : j["config_groups"].items()) {
    if (!group.is_object() || !group.contains("weights"))
      bad(source, "config group '" + name + "' needs 'weights'");
    QuantConfig g = q;
    ct_weights(group["weights"], source, g);
    if (group.contains("input_activations")) ct_activations(group["input_activations"], source, g);
    if (!first && (g.weight_scales != q.weight_scales || g.block_n != q.block_n ||
                   g.block_k != q.block_k || g.static_activations != q.static_activations))
      unsupported(source + ": quantization_config: config groups with different FP8 schemes "
                           "are not supported");
    q = g;
    first = false;
  }
  q.ignore = string_list(j, "ignore", source);
  return q;
}

QuantConfig parse_compressed_tensors(const json& j, const std::string& source) {
  const std::string format = str_field(j, "format", source, "", "float-quantized");
  // Integer weights in a float format: name the width (the int schemes have their own formats).
  const bool int_format = format == "pack-quantized" || format == "int-quantized";
  QuantConfig q = compressed_tensors_int_weights(j) && (int_format || format == "naive-quantized")
                      ? parse_compressed_tensors_int(j, format, source)
                      : parse_compressed_tensors_fp8(j, format, source);
  if (j.contains("kv_cache_scheme") && !j["kv_cache_scheme"].is_null()) {
    if (ct_float8_strategy(j["kv_cache_scheme"], source, "kv_cache_scheme") != "tensor")
      unsupported(source + ": quantization_config: kv_cache_scheme: only per-tensor FP8 KV cache "
                           "scales are supported");
    q.kv_cache_scales = true;
  }
  return q;
}

// "awq (4-bit, group 128, zero points)", "compressed-tensors W8A8 (8-bit, per-channel, symmetric,
// dynamic per-token int8 activations)".
std::string describe_int(const QuantConfig& q) {
  std::string s = q.name;
  if (q.method == Method::kCtPacked || q.method == Method::kCtInt8)
    s += q.int8_activations ? " W8A8" : " W" + std::to_string(q.bits) + "A16";
  s += " (";
  if (q.name == "auto-round") s += q.method == Method::kAwq ? "AWQ packing, " : "GPTQ packing, ";
  s += std::to_string(q.bits) + "-bit, ";
  if (q.group_size > 0) s += "group " + std::to_string(q.group_size);
  else s += q.weight_scales == WeightScales::kTensor ? "per-tensor" : "per-channel";
  s += q.zero_points ? ", zero points" : ", symmetric";
  if (q.desc_act) s += ", act-order";
  if (q.gptq_v2) s += ", gptq_v2 zeros";
  if (q.int8_activations) s += ", dynamic per-token int8 activations";
  return s + ")";
}

}  // namespace

std::string QuantConfig::describe() const {
  if (int_weights()) return describe_int(*this);
  if (!fp8()) return "none";
  std::string w = weight_scales == WeightScales::kTensor    ? "per-tensor"
                  : weight_scales == WeightScales::kChannel ? "per-channel"
                                                            : std::to_string(block_n) + "x" +
                                                                  std::to_string(block_k) + " block";
  if (online) return "fp8 (quantized at load: per-channel weights, dynamic per-token activations)";
  return "fp8 (" + name + ", " + w + " weight scales, " +
         (static_activations ? "static input scales (activations quantized per token)"
                             : "dynamic per-token activations") +
         ")";
}

QuantConfig parse_quant_config(const json& j, const std::string& source) {
  if (!j.is_object()) bad(source, "must be an object");
  const std::string method = str_field(j, "quant_method", source, "");
  if (method.empty()) bad(source, "missing string field 'quant_method'");
  if (method == "fp8") return parse_fp8(j, source);
  if (method == "fbgemm_fp8") return parse_fbgemm(j, source);
  if (method == "compressed-tensors") return parse_compressed_tensors(j, source);
  if (method == "awq") return parse_awq(j, source);
  if (method == "gptq") return parse_gptq(j, source);
  if (method == "auto-round" || method == "intel/auto-round") return parse_auto_round(j, source);
  unsupported(source + ": quantization method '" + method +
              "' is not supported (supported: fp8, fbgemm_fp8, compressed-tensors, awq, gptq, "
              "auto-round)");
}

QuantConfig parse_quant_config_text(const std::string& text, const std::string& source) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) invalid_argument(source + ": not valid JSON");
  if (!j.is_object() || !j.contains("quantization_config") || j["quantization_config"].is_null())
    return {};
  return parse_quant_config(j["quantization_config"], source);
}

QuantConfig resolve_quantization(QuantConfig ckpt, const std::string& flag,
                                 const std::string& source) {
  const std::string holds =
      ckpt.quantized() ? "a '" + ckpt.name + "' checkpoint" : std::string("not quantized");
  if (flag.empty() || flag == "auto" || flag == "none") {
    if (flag == "none" && ckpt.quantized())
      invalid_argument("--quantization none: " + source + " holds " +
                       (ckpt.fp8() ? "an FP8" : "an INT" + std::to_string(ckpt.bits)) + " (" +
                       ckpt.name + ") checkpoint, which cannot be loaded unquantized");
    return ckpt;
  }
  if (flag == "fp8") {
    if (ckpt.fp8()) return ckpt;  // vLLM: fp8 also loads any serialized FP8 checkpoint
    if (ckpt.quantized())
      invalid_argument("--quantization fp8: " + source + " is " + holds +
                       " (fp8 quantizes 16-bit checkpoints or loads FP8 ones)");
    QuantConfig q;
    q.method = Method::kFp8;
    q.name = "fp8";
    q.online = true;
    q.weight_scales = WeightScales::kChannel;
    return q;
  }
  // vLLM's Marlin variants name the same checkpoints (the kernel is pagellm's choice).
  const std::string method = flag == "awq_marlin"                        ? "awq"
                             : flag == "gptq_marlin" || flag == "marlin" ? "gptq"
                                                                         : flag;
  if (method == "fbgemm_fp8" || method == "compressed-tensors" || method == "awq" ||
      method == "gptq" || method == "auto-round") {
    if (ckpt.name == method) return ckpt;
    invalid_argument("--quantization " + flag + ": " + source + " is " + holds +
                     " (the flag must match the checkpoint's quant_method)");
  }
  invalid_argument("--quantization " + flag +
                   ": unknown or unsupported method (supported: fp8, fbgemm_fp8, "
                   "compressed-tensors, awq, awq_marlin, gptq, gptq_marlin, marlin, auto-round)");
}

}  // namespace pagellm::quant
