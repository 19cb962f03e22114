// The FP8 KV cache on the CPU (issue 11): --kv-cache-dtype values, the checkpoint's per-layer K/V
// scales (names, validation, one-line errors), the cache storing FP8-rounded values with the
// right layer's scales, and --calculate-kv-scales.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/fp8.h"
#include "model_files_util.h"
#include "models/llama.h"
#include "models/weight_plan.h"
#include "pagellm/engine_args.h"
#include "quant/kv_cache_quant.h"
#include "quant/quant_config.h"

namespace pagellm {
namespace {

using testing::SafetensorsBuilder;

// The one-line message of the pagellm::Error fn throws.
std::string error_of(const std::function<void()>& fn) {
  const std::string message = testing::error_message_of(fn);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return message;
}

TEST(KvCacheDtype, ParsesVllmValues) {
  EXPECT_FALSE(quant::parse_kv_cache_dtype("auto"));
  EXPECT_EQ(quant::parse_kv_cache_dtype("fp8"), DType::kF8E4M3);
  EXPECT_EQ(quant::parse_kv_cache_dtype("fp8_e4m3"), DType::kF8E4M3);
  EXPECT_EQ(quant::parse_kv_cache_dtype("fp8_e5m2"), DType::kF8E5M2);
  EXPECT_NE(error_of([] { quant::parse_kv_cache_dtype("int8"); }).find("fp8_e5m2"),
            std::string::npos);
  EngineArgs args;
  args.calculate_kv_scales = true;
  EXPECT_NE(error_of([&] { args.validate(); }).find("--calculate-kv-scales"), std::string::npos);
  args.kv_cache_dtype = "fp8";
  EXPECT_EQ(error_of([&] { args.validate(); }), "");
}

// A tiny Llama checkpoint (2 layers) plus `extra` scalar tensors.
io::WeightStore tiny_store(const testing::TempDir& dir,
                           const std::vector<std::pair<std::string, float>>& extra,
                           std::vector<int64_t> shape = {}) {
  SafetensorsBuilder b;
  testing::add_tiny_llama_tensors(b);
  int64_t count = 1;
  for (int64_t d : shape) count *= d;
  for (const auto& [name, value] : extra)
    b.add_f32_values(name, shape, std::vector<float>(size_t(count), value));
  testing::write_file(dir.path() / "config.json", testing::tiny_llama_config().dump());
  testing::write_file(dir.path() / "model.safetensors", b.bytes());
  return io::WeightStore::open(dir.path());
}

TEST(KvCacheScales, ReadsValidatesAndNamesTheTensor) {
  const std::string l0 = "model.layers.0.self_attn.", l1 = "model.layers.1.self_attn.";
  {
    testing::TempDir dir;
    const io::WeightStore s = tiny_store(dir, {{l0 + "k_scale", 0.5f}, {l0 + "v_scale", 0.25f},
                                               {l1 + "k_proj.output_scale", 2.f},
                                               {l1 + "v_proj.output_scale", 4.f}});
    const io::ModelConfig c = io::load_model_config(dir.path());
    EXPECT_EQ(quant::read_kv_scales(c, s), (std::vector<float>{0.5f, 0.25f, 2.f, 4.f}));
    EXPECT_NO_THROW(models::check_llama_checkpoint(c, s));
  }
  {
    testing::TempDir dir;  // one shared kv_scale per layer
    const io::WeightStore s = tiny_store(dir, {{l0 + "kv_scale", 3.f}, {l1 + "kv_scale", 5.f}});
    EXPECT_EQ(quant::read_kv_scales(io::load_model_config(dir.path()), s),
              (std::vector<float>{3.f, 3.f, 5.f, 5.f}));
  }
  {
    testing::TempDir dir;  // none: empty, and the plain checkpoint still loads
    const io::WeightStore s = tiny_store(dir, {});
    EXPECT_TRUE(quant::read_kv_scales(io::load_model_config(dir.path()), s).empty());
  }
  const auto error_for = [](const std::vector<std::pair<std::string, float>>& extra,
                            std::vector<int64_t> shape = {}) {
    testing::TempDir dir;
    const io::WeightStore s = tiny_store(dir, extra, shape);
    return error_of(
        [&] { models::check_llama_checkpoint(io::load_model_config(dir.path()), s); });
  };
  EXPECT_NE(error_for({{l0 + "k_scale", 1.f}, {l0 + "v_scale", 1.f}, {l1 + "k_scale", 1.f}})
                .find("'" + l1 + "v_scale' is missing"),
            std::string::npos);
  EXPECT_NE(error_for({{l1 + "k_scale", 1.f}, {l1 + "v_scale", 1.f}}).find("layer 0 has none"),
            std::string::npos);
  EXPECT_NE(error_for({{l0 + "k_scale", 1.f}, {l0 + "v_scale", 1.f}}).find("layer 1 has no KV"),
            std::string::npos);
  EXPECT_NE(error_for({{l0 + "kv_scale", -1.f}, {l1 + "kv_scale", 1.f}}).find("finite and positive"),
            std::string::npos);
  EXPECT_NE(error_for({{l0 + "kv_scale", 1.f}, {l1 + "kv_scale", 1.f}}, {2}).find("not a scalar"),
            std::string::npos);
  // A scale of a layer the config does not have is an unexpected tensor.
  EXPECT_NE(error_for({{"model.layers.7.self_attn.k_scale", 1.f}}).find("unexpected tensor"),
            std::string::npos);
}

TEST(KvCacheScales, CompressedTensorsKvCacheScheme) {
  nlohmann::json qc = {
      {"quant_method", "compressed-tensors"},
      {"format", "float-quantized"},
      {"config_groups",
       {{"group_0",
         {{"targets", {"Linear"}},
          {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}}}}}}},
      {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}}};
  EXPECT_TRUE(quant::parse_quant_config(qc, "config.json").kv_cache_scales);
  qc["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "int"}, {"strategy", "tensor"}};
  EXPECT_NE(error_of([&] { quant::parse_quant_config(qc, "config.json"); }).find("kv_cache_scheme"),
            std::string::npos);
  qc["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
  EXPECT_NE(error_of([&] { quant::parse_quant_config(qc, "config.json"); }).find("per-tensor"),
            std::string::npos);
}

// K/V rows of 3 tokens, 2 kv heads x 4 dims, written to slots 5, 0, 17 of a 2-layer cache.
TEST(KvCacheFp8, StoresTheRoundedValuesWithTheLayersScales) {
  for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
    const Fp8Format f = quant::fp8_format(fp8);
    models::KvCacheQuant q;
    q.fp8 = fp8;
    q.scales = {9.f, 9.f, 0.01f, 0.02f, 0.5f, 0.25f};  // 3 model layers; this pool holds 1 and 2
    models::KvCache cache(2, 4, 8, 2, 4, q, /*layer_begin=*/1);
    std::vector<float> k(24), v(24);
    for (size_t i = 0; i < k.size(); ++i) k[i] = 0.013f * float(i) - 0.1f, v[i] = -0.7f * k[i];
    const std::vector<int64_t> slots{5, 0, 17};
    for (int64_t layer : {0, 1}) {
      const cpu::KvLayerView view = cache.layer(layer);
      ASSERT_TRUE(view.fp8);
      EXPECT_EQ(view.k_scale, q.scales[size_t(2 + 2 * layer)]);
      EXPECT_EQ(view.v_scale, q.scales[size_t(3 + 2 * layer)]);
      cpu::write_kv(view, k.data(), v.data(), 8, slots.data(), 3);
      for (size_t t = 0; t < 3; ++t) {
        for (size_t i = 0; i < 8; ++i) {
          const float want_k =
              fp8_to_f32(f32_to_fp8(k[t * 8 + i] * (1.f / view.k_scale), f), f) * view.k_scale;
          const float want_v =
              fp8_to_f32(f32_to_fp8(v[t * 8 + i] * (1.f / view.v_scale), f), f) * view.v_scale;
          EXPECT_EQ(view.k[slots[t] * 8 + int64_t(i)], want_k);
          EXPECT_EQ(view.v[slots[t] * 8 + int64_t(i)], want_v);
        }
      }
    }
  }
}

