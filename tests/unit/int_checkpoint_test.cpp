// INT4 / INT8 checkpoints on the CPU backend (issue 12, items 1, 4, 5): quantization_config parsing
// of every format, tiny Llama checkpoints packed here from known integers, zeros and scales (AWQ,
// GPTQ v1 / v2 / act-order, compressed-tensors pack-quantized and int-quantized, AutoRound) loading
// to exactly (q - z) * s, tensor-parallel slices of them, modules left in 16 bits, int8 per-token
// activations, and one-line errors for every kind of broken input.
#include <cmath>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "fp8_checkpoint_util.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "quant/fp8_weights.h"
#include "quant/int_weights.h"
#include "quant/quant_config.h"

namespace pagellm {
namespace {

using nlohmann::json;
using testing::SafetensorsBuilder;
using testing::TempDir;

std::string error_of(const std::function<void()>& fn) {
  const std::string message = testing::error_message_of(fn);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

quant::QuantConfig parse(const json& qc) { return quant::parse_quant_config(qc, "config.json"); }

#define EXPECT_ERROR(stmt, text) \
  EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) << error_of([&] { stmt; })

TEST(IntQuantConfig, ParsesEveryFormat) {
  auto awq = parse({{"quant_method", "awq"},
                    {"w_bit", 4},
                    {"q_group_size", 128},
                    {"zero_point", true},
                    {"version", "GEMM"},
                    {"modules_to_not_convert", {"gate"}}});
  EXPECT_EQ(awq.method, quant::Method::kAwq);
  EXPECT_EQ(awq.describe(), "awq (4-bit, group 128, zero points)");
  EXPECT_FALSE(quant::int_part_quantized(awq, "model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(quant::int_part_quantized(awq, "model.layers.0.mlp.up_proj.weight"));

  auto gptq = parse({{"quant_method", "gptq"},
                     {"bits", 8},
                     {"group_size", -1},
                     {"desc_act", true},
                     {"sym", false},
                     {"checkpoint_format", "gptq_v2"}});
  EXPECT_EQ(gptq.describe(), "gptq (8-bit, per-channel, zero points, act-order, gptq_v2 zeros)");

  const json w4 = {{"num_bits", 4},       {"type", "int"},     {"symmetric", true},
                   {"strategy", "group"}, {"group_size", 128}, {"actorder", "group"}};
  auto ct = parse({{"quant_method", "compressed-tensors"},
                   {"format", "pack-quantized"},
                   {"ignore", {"lm_head", "re:.*down_proj$"}},
                   {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", w4}}}}}});
  EXPECT_EQ(ct.method, quant::Method::kCtPacked);
  EXPECT_EQ(ct.describe(), "compressed-tensors W4A16 (4-bit, group 128, symmetric, act-order)");
  EXPECT_FALSE(quant::int_part_quantized(ct, "model.layers.3.mlp.down_proj.weight"));
  EXPECT_TRUE(quant::int_part_quantized(ct, "model.layers.3.mlp.up_proj.weight"));

  const json w8 = {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}};
  const json a8 = {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}};
  auto w8a8 = parse({{"quant_method", "compressed-tensors"},
                     {"format", "int-quantized"},
                     {"config_groups", {{"g", {{"weights", w8}, {"input_activations", a8}}}}}});
  EXPECT_TRUE(w8a8.int8_activations);
  EXPECT_EQ(w8a8.describe(),
            "compressed-tensors W8A8 (8-bit, per-channel, symmetric, dynamic per-token int8 "
            "activations)");

  auto ar = parse({{"quant_method", "intel/auto-round"},
                   {"bits", 4},
                   {"group_size", 128},
                   {"sym", true},
                   {"packing_format", "auto_round:auto_awq"},
                   {"block_name_to_quantize", "model.layers"},
                   {"extra_config", {{"model.layers.0.mlp.down_proj", {{"bits", 16}}}}}});
  EXPECT_EQ(ar.method, quant::Method::kAwq);
  EXPECT_EQ(ar.describe(), "auto-round (AWQ packing, 4-bit, group 128, symmetric)");
  EXPECT_FALSE(quant::int_part_quantized(ar, "model.layers.0.mlp.down_proj.weight"));
  EXPECT_TRUE(quant::int_part_quantized(ar, "model.layers.10.mlp.down_proj.weight"));
  EXPECT_FALSE(quant::int_part_quantized(ar, "lm_head.weight"));
}

TEST(IntQuantConfig, FlagsAgreeWithTheCheckpointOrFailInOneLine) {
  const auto awq = parse({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}});
  const auto gptq = parse({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}});
  for (const char* f : {"", "auto", "awq", "awq_marlin"})
    EXPECT_EQ(quant::resolve_quantization(awq, f, "x").method, quant::Method::kAwq) << f;
  for (const char* f : {"gptq", "gptq_marlin", "marlin"})
    EXPECT_EQ(quant::resolve_quantization(gptq, f, "x").method, quant::Method::kGptq) << f;
  EXPECT_ERROR(quant::resolve_quantization(awq, "gptq", "x"), "is a 'awq' checkpoint");
  EXPECT_ERROR(quant::resolve_quantization(gptq, "fp8", "x"), "--quantization fp8");
  EXPECT_ERROR(quant::resolve_quantization(gptq, "none", "x"), "INT4 (gptq)");
  EXPECT_ERROR(quant::resolve_quantization({}, "auto-round", "x"), "not quantized");
  EXPECT_NO_THROW(quant::check_int_weights_on_gpu(awq, "m"));  // the INT weight-only kernels
  EXPECT_NE(quant::describe_int_weights_on_gpu(awq, DType::kBF16).find("kept packed (4 bits)"),
            std::string::npos);
  EXPECT_NE(quant::describe_int_weights_on_gpu(awq, DType::kF32).find("dequantized to float32"),
            std::string::npos);
  EXPECT_EQ(quant::describe_int_weights_on_gpu({}, DType::kBF16), "");
  quant::QuantConfig w8a8 = gptq;
  w8a8.bits = 8, w8a8.int8_activations = true;
  EXPECT_ERROR(quant::check_int_weights_on_gpu(w8a8, "m"),
               "W8A8-INT8 (gptq, int8 activations) runs on the GPU only with compressed-tensors");
  quant::QuantConfig ct = w8a8;
  ct.method = quant::Method::kCtInt8, ct.name = "compressed-tensors", ct.group_size = -1;
  EXPECT_NO_THROW(quant::check_int_weights_on_gpu(ct, "m"));
  EXPECT_NE(quant::describe_int_weights_on_gpu(ct, DType::kBF16).find("int8 tensor-core GEMM"),
            std::string::npos);
  ct.group_size = 128;
  EXPECT_ERROR(quant::check_int_weights_on_gpu(ct, "m"), "use --device cpu");
}

TEST(IntQuantConfig, RefusesWhatItCannotRunWithOneLine) {
  EXPECT_ERROR(parse({{"quant_method", "gptq"}, {"bits", 3}, {"group_size", 128}}),
               "3-bit weights is not supported (bits: 4 or 8)");
  EXPECT_ERROR(parse({{"quant_method", "gptq"}, {"bits", 2}, {"group_size", 128}}), "2-bit");
  EXPECT_ERROR(parse({{"quant_method", "awq"}, {"bits", 8}, {"group_size", 128}}), "8-bit");
  EXPECT_ERROR(parse({{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 0}}), "group_size 0");
  EXPECT_ERROR(parse({{"quant_method", "gptq"}, {"bits", 4}}), "'group_size'");
  EXPECT_ERROR(
      parse({{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"version", "gemv"}}),
      "AWQ version 'gemv'");
  EXPECT_ERROR(parse({{"quant_method", "gptq"},
                      {"bits", 4},
                      {"group_size", 128},
                      {"checkpoint_format", "marlin"}}),
               "checkpoint_format 'marlin'");
  EXPECT_ERROR(parse({{"quant_method", "auto-round"},
                      {"bits", 4},
                      {"group_size", 128},
                      {"packing_format", "auto_round:gguf"}}),
               "packing_format 'auto_round:gguf'");
  EXPECT_ERROR(parse({{"quant_method", "auto-round"},
                      {"bits", 4},
                      {"group_size", 128},
                      {"extra_config", {{"model.layers.0.mlp.up_proj", {{"bits", 8}}}}}}),
               "per-module");
  const json a8 = {{"num_bits", 8}, {"type", "int"}, {"strategy", "tensor"}, {"dynamic", false}};
  EXPECT_ERROR(parse({{"quant_method", "compressed-tensors"},
                      {"format", "int-quantized"},
                      {"config_groups",
                       {{"g",
                         {{"weights", {{"num_bits", 8}, {"strategy", "channel"}}},
                          {"input_activations", a8}}}}}}),
               "static or per-tensor int8 activations");
  // INT4 weights in the FP8 format: the width is named.
  EXPECT_ERROR(
      parse({{"quant_method", "compressed-tensors"},
             {"format", "float-quantized"},
             {"config_groups", {{"g", {{"weights", {{"num_bits", 4}, {"type", "int"}}}}}}}}),
      "4-bit int");
  EXPECT_ERROR(parse({{"quant_method", "compressed-tensors"},
                      {"format", "pack-quantized"},
                      {"ignore", {"re:("}},
                      {"config_groups",
                       {{"g", {{"weights", {{"num_bits", 4}, {"strategy", "channel"}}}}}}}}),
               "invalid regex");
}

// ---- tiny checkpoints packed from known integers
// --------------------------------------------------

enum class Format {
  kAwq,
  kGptqV1,
  kGptqV2,
  kGptqActOrder,
  kCtPacked,
  kCtPackedAsym,
  kCtW8A8,
  kAutoRoundGptq
};

// One quantized linear weight: integers q [out, in], zeros and scales [out, groups] (scales rounded
// to the stored half type), the group of each input column.
struct IntWeight {
  int64_t out = 0, in = 0, groups = 0;
  std::vector<int32_t> q, z;
  std::vector<float> s;
  std::vector<int32_t> group;
  std::vector<float> dequantized() const {
    std::vector<float> w(size_t(out * in));
    for (int64_t r = 0; r < out; ++r)
      for (int64_t c = 0; c < in; ++c) {
        const size_t g = size_t(r * groups + group[size_t(c)]);
        w[size_t(r * in + c)] = float(q[size_t(r * in + c)] - z[g]) * s[g];
      }
    return w;
  }
};

struct Spec {
  Format format;
  int bits = 4;
  int group_size = 4;
  bool zero_points = true;
  json quantization_config;
};

Spec spec_of(Format f) {
  const json w4 = {{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 4}};
  switch (f) {
    case Format::kAwq:
      return {f,
              4,
              4,
              true,
              {{"quant_method", "awq"},
               {"bits", 4},
               {"group_size", 4},
               {"zero_point", true},
               {"version", "gemm"}}};
    case Format::kGptqV1:
      return {f,
              8,
              4,
              true,
              {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 4}, {"sym", false}}};
    case Format::kGptqV2:
      return {f,
              4,
              4,
              true,
              {{"quant_method", "gptq"},
               {"bits", 4},
               {"group_size", 4},
               {"sym", false},
               {"checkpoint_format", "gptq_v2"}}};
    case Format::kGptqActOrder:
      return {f,
              4,
              4,
              false,
              {{"quant_method", "gptq"},
               {"bits", 4},
               {"group_size", 4},
               {"desc_act", true},
               {"sym", true}}};
    case Format::kCtPacked:
      return {f,
              4,
              4,
              false,
              {{"quant_method", "compressed-tensors"},
               {"format", "pack-quantized"},
               {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", w4}}}}}}};
    case Format::kCtPackedAsym: {
      json w = w4;
      w["symmetric"] = false;
      return {f,
              4,
              4,
              true,
              {{"quant_method", "compressed-tensors"},
               {"format", "pack-quantized"},
               {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", w}}}}}}};
    }
    case Format::kCtW8A8:
      return {
          f,
          8,
          -1,
          false,
          {{"quant_method", "compressed-tensors"},
           {"format", "int-quantized"},
           {"config_groups",
            {{"group_0",
              {{"targets", {"Linear"}},
               {"weights", {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}}},
               {"input_activations",
                {{"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}}}}}}}}};
    case Format::kAutoRoundGptq:
      return {f,
              4,
              4,
              false,
              {{"quant_method", "auto-round"},
               {"bits", 4},
               {"group_size", 4},
               {"sym", true},
               {"packing_format", "auto_round:auto_gptq"}}};
  }
  return {};
}

IntWeight make_weight(const Spec& sp, int64_t out, int64_t in, std::mt19937& rng) {
  IntWeight w;
  w.out = out, w.in = in;
  const int64_t gs = sp.group_size > 0 ? sp.group_size : in;
  w.groups = (in + gs - 1) / gs;
  const int levels = 1 << sp.bits;
  const bool ct = sp.format == Format::kCtPacked || sp.format == Format::kCtPackedAsym;
  for (int64_t i = 0; i < out * in; ++i)  // W8A8 stores signed int8; the others unsigned levels
    w.q.push_back(sp.format == Format::kCtW8A8 ? int32_t(rng() % 256) - 128
                                               : int32_t(rng() % levels));
  for (int64_t i = 0; i < out * w.groups; ++i) {
    // GPTQ v1 cannot store zero 0 (it keeps zero - 1); the others take any level.
    const int32_t lo = sp.format == Format::kGptqV1 ? 1 : 0;
    w.z.push_back(sp.format == Format::kCtW8A8 ? 0
                  : sp.zero_points             ? lo + int32_t(rng() % uint32_t(levels - lo))
                                               : levels / 2);
    const float s = (0.5f + float(rng() % 1000) / 1000.0f) * 0.01f * (rng() % 2 ? 1 : -1);
    w.s.push_back(ct ? bf16_to_f32(f32_to_bf16(s)) : f16_to_f32(f32_to_f16(s)));
  }
  for (int64_t c = 0; c < in; ++c) w.group.push_back(int32_t(c / gs));
  if (sp.format == Format::kGptqActOrder) std::shuffle(w.group.begin(), w.group.end(), rng);
  return w;
}

void add_raw(SafetensorsBuilder& b, const std::string& name, const char* dtype,
             const std::vector<int64_t>& shape, const void* bytes, size_t n) {
  const size_t begin = b.data.size();
  b.data.append(static_cast<const char*>(bytes), n);
  b.header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, b.data.size()}}};
}

void add_i32(SafetensorsBuilder& b, const std::string& name, const std::vector<int64_t>& shape,
             const std::vector<uint32_t>& v) {
  add_raw(b, name, "I32", shape, v.data(), v.size() * 4);
}

// Packs value v (already unsigned, < 2^bits) into slot `slot` of word `word`.
void put(std::vector<uint32_t>& words, int64_t word, int slot, int bits, int32_t v) {
  words[size_t(word)] |= (uint32_t(v) & ((1u << bits) - 1)) << (slot * bits);
}

// Scales [groups, out] (AWQ / GPTQ) in F16.
void add_scales_by_group(SafetensorsBuilder& b, const std::string& name, const IntWeight& w) {
  std::vector<float> s;
  for (int64_t g = 0; g < w.groups; ++g)
    for (int64_t r = 0; r < w.out; ++r) s.push_back(w.s[size_t(r * w.groups + g)]);
  b.add_f16(name, {w.groups, w.out}, s);
}

void write_awq(SafetensorsBuilder& b, const std::string& m, const IntWeight& w) {
  // AutoAWQ's order: nibble i of word j holds output column 8j + kOrder[i].
  constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<uint32_t> qw(size_t(w.in * w.out / 8)), qz(size_t(w.groups * w.out / 8));
  for (int64_t c = 0; c < w.in; ++c)
    for (int64_t j = 0; j < w.out / 8; ++j)
      for (int i = 0; i < 8; ++i)
        put(qw, c * (w.out / 8) + j, i, 4, w.q[size_t((8 * j + kOrder[i]) * w.in + c)]);
  for (int64_t g = 0; g < w.groups; ++g)
    for (int64_t j = 0; j < w.out / 8; ++j)
      for (int i = 0; i < 8; ++i)
        put(qz, g * (w.out / 8) + j, i, 4, w.z[size_t((8 * j + kOrder[i]) * w.groups + g)]);
  add_i32(b, m + ".qweight", {w.in, w.out / 8}, qw);
  add_i32(b, m + ".qzeros", {w.groups, w.out / 8}, qz);
  add_scales_by_group(b, m + ".scales", w);
}

void write_gptq(SafetensorsBuilder& b, const std::string& m, const IntWeight& w, int bits, bool v1,
                bool g_idx) {
  const int pf = 32 / bits;
  std::vector<uint32_t> qw(size_t(w.in / pf * w.out)), qz(size_t(w.groups * w.out / pf));
  for (int64_t c = 0; c < w.in; ++c)
    for (int64_t r = 0; r < w.out; ++r)
      put(qw, (c / pf) * w.out + r, int(c % pf), bits, w.q[size_t(r * w.in + c)]);
  for (int64_t g = 0; g < w.groups; ++g)
    for (int64_t r = 0; r < w.out; ++r)
      put(qz, g * (w.out / pf) + r / pf, int(r % pf), bits,
          w.z[size_t(r * w.groups + g)] - (v1 ? 1 : 0));
  add_i32(b, m + ".qweight", {w.in / pf, w.out}, qw);
  add_i32(b, m + ".qzeros", {w.groups, w.out / pf}, qz);
  add_scales_by_group(b, m + ".scales", w);
  if (g_idx) {
    std::vector<uint32_t> gi(w.group.begin(), w.group.end());
    add_i32(b, m + ".g_idx", {w.in}, gi);
  }
}

void write_ct(SafetensorsBuilder& b, const std::string& m, const IntWeight& w, int bits,
              bool asym) {
  const int pf = 32 / bits;
  const int64_t words = (w.in + pf - 1) / pf;
  std::vector<uint32_t> qw(size_t(w.out * words)), zp(size_t((w.out + pf - 1) / pf * w.groups));
  // Levels are stored as is: a signed value q - 2^(bits-1) plus compressed-tensors' offset.
  for (int64_t r = 0; r < w.out; ++r)
    for (int64_t c = 0; c < w.in; ++c)
      put(qw, r * words + c / pf, int(c % pf), bits, w.q[size_t(r * w.in + c)]);
  for (int64_t r = 0; r < w.out; ++r)
    for (int64_t g = 0; g < w.groups; ++g)
      put(zp, (r / pf) * w.groups + g, int(r % pf), bits, w.z[size_t(r * w.groups + g)]);
  add_i32(b, m + ".weight_packed", {w.out, words}, qw);
  const int64_t shape[2] = {w.out, w.in};
  add_raw(b, m + ".weight_shape", "I64", {2}, shape, sizeof shape);
  b.add_bf16(m + ".weight_scale", {w.out, w.groups}, w.s);
  if (asym) add_i32(b, m + ".weight_zero_point", {(w.out + pf - 1) / pf, w.groups}, zp);
}

void write_w8a8(SafetensorsBuilder& b, const std::string& m, const IntWeight& w) {
  std::vector<int8_t> q(w.q.begin(), w.q.end());
  add_raw(b, m + ".weight", "I8", {w.out, w.in}, q.data(), q.size());
  b.add_f32_values(m + ".weight_scale", {w.out, 1}, w.s);
}

bool is_linear(const std::string& name) {
  for (const char* p :
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.find(p) != std::string::npos) return true;
  return false;
}

// Writes the tiny Llama with every linear weight in `format` (modules named in `keep_16bit` as F32
// .weight, listed in the config's ignore list); returns the dequantized linear weights by name.
std::map<std::string, std::vector<float>> write_int_llama(const std::filesystem::path& dir,
                                                          Format format,
                                                          const std::string& keep_16bit = "",
                                                          int group_size = 4) {
  Spec sp = spec_of(format);
  if (sp.group_size > 0 && group_size != sp.group_size) {
    sp.group_size = group_size;
    json& qc = sp.quantization_config;
    if (qc.contains("config_groups"))
      qc["config_groups"]["group_0"]["weights"]["group_size"] = group_size;
    else
      qc["group_size"] = group_size;
  }
  json config = testing::tiny_llama_config();
  // AWQ matches substrings; compressed-tensors names or regexes.
  if (!keep_16bit.empty() && format == Format::kAwq)
    sp.quantization_config["modules_to_not_convert"] = {keep_16bit};
  else if (!keep_16bit.empty())
    sp.quantization_config["ignore"] = {"lm_head", "re:.*" + keep_16bit + "$"};
  config["quantization_config"] = sp.quantization_config;
  testing::write_file(dir / "config.json", config.dump());
  SafetensorsBuilder all, b;
  testing::add_tiny_llama_tensors(all);
  std::mt19937 rng(7);
  std::map<std::string, std::vector<float>> deq;
  for (const auto& [name, entry] : all.header.items()) {
    const std::vector<int64_t> shape = entry["shape"].get<std::vector<int64_t>>();
    if (!is_linear(name) || (!keep_16bit.empty() && name.find(keep_16bit) != std::string::npos)) {
      std::vector<float> v(size_t(shape[0] * (shape.size() > 1 ? shape[1] : 1)));
      std::memcpy(v.data(), all.data.data() + entry["data_offsets"][0].get<size_t>(), v.size() * 4);
      b.add_f32_values(name, shape, v);
      if (is_linear(name)) deq[name] = v;
      continue;
    }
    const IntWeight w = make_weight(sp, shape[0], shape[1], rng);
    deq[name] = w.dequantized();
    const std::string m = name.substr(0, name.size() - 7);  // without ".weight"
    switch (format) {
      case Format::kAwq:
        write_awq(b, m, w);
        break;
      case Format::kGptqV1:
        write_gptq(b, m, w, 8, true, false);
        break;
      case Format::kGptqV2:
        write_gptq(b, m, w, 4, false, true);
        break;
      case Format::kGptqActOrder:
        write_gptq(b, m, w, 4, true, true);
        break;
      case Format::kAutoRoundGptq:
        write_gptq(b, m, w, 4, false, false);
        break;  // v2-style 8s
      case Format::kCtPacked:
        write_ct(b, m, w, 4, false);
        break;
      case Format::kCtPackedAsym:
        write_ct(b, m, w, 4, true);
        break;
      case Format::kCtW8A8:
        write_w8a8(b, m, w);
        break;
    }
  }
  testing::write_file(dir / "model.safetensors", b.bytes());
  return deq;
}

void expect_weights(const io::ModelConfig& c, const io::WeightStore& store,
                    const parallel::ShardSpec& shard,
                    const std::map<std::string, std::vector<float>>& deq) {
  models::LlamaWeights w = models::load_llama_weights(c, store, shard);
  EXPECT_EQ(testing::expect_parts_dequantized(w, c, shard, deq, quant::quantized_slot), 2 * 7);
}

TEST(IntCheckpoint, EveryFormatLoadsBitExactWholeAndTensorParallel) {
  for (Format f :
       {Format::kAwq, Format::kGptqV1, Format::kGptqV2, Format::kGptqActOrder, Format::kCtPacked,
        Format::kCtPackedAsym, Format::kCtW8A8, Format::kAutoRoundGptq}) {
    SCOPED_TRACE(spec_of(f).quantization_config.dump());
    TempDir dir;
    const auto deq = write_int_llama(dir.path(), f);
    const io::ModelConfig c = io::load_model_config(dir.path());
    ASSERT_TRUE(c.quant.int_weights());
    const io::WeightStore store = io::WeightStore::open(dir.path());
    expect_weights(c, store, {}, deq);
    for (int r = 0; r < 2; ++r) {  // 8-row k/v slices cut AWQ's 8-column words; 4-column groups
      parallel::ShardSpec shard;
      shard.tp_size = 2, shard.tp_rank = r;
      expect_weights(c, store, shard, deq);
    }
  }
}

TEST(IntCheckpoint, IgnoredModulesStaySixteenBit) {
  for (Format f : {Format::kAwq, Format::kCtPacked}) {
    TempDir dir;
    const auto deq = write_int_llama(dir.path(), f, "down_proj");
    const io::ModelConfig c = io::load_model_config(dir.path());
    EXPECT_FALSE(quant::int_part_quantized(c.quant, "model.layers.1.mlp.down_proj.weight"));
    expect_weights(c, io::WeightStore::open(dir.path()), {}, deq);
  }
}

TEST(IntCheckpoint, Int8ActivationsRoundPerToken) {
  std::vector<float> x = {1.0f, -0.5f, 0.25f, 0.0f, 0, 0, 0, 0, 3.0f, 1.0f, -3.0f, 0.01f};
  quant::fake_quantize_rows_int8(x.data(), 3, 4);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], std::nearbyint(-0.5f * 127) / 127);  // -64 / 127 (ties to even)
  EXPECT_EQ(x[4], 0.0f);                               // a zero row stays zero
  EXPECT_EQ(x[10], -3.0f);
  EXPECT_EQ(x[11], 0.0f);  // 0.01 * 127 / 3 rounds to 0
}

// ---- broken checkpoints: one line naming the tensor and the problem
// --------------------------------

struct Broken {
  TempDir dir;
  json header;
  std::string data;
  explicit Broken(Format f) {
    write_int_llama(dir.path(), f);
    const std::string file = testing::read_file(dir.path() / "model.safetensors");
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(file[size_t(i)])) << (8 * i);
    header = json::parse(file.substr(8, n));
    data = file.substr(8 + n);
  }
  // Loads with the header (and data) as changed; returns the error.
  std::string load(int tp = 1) {
    testing::write_file(dir.path() / "model.safetensors",
                        testing::safetensors_bytes(header.dump(), data));
    return error_of([&] {
      const io::WeightStore store = io::WeightStore::open(dir.path());
      parallel::ShardSpec shard;
      shard.tp_size = tp;
      models::load_llama_weights(io::load_model_config(dir.path()), store, shard);
    });
  }
  void set_config(const std::string& key, const json& value) {
    json c = json::parse(testing::read_file(dir.path() / "config.json"));
    c["quantization_config"][key] = value;
    testing::write_file(dir.path() / "config.json", c.dump());
  }
  template <class T>
  void poke(const std::string& tensor, size_t index, T value) {
    std::memcpy(data.data() + header[tensor]["data_offsets"][0].get<size_t>() + index * sizeof(T),
                &value, sizeof(T));
  }
};

const std::string kQ = "model.layers.1.self_attn.q_proj.";
const std::string kDown = "model.layers.0.mlp.down_proj.";

TEST(IntCheckpoint, BadPackingAndMissingTensorsNameTheTensor) {
  {
    Broken b(Format::kAwq);
    b.header[kQ + "qweight"]["shape"] = {2, 16};  // 32 words, not [16, 2]
    EXPECT_NE(b.load().find("'" + kQ +
                            "qweight' has shape [2, 16] but the qweight of a 4-bit awq "
                            "weight 'model.layers.1.self_attn.q_proj' [16, 16], group_size 4 must "
                            "be [16, 2]"),
              std::string::npos)
        << b.load();
    b.header[kQ + "qweight"]["shape"] = {16, 2};
    b.header[kQ + "qweight"]["dtype"] = "F32";
    EXPECT_NE(b.load().find("'" + kQ + "qweight' is float32 but qweight must be int32"),
              std::string::npos);
  }
  Broken g(Format::kGptqActOrder);
  for (const char* t : {"qzeros", "scales", "g_idx"}) {
    json h = g.header;
    g.header.erase(kDown + t);
    EXPECT_NE(g.load().find("missing tensor '" + kDown + t + "'"), std::string::npos) << g.load();
    g.header = h;
  }
  Broken ct(Format::kCtPacked);
  ct.poke<int64_t>(kDown + "weight_shape", 1, 23);
  EXPECT_NE(ct.load().find("'" + kDown + "weight_shape' holds [16, 23]"), std::string::npos)
      << ct.load();
  // A float checkpoint tensor stored as integers, and int tensors without an INT config.
  Broken w8(Format::kCtW8A8);
  w8.header["model.norm.weight"]["dtype"] = "I32";
  EXPECT_NE(w8.load().find("'model.norm.weight' is int32 but must be F32, BF16 or F16"),
            std::string::npos)
      << w8.load();
}

TEST(IntCheckpoint, BadValuesNameTheTensor) {
  Broken g(Format::kGptqActOrder);
  g.poke<int32_t>(kDown + "g_idx", 5, 6);  // 24 columns in 6 groups: group 6 does not exist
  EXPECT_NE(g.load().find("'" + kDown + "g_idx' assigns input column 5 to group 6, outside [0, 6)"),
            std::string::npos)
      << g.load();
  int32_t g7;  // column 5 moves to column 7's group: in range, but that group holds 5 columns
  std::memcpy(&g7, g.data.data() + g.header[kDown + "g_idx"]["data_offsets"][0].get<size_t>() + 28,
              4);
  g.poke<int32_t>(kDown + "g_idx", 5, g7);
  g.poke<int32_t>(kDown + "g_idx", 7, g7);
  EXPECT_NE(g.load().find("input columns in group"), std::string::npos) << g.load();
  EXPECT_NE(g.load().find("but group_size 4 needs 4"), std::string::npos) << g.load();
  Broken v2(Format::kGptqV2);  // desc_act false: g_idx must be the in-order assignment
  v2.poke<int32_t>(kDown + "g_idx", 0, 1);
  v2.poke<int32_t>(kDown + "g_idx", 4, 0);
  EXPECT_NE(v2.load().find("without act-order"), std::string::npos) << v2.load();
  Broken s(Format::kAwq);
  s.poke<uint16_t>(kDown + "scales", 3, 0);
  EXPECT_NE(
      s.load().find("'" + kDown +
                    "scales' holds 0.000000 at flat index 3; scales must be finite and non-zero"),
      std::string::npos)
      << s.load();
  s.poke<uint16_t>(kDown + "scales", 3, 0x7e00);  // NaN
  EXPECT_NE(s.load().find("holds nan"), std::string::npos) << s.load();
  Broken z(Format::kGptqActOrder);  // symmetric v1: qzeros must hold 7 (or 8)
  z.poke<uint32_t>(kDown + "qzeros", 0, 0x77777773u);
  EXPECT_NE(z.load().find("'" + kDown +
                          "qzeros' holds zero point 3 but a symmetric 4-bit gptq checkpoint "
                          "stores 7 (v1) or 8"),
            std::string::npos)
      << z.load();
}

TEST(IntCheckpoint, ConfigAndTensorParallelMismatchesFailInOneLine) {
  Broken b(Format::kGptqV2);
  b.set_config("bits", 3);
  EXPECT_NE(b.load().find("gptq with 3-bit weights is not supported"), std::string::npos);
  b.set_config("bits", 4);
  b.set_config("group_size", 8);  // the tensors hold groups of 4
  EXPECT_NE(
      b.load().find("'model.layers.0.self_attn.q_proj.qzeros' has shape [4, 2] but the "
                    "qzeros of a 4-bit gptq weight 'model.layers.0.self_attn.q_proj' [16, 16], "
                    "group_size 8 must be [2, 2]"),
      std::string::npos)
      << b.load();
  // Groups of 8 over down_proj's 24 input columns: two ranks of 12 columns would split the
  // second group; act-order checkpoints assign groups by g_idx and may be split anywhere.
  TempDir dir;
  write_int_llama(dir.path(), Format::kGptqV2, "", 8);
  const io::ModelConfig c = io::load_model_config(dir.path());
  const io::WeightStore store = io::WeightStore::open(dir.path());
  parallel::ShardSpec shard;
  shard.tp_size = 2;
  EXPECT_NE(error_of([&] { models::load_llama_weights(c, store, shard); })
                .find("'" + kDown +
                      "qweight' cannot be split for tensor parallelism: this rank's shard of input "
                      "columns [0, 12) cuts through groups of group_size 8"),
            std::string::npos)
      << error_of([&] { models::load_llama_weights(c, store, shard); });
  TempDir act;
  const auto deq = write_int_llama(act.path(), Format::kGptqActOrder, "", 8);
  const io::ModelConfig ac = io::load_model_config(act.path());
  expect_weights(ac, io::WeightStore::open(act.path()), shard, deq);
}

}  // namespace
}  // namespace pagellm
