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
#include "int_checkpoint_util.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "quant/fp8_weights.h"
#include "quant/int_weights.h"
#include "quant/quant_config.h"

namespace pagellm {
namespace {

using nlohmann::json;
using testing::Format;
using testing::IntWeight;
using testing::SafetensorsBuilder;
using testing::Spec;
using testing::spec_of;
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
    testing::write_int_weight(b, format, m, w);
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