TEST(KvCacheFp8, CalculatesEachLayersScalesFromItsFirstBatch) {
  models::KvCacheQuant q;
  q.fp8 = DType::kF8E4M3;
  q.calculate_scales = true;
  models::KvCache cache(2, 2, 8, 1, 4, q);
  const std::vector<float> rows{0.5f, -3.f, 1.f, 2.f, 9.f, 9.f, 9.f, 9.f,  // k then v of token 0
                                -1.f, 0.f, 4.f, 0.f, 1.f, 1.f, -12.f, 1.f};
  EXPECT_TRUE(cache.scales_pending(0));
  cache.calculate_scales(0, rows.data(), rows.data() + 4, 8, 2);
  EXPECT_FALSE(cache.scales_pending(0));
  EXPECT_TRUE(cache.scales_pending(1));
  EXPECT_FLOAT_EQ(cache.layer(0).k_scale, 2.f * 4.f / 448.f);
  EXPECT_FLOAT_EQ(cache.layer(0).v_scale, 2.f * 12.f / 448.f);
  // Later batches keep them.
  cache.calculate_scales(0, rows.data(), rows.data() + 4, 8, 1);
  EXPECT_FLOAT_EQ(cache.layer(0).v_scale, 2.f * 12.f / 448.f);
  EXPECT_EQ(cache.layer(1).k_scale, 1.f);
}

}  // namespace
}  // namespace pagellm
