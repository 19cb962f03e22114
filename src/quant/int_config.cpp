#include "quant/int_config.h"

#include <algorithm>
#include <cctype>

#include "quant/config_fields.h"
#include "tokenizer/regex.h"

namespace pagellm::quant {

namespace {

using namespace fields;

// Regexes come from the checkpoint: bounded in length, run by PCRE2 (whose match limit stops
// catastrophic backtracking), and compiled here so that a malformed one is a config error.
constexpr size_t kMaxRegexChars = 512;

// Python's re.match: the pattern must match at the start of the name.
std::string anchored(const std::string& pattern) { return "\\A(?:" + pattern + ")"; }

void check_pattern(const std::string& entry, const std::string& source, const std::string& list) {
  if (!entry.starts_with("re:")) return;
  if (entry.size() > kMaxRegexChars)
    bad(source, "'" + list + "' holds a regex longer than " + std::to_string(kMaxRegexChars));
  try {
    tok::Regex re(anchored(entry.substr(3)), source + ": quantization_config: '" + list + "'");
  } catch (const Error&) {
    bad(source, "'" + list + "' holds an invalid regex '" + entry.substr(3) + "'");
  }
}

std::vector<std::string> pattern_list(const json& j, const char* key, const std::string& source) {
  std::vector<std::string> out = string_list(j, key, source);
  for (const std::string& e : out) check_pattern(e, source, key);
  return out;
}

// bits must be one of `allowed`; anything else is a one-line refusal naming the width.
int bits_field(const json& j, std::initializer_list<const char*> keys, std::vector<int> allowed,
               const std::string& source, const std::string& method) {
  const int64_t bits = int_field(j, keys, source, "", 0, true);
  for (int a : allowed)
    if (bits == a) return a;
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i)
    list += (i ? (i + 1 == allowed.size() ? " or " : ", ") : "") + std::to_string(allowed[i]);
  refuse(source, method + " with " + std::to_string(bits) + "-bit weights is not supported (bits: " +
                     list + ")");
}

// group_size: -1 (one group over all input columns) or a positive column count.
int group_field(const json& j, std::initializer_list<const char*> keys, const std::string& source,
                const std::string& where) {
  const int64_t g = int_field(j, keys, source, where, 0, true);
  if (g != -1 && (g < 1 || g > (int64_t{1} << 20)))
    refuse(source, where + "group_size " + std::to_string(g) +
                       " is not supported (-1 or a positive number of input columns)");
  return int(g);
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// AutoRound's per-module overrides: a module kept in 16 bits joins the ignore list; a module with
// other bits / group_size / sym than the global ones would need per-module formats (refused).
void auto_round_extra_config(const json& j, const std::string& source, QuantConfig& q) {
  if (!present(j, "extra_config")) return;
  if (!j["extra_config"].is_object()) bad(source, "'extra_config' must be an object");
  for (const auto& [module, cfg] : j["extra_config"].items()) {
    if (!cfg.is_object()) bad(source, "extra_config '" + module + "' must be an object");
    const std::string where = "extra_config '" + module + "': ";
    const int64_t bits = int_field(cfg, {"bits"}, source, where, q.bits);
    if (bits >= 16) {
      q.ignore.push_back(module);
      continue;
    }
    const int64_t group = int_field(cfg, {"group_size"}, source, where, q.group_size);
    const bool sym = bool_field(cfg, "sym", source, where, !q.zero_points);
    if (bits != q.bits || group != q.group_size || sym == q.zero_points)
      refuse(source, where + "per-module quantization settings (" + std::to_string(bits) +
                         "-bit, group " + std::to_string(group) +
                         ") that differ from the global ones are not supported");
  }
}

std::vector<std::string> block_names(const json& j, const std::string& source) {
  std::vector<std::string> out;
  for (const char* key : {"block_name_to_quantize", "to_quant_block_names"}) {
    if (!present(j, key)) continue;
    std::vector<std::string> names;
    if (j[key].is_string()) {
      const std::string s = j[key].get<std::string>();
      for (size_t b = 0; b <= s.size();) {
        const size_t e = std::min(s.find(',', b), s.size());
        if (e > b) names.push_back(s.substr(b, e - b));
        b = e + 1;
      }
    } else {
      names = string_list(j, key, source);
    }
    for (const std::string& n : names) out.push_back("re:" + regex_escape(n));
    break;
  }
  return out;
}

// One compressed-tensors quantization args object with integer type: its bits, strategy and
// symmetry, checked against what `format` can hold.
struct CtIntArgs {
  int bits = 0;
  std::string strategy;
  int group_size = -1;
  bool symmetric = true;
  bool g_idx = false;  // actorder "group" (or legacy true): weight_g_idx assigns the groups
  bool operator==(const CtIntArgs&) const = default;
};

CtIntArgs ct_int_weights(const json& w, const std::string& format, const std::string& source) {
  if (!w.is_object()) bad(source, "weights must be an object");
  CtIntArgs a;
  const std::string type = str_field(w, "type", source, "weights: ", "int");
  const int64_t bits = int_field(w, {"num_bits"}, source, "weights: ", -1, true);
  if (type != "int")
    refuse(source, "config groups mix " + type + " and int weights");
  const bool packed = format == "pack-quantized";
  if (!(bits == 4 || bits == 8) || (!packed && bits != 8))
    refuse(source, "weights: " + std::to_string(bits) + "-bit int weights in format '" + format +
                       "' are not supported (pack-quantized: 4 or 8 bits; int-quantized: 8)");
  a.bits = int(bits);
  a.strategy = str_field(w, "strategy", source, "weights: ", "tensor");
  a.symmetric = bool_field(w, "symmetric", source, "weights: ", true);
  if (bool_field(w, "dynamic", source, "weights: ", false))
    refuse(source, "weights: dynamic weight quantization is not supported");
  if (packed && a.strategy == "group") {
    a.group_size = group_field(w, {"group_size"}, source, "weights: ");
    if (a.group_size < 1) bad(source, "weights: strategy 'group' needs a positive group_size");
  } else if (!(a.strategy == "channel" || (!packed && a.strategy == "tensor"))) {
    refuse(source, "weights: int strategy '" + a.strategy + "' in format '" + format +
                       "' is not supported (pack-quantized: group or channel; int-quantized: "
                       "channel or tensor)");
  }
  if (!packed && !a.symmetric)
    refuse(source, "weights: asymmetric int8 weights (int-quantized) are not supported");
  if (present(w, "actorder")) {
    const json& o = w["actorder"];
    if (o.is_boolean()) a.g_idx = o.get<bool>();
    else if (o.is_string()) a.g_idx = o.get<std::string>() == "group";
    else bad(source, "weights: 'actorder' must be a string, true or false");
  }
  return a;
}

// W8A8: activations must be 8-bit int, symmetric, dynamic per token (what pagellm emulates).
bool ct_int_activations(const json& a, const CtIntArgs& w, const std::string& format,
                        const std::string& source) {
  if (a.is_null()) return false;
  if (!a.is_object()) bad(source, "input_activations must be an object or null");
  const std::string type = str_field(a, "type", source, "input_activations: ", "int");
  const int64_t bits = int_field(a, {"num_bits"}, source, "input_activations: ", -1, true);
  if (format == "pack-quantized" || type != "int" || bits != 8)
    refuse(source, "input_activations: " + std::to_string(bits) + "-bit " + type +
                       " activations with " + std::to_string(w.bits) + "-bit int weights ('" +
                       format + "') are not supported (W4A16, W8A16 or W8A8-INT8)");
  const bool dynamic = bool_field(a, "dynamic", source, "input_activations: ", false);
  const std::string strategy = str_field(a, "strategy", source, "input_activations: ", "tensor");
  if (!dynamic || strategy != "token")
    refuse(source, "input_activations: static or per-" + strategy +
                       " int8 activations are not supported (dynamic per-token only)");
  if (!bool_field(a, "symmetric", source, "input_activations: ", true))
    refuse(source, "input_activations: asymmetric int8 activations are not supported");
  return true;
}

}  // namespace

bool module_matches(const std::string& entry, const std::string& module, IgnoreMatch how) {
  if (how == IgnoreMatch::kSubstring) return !entry.empty() && module.find(entry) != std::string::npos;
  if (entry == module || entry == "Linear") return true;
  if (!entry.starts_with("re:")) return false;
  const tok::Regex re(anchored(entry.substr(3)), "quantization_config regex");
  std::vector<tok::MatchRange> found;
  re.find_some(module, 0, 1, found);
  return !found.empty() && found[0].begin == 0;
}

QuantConfig parse_awq(const json& j, const std::string& source) {
  QuantConfig q;
  q.method = Method::kAwq;
  q.name = "awq";
  q.bits = bits_field(j, {"w_bit", "bits"}, {4}, source, "awq");
  q.group_size = group_field(j, {"q_group_size", "group_size"}, source, "");
  q.zero_points = bool_field(j, "zero_point", source, "", true);
  const std::string version = str_field(j, "version", source, "", "gemm");
  if (lower(version) != "gemm")
    refuse(source, "AWQ version '" + version + "' is not supported (only the GEMM layout)");
  q.ignore = string_list(j, "modules_to_not_convert", source);
  q.ignore_match = IgnoreMatch::kSubstring;
  return q;
}

QuantConfig parse_gptq(const json& j, const std::string& source) {
  QuantConfig q;
  q.method = Method::kGptq;
  q.name = "gptq";
  q.bits = bits_field(j, {"bits"}, {4, 8}, source, "gptq");
  q.group_size = group_field(j, {"group_size"}, source, "");
  q.desc_act = bool_field(j, "desc_act", source, "", false);
  q.zero_points = !bool_field(j, "sym", source, "", true);
  const std::string format = str_field(j, "checkpoint_format", source, "", "gptq");
  if (format != "gptq" && format != "gptq_v2")
    refuse(source, "GPTQ checkpoint_format '" + format + "' is not supported (gptq or gptq_v2)");
  q.gptq_v2 = format == "gptq_v2";
  if (bool_field(j, "is_marlin_format", source, "", false))
    refuse(source, "Marlin-repacked GPTQ checkpoints (is_marlin_format) are not supported");
  if (present(j, "dynamic") && !(j["dynamic"].is_object() && j["dynamic"].empty()))
    refuse(source, "GPTQ per-module 'dynamic' overrides are not supported");
  if (bool_field(j, "lm_head", source, "", false))
    refuse(source, "a quantized lm_head (lm_head: true) is not supported");
  return q;
}

QuantConfig parse_auto_round(const json& j, const std::string& source) {
  const std::string packing = str_field(j, "packing_format", source, "", "auto_round:auto_gptq");
  const std::string data_type = str_field(j, "data_type", source, "", "int");
  if (data_type != "int")
    refuse(source, "auto-round data_type '" + data_type + "' is not supported (int)");
  const bool awq = packing == "auto_round:auto_awq" || packing == "auto_awq";
  const bool gptq = packing == "auto_round:auto_gptq" || packing == "auto_gptq" ||
                    packing == "auto_round:gptq";
  if (!awq && !gptq)
    refuse(source, "auto-round packing_format '" + packing +
                       "' is not supported (auto_round:auto_gptq, auto_gptq or auto_round:auto_awq)");
  QuantConfig q;
  q.method = awq ? Method::kAwq : Method::kGptq;
  q.name = "auto-round";
  q.bits = bits_field(j, {"bits"}, awq ? std::vector<int>{4} : std::vector<int>{4, 8}, source,
                      awq ? "auto-round (AWQ packing)" : "auto-round (GPTQ packing)");
  q.group_size = group_field(j, {"group_size"}, source, "");
  q.zero_points = !bool_field(j, "sym", source, "", true);
  // GPTQ-style exports keep AutoGPTQ's v1 zeros (stored zero - 1), which is how vLLM reads them;
  // symmetric exports hold v1 or v2 zeros depending on the auto-round version, and both are read
  // as the fixed 2^(bits-1) (int_weights.cpp checks which one is there).
  q.ignore_match = IgnoreMatch::kExactOrRegex;
  auto_round_extra_config(j, source, q);
  q.targets = block_names(j, source);
  return q;
}

bool compressed_tensors_int_weights(const json& j) {
  if (!present(j, "config_groups") || !j["config_groups"].is_object()) return false;
  for (const auto& [name, group] : j["config_groups"].items()) {
    if (!group.is_object() || !present(group, "weights") || !group["weights"].is_object())
      return false;
    const json& w = group["weights"];
    return !present(w, "type") || (w["type"].is_string() && w["type"].get<std::string>() == "int");
  }
  return false;
}

QuantConfig parse_compressed_tensors_int(const json& j, const std::string& format,
                                         const std::string& source) {
  const bool packed = format == "pack-quantized";
  if (!packed && format != "int-quantized" && format != "naive-quantized")
    refuse(source, "compressed-tensors format '" + format +
                       "' with int weights is not supported (pack-quantized, int-quantized)");
  if (!present(j, "config_groups") || !j["config_groups"].is_object() || j["config_groups"].empty())
    bad(source, "compressed-tensors needs a non-empty 'config_groups' object");
  QuantConfig q;
  q.method = packed ? Method::kCtPacked : Method::kCtInt8;
  q.name = "compressed-tensors";
  bool first = true;
  CtIntArgs args;
  for (const auto& [name, group] : j["config_groups"].items()) {
    if (!group.is_object() || !group.contains("weights"))
      bad(source, "config group '" + name + "' needs 'weights'");
    const CtIntArgs w = ct_int_weights(group["weights"], format, source);
    const bool act = group.contains("input_activations") &&
                     ct_int_activations(group["input_activations"], w, format, source);
    if (!first && (!(w == args) || act != q.int8_activations))
      refuse(source, "config groups with different int schemes are not supported");
    args = w;
    q.int8_activations = act;
    for (const std::string& t : pattern_list(group, "targets", source)) q.targets.push_back(t);
    first = false;
  }
  q.bits = args.bits;
  q.group_size = args.strategy == "group" ? args.group_size : -1;
  q.zero_points = !args.symmetric;
  q.desc_act = args.g_idx;
  q.weight_scales = args.strategy == "tensor" ? WeightScales::kTensor : WeightScales::kChannel;
  q.ignore = pattern_list(j, "ignore", source);
  return q;
}

}  // namespace pagellm::quant
