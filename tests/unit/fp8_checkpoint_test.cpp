// FP8 checkpoints on the CPU backend (issue 11): quantization_config parsing for every format,
// FP8 checkpoints written here from the trained pycode-25M (per-channel, per-tensor with different
// scales per fused shard, 128x128 blocks) loading to exactly the dequantized weights, tensor-parallel
// slices of them, --quantization fp8 on the 16-bit checkpoint, one-line errors for bad scales, and
// the teacher-forced perplexity of FP8 W8A8 and of the FP8 KV cache against bf16.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fp8.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "fp8_checkpoint_util.h"
#include "model_files_util.h"
#include "quant/fp8_weights.h"
#include "quant/quant_config.h"
#include "sanitized.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

using nlohmann::json;
using testing::SafetensorsBuilder;
using testing::TempDir;

const std::filesystem::path kPycode =
    std::filesystem::path(PAGELLM_SHARED_DIR) / "models" / "pycode-25M";

// The one-line message of the pagellm::Error fn throws.
std::string error_of(const std::function<void()>& fn) {
  const std::string message = testing::error_message_of(fn);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

quant::QuantConfig parse(const json& qc) { return quant::parse_quant_config(qc, "config.json"); }

TEST(QuantConfig, ParsesEveryFp8Format) {
  auto ct = parse({{"quant_method", "compressed-tensors"},
                   {"format", "float-quantized"},
                   {"config_groups",
                    {{"group_0",
                      {{"targets", {"Linear"}},
                       {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}},
                       {"input_activations",
                        {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
                   {"ignore", {"lm_head"}}});
  EXPECT_TRUE(ct.fp8_checkpoint());
  EXPECT_EQ(ct.weight_scales, quant::WeightScales::kChannel);
  EXPECT_FALSE(ct.static_activations);
  EXPECT_EQ(ct.ignore, std::vector<std::string>{"lm_head"});

  auto fp8 = parse({{"quant_method", "fp8"}, {"activation_scheme", "static"}});
  EXPECT_EQ(fp8.weight_scales, quant::WeightScales::kTensor);
  EXPECT_TRUE(fp8.static_activations);
  EXPECT_EQ(fp8.scale_suffix, "weight_scale");

  auto block = parse({{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                      {"weight_block_size", {128, 128}}});
  EXPECT_EQ(block.weight_scales, quant::WeightScales::kBlock);
  EXPECT_EQ(block.block_n, 128);
  EXPECT_EQ(block.scale_suffix, "weight_scale_inv");

  auto fb = parse({{"quant_method", "fbgemm_fp8"}, {"activation_scale_ub", 1200.0}});
  EXPECT_EQ(fb.weight_scales, quant::WeightScales::kChannel);
  EXPECT_NE(fb.describe().find("fbgemm_fp8"), std::string::npos);

  auto online = quant::resolve_quantization({}, "fp8", "config.json");
  EXPECT_TRUE(online.online);
  EXPECT_FALSE(online.fp8_checkpoint());
  EXPECT_TRUE(quant::resolve_quantization(fp8, "fp8", "x").fp8_checkpoint());
}

TEST(QuantConfig, RefusesWhatItCannotRunWithOneLine) {
  EXPECT_NE(error_of([] { parse({{"quant_method", "bitsandbytes"}}); })
                .find("'bitsandbytes' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse({{"activation_scheme", "dynamic"}}); }).find("quant_method"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse({{"quant_method", "fp8"}, {"activation_scheme", "sometimes"}}); })
                .find("activation_scheme"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse({{"quant_method", "fp8"}, {"weight_block_size", {128}}}); })
                .find("weight_block_size"),
            std::string::npos);
  const json int4 = {{"quant_method", "compressed-tensors"},
                     {"format", "pack-quantized"},
                     {"config_groups", {{"g", {{"weights", {{"num_bits", 4}, {"type", "int"}}}}}}}};
  EXPECT_NE(error_of([&] { parse(int4); }).find("pack-quantized"), std::string::npos);
  EXPECT_NE(error_of([] { quant::resolve_quantization({}, "awq", "x"); }).find("--quantization awq"),
            std::string::npos);
  EXPECT_NE(error_of([] { quant::resolve_quantization({}, "fbgemm_fp8", "x"); })
                .find("not quantized"),
            std::string::npos);
}

// ---- FP8 checkpoints written from pycode-25M --------------------------------------------------

// fbgemm_fp8 per channel, AutoFP8 per tensor (static activations), block-wise fp8
// (weight_scale_inv), and compressed-tensors with channel and block strategies.
enum class Layout { kChannel, kTensor, kBlock, kCtChannel, kCtBlock };

std::vector<float> read_f32(const io::TensorView& t) {
  std::vector<float> out(size_t(t.num_elements()));
  convert_to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

bool is_linear(const std::string& name) {
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    if (name.find(p) != std::string::npos) return true;
  return false;
}

// Writes pycode-25M in FP8 with `layout` into dir; returns the dequantized linear weights by name.
std::map<std::string, std::vector<float>> write_fp8_pycode(const std::filesystem::path& dir,
                                                           Layout layout) {
  const io::WeightStore src = io::WeightStore::open(kPycode);
  json config = json::parse(testing::read_file(kPycode / "config.json"));
  if (layout == Layout::kChannel)
    config["quantization_config"] = {{"quant_method", "fbgemm_fp8"}};
  else if (layout == Layout::kTensor)
    config["quantization_config"] = {{"quant_method", "fp8"}, {"activation_scheme", "static"}};
  else if (layout == Layout::kBlock)
    config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  else
    config["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"ignore", {"lm_head"}},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             layout == Layout::kCtChannel
                 ? json{{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}
                 : json{{"num_bits", 8}, {"type", "float"}, {"strategy", "block"},
                        {"block_structure", {128, 128}}}},
            {"input_activations",
             {{"num_bits", 8}, {"type", "float"}, {"strategy", layout == Layout::kCtChannel ? "token" : "group"},
              {"dynamic", true}}}}}}}};
  testing::write_file(dir / "config.json", config.dump());
  std::filesystem::copy_file(kPycode / "tokenizer.json", dir / "tokenizer.json");
  SafetensorsBuilder b;
  std::map<std::string, std::vector<float>> deq;
  for (const std::string& name : src.names()) {
    const io::TensorView& t = src.get(name);
    std::vector<float> w = read_f32(t);
    if (!is_linear(name)) {
      b.add_f32_values(name, t.shape, w);
      continue;
    }
    const int64_t n = t.shape[0], k = t.shape[1];
    const bool per_row = layout == Layout::kChannel || layout == Layout::kCtChannel;
    const bool block = layout == Layout::kBlock || layout == Layout::kCtBlock;
    const int64_t bn = per_row ? 1 : layout == Layout::kTensor ? n : 128;
    const int64_t bk = block ? 128 : k;
    std::string bytes;
    std::vector<float> scales;
    deq[name] = testing::quantize_fp8(w, n, k, bn, bk, bytes, scales);
    testing::add_raw(b, name, "F8_E4M3", t.shape, bytes);
    const std::string base = name.substr(0, name.size() - 6);  // "...proj."
    if (per_row) {
      b.add_f32_values(base + "weight_scale", {n, 1}, scales);
    } else if (layout == Layout::kCtBlock) {
      b.add_f32_values(base + "weight_scale", {(n + 127) / 128, (k + 127) / 128}, scales);
    } else if (layout == Layout::kTensor) {
      b.add_f32_values(base + "weight_scale", {}, scales);
      b.add_f32_values(base + "input_scale", {}, {0.05f});
    } else {
      b.add_f32_values(base + "weight_scale_inv", {(n + 127) / 128, (k + 127) / 128}, scales);
    }
  }
  testing::write_file(dir / "model.safetensors", b.bytes());
  return deq;
}

io::ModelConfig config_of(const std::filesystem::path& dir) { return io::load_model_config(dir); }

// The runtime tensors of the FP8 plan entries compared with the expected dequantized parts.
void expect_linear_weights(const models::LlamaWeights& w, const io::ModelConfig& c,
                           const parallel::ShardSpec& shard,
                           std::map<std::string, std::vector<float>>& deq) {
  models::LlamaWeights& mw = const_cast<models::LlamaWeights&>(w);
  EXPECT_EQ(testing::expect_parts_dequantized(mw, c, shard, deq, quant::quantized_slot), 7 * 8);
}

TEST(Fp8Checkpoint, EveryLayoutLoadsToTheDequantizedWeights) {
  if (!std::filesystem::exists(kPycode / "config.json")) GTEST_SKIP();
  for (Layout layout :
       {Layout::kChannel, Layout::kTensor, Layout::kBlock, Layout::kCtChannel, Layout::kCtBlock}) {
    TempDir dir;
    auto deq = write_fp8_pycode(dir.path(), layout);
    const io::ModelConfig c = config_of(dir.path());
    ASSERT_TRUE(c.quant.fp8_checkpoint());
    const io::WeightStore store = io::WeightStore::open(dir.path());
    expect_linear_weights(models::load_llama_weights(c, store), c, {}, deq);
    // Tensor parallel 2: column slices of o_proj / down cut through the 128-column blocks.
    for (int r = 0; r < 2; ++r) {
      parallel::ShardSpec shard;
      shard.tp_size = 2, shard.tp_rank = r;
      expect_linear_weights(models::load_llama_weights(c, store, shard), c, shard, deq);
    }
  }
}

TEST(Fp8Checkpoint, BadScalesGetOneLineErrorsNamingTheTensor) {
  if (!std::filesystem::exists(kPycode / "config.json")) GTEST_SKIP();
  TempDir dir;
  write_fp8_pycode(dir.path(), Layout::kChannel);
  const std::string file = testing::read_file(dir.path() / "model.safetensors");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(uint8_t(file[size_t(i)])) << (8 * i);
  const json header = json::parse(file.substr(8, header_len));
  const std::string data = file.substr(8 + header_len);
  const std::string scale = "model.layers.3.mlp.down_proj.weight_scale";
  auto load_with = [&](const json& h) {
    testing::write_file(dir.path() / "model.safetensors", testing::safetensors_bytes(h.dump(), data));
    return error_of([&] {
      const io::WeightStore store = io::WeightStore::open(dir.path());
      models::load_llama_weights(config_of(dir.path()), store);
    });
  };
  json missing = header;
  missing.erase(scale);
  EXPECT_NE(load_with(missing).find("has no scale tensor '" + scale + "'"), std::string::npos);
  json misshaped = header;
  misshaped[scale]["shape"] = {96, 4};  // 384 floats, not [384, 1]
  EXPECT_NE(load_with(misshaped).find("'" + scale + "' has shape [96, 4]"), std::string::npos);
  // The same FP8 file under a config without quantization_config.
  json config = json::parse(testing::read_file(dir.path() / "config.json"));
  config.erase("quantization_config");
  testing::write_file(dir.path() / "config.json", config.dump());
  EXPECT_NE(load_with(header).find("has no FP8 quantization_config"), std::string::npos);
}

TEST(Fp8Checkpoint, StaticSchemesNeedValidInputScales) {
  if (!std::filesystem::exists(kPycode / "config.json")) GTEST_SKIP();
  TempDir dir;
  write_fp8_pycode(dir.path(), Layout::kTensor);
  const std::string file = testing::read_file(dir.path() / "model.safetensors");
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(uint8_t(file[size_t(i)])) << (8 * i);
  const json header = json::parse(file.substr(8, header_len));
  const std::string input = "model.layers.2.self_attn.o_proj.input_scale";
  auto load_with = [&](const json& h, const std::string& data) {
    testing::write_file(dir.path() / "model.safetensors", testing::safetensors_bytes(h.dump(), data));
    return error_of([&] {
      const io::WeightStore store = io::WeightStore::open(dir.path());
      models::load_llama_weights(config_of(dir.path()), store);
    });
  };
  json missing = header;
  missing.erase(input);
  EXPECT_NE(load_with(missing, file.substr(8 + header_len)).find("has no '" + input + "'"),
            std::string::npos);
  std::string data = file.substr(8 + header_len);
  const float negative = -1.0f;
  data.replace(header[input]["data_offsets"][0].get<size_t>(), 4,
               std::string(reinterpret_cast<const char*>(&negative), 4));
  EXPECT_NE(load_with(header, data).find("'" + input + "' holds -1"), std::string::npos);
}

// ---- accuracy: teacher-forced perplexity --------------------------------------------------------

std::string heldout_text() {
  std::ifstream in(std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/data/heldout_python.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// exp(mean negative log-likelihood) of ids[1:] given their prefixes, in one prefill.
double perplexity(const io::ModelConfig& c, models::LlamaWeights w, const std::vector<int32_t>& ids,
                  const models::KvCacheQuant& kv = {}) {
  models::LlamaModel model(c, std::move(w));
  const int64_t n = int64_t(ids.size()), bs = 16, blocks = (n + bs - 1) / bs;
  models::KvCache cache(c.num_hidden_layers, blocks, bs, c.num_key_value_heads, c.head_dim, kv);
  std::vector<int32_t> pos(ids.size()), table(static_cast<size_t>(blocks));
  std::vector<int64_t> slots(ids.size()), rows(ids.size() - 1);
  for (size_t i = 0; i < ids.size(); ++i) pos[i] = int32_t(i), slots[i] = int64_t(i);
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  for (size_t i = 0; i + 1 < ids.size(); ++i) rows[i] = int64_t(i);
  const cpu::AttentionSeq seq{0, n, 0, table};
  models::ForwardBatch batch{ids, pos, slots, std::span(&seq, 1)};
  const auto hidden = model.forward(batch, cache);
  std::vector<float> logits(rows.size() * size_t(c.vocab_size));
  model.compute_logits(hidden, rows, logits.data());
  double nll = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const float* l = logits.data() + r * size_t(c.vocab_size);
    const double mx = *std::max_element(l, l + c.vocab_size);
    double sum = 0;
    for (int64_t v = 0; v < c.vocab_size; ++v) sum += std::exp(double(l[v]) - mx);
    nll += std::log(sum) + mx - double(l[ids[r + 1]]);
  }
  return std::exp(nll / double(rows.size()));
}

TEST(Fp8Accuracy, PerplexityWithinTwoPercentOfBf16) {
  if (!std::filesystem::exists(kPycode / "config.json")) GTEST_SKIP();
  const std::string text = heldout_text();
  ASSERT_GT(text.size(), 1000u) << "tests/data/heldout_python.txt";
  auto tok = tok::Tokenizer::from_dir(kPycode);
  std::vector<int32_t> ids = tok->encode(text, true);
  const size_t max_tokens = testing::kSanitized ? 96 : 1024;
  if (ids.size() > max_tokens) ids.resize(max_tokens);
  const io::WeightStore store = io::WeightStore::open(kPycode);
  io::ModelConfig c = io::load_model_config(kPycode);
  const double base = perplexity(c, models::load_llama_weights(c, store), ids);
  // --quantization fp8: per-channel weights, per-token activations (W8A8), emulated in fp32.
  io::ModelConfig q = c;
  q.quant = quant::resolve_quantization(c.quant, "fp8", "config.json");
  const double fp8 = perplexity(q, models::load_llama_weights(q, store), ids);
  // A block-scaled checkpoint of the same model.
  TempDir dir;
  write_fp8_pycode(dir.path(), Layout::kBlock);
  const io::ModelConfig bc = config_of(dir.path());
  const double block =
      perplexity(bc, models::load_llama_weights(bc, io::WeightStore::open(dir.path())), ids);
  std::printf("pycode-25M perplexity over %zu tokens: bf16 %.4f, fp8 per-channel W8A8 %.4f "
              "(%+.2f%%), fp8 128x128 blocks %.4f (%+.2f%%)\n",
              ids.size(), base, fp8, 100 * (fp8 / base - 1), block, 100 * (block / base - 1));
  // A trained model on Python code (the first 96 tokens, a docstring, are the hardest part).
  EXPECT_LT(base, testing::kSanitized ? 100.0 : 20.0);
  // The sanitizer build scores only the first 96 tokens: too few for a 2% bound, so it checks that
  // FP8 stays close (the Release build holds the bound on 1024 tokens).
  const double bound = testing::kSanitized ? 1.10 : 1.02;
  EXPECT_LE(fp8, base * bound);
  EXPECT_LE(block, base * bound);

  // --kv-cache-dtype fp8 alone: scales 1.0 (vLLM's default without checkpoint scales) and
  // calculated from the batch; e5m2 (2 mantissa bits) for the record, with a looser bound.
  const auto kv_ppl = [&](DType fp8, bool calculate) {
    models::KvCacheQuant kv;
    kv.fp8 = fp8;
    kv.calculate_scales = calculate;
    return perplexity(c, models::load_llama_weights(c, store), ids, kv);
  };
  const double e4m3 = kv_ppl(DType::kF8E4M3, false), e4m3_calc = kv_ppl(DType::kF8E4M3, true);
  const double e5m2 = kv_ppl(DType::kF8E5M2, true);
  std::printf("FP8 KV cache: e4m3 scales 1.0 %.4f (%+.2f%%), e4m3 calculated scales %.4f "
              "(%+.2f%%), e5m2 calculated %.4f (%+.2f%%)\n",
              e4m3, 100 * (e4m3 / base - 1), e4m3_calc, 100 * (e4m3_calc / base - 1), e5m2,
              100 * (e5m2 / base - 1));
  const double kv_bound = testing::kSanitized ? 1.05 : 1.01;
  EXPECT_LE(e4m3, base * kv_bound);
  EXPECT_LE(e4m3_calc, base * kv_bound);
  EXPECT_LE(e5m2, base * (testing::kSanitized ? 1.10 : 1.05));
  EXPECT_NE(e4m3, base);  // the cache did round
}

}  // namespace
}  // namespace pagellm
