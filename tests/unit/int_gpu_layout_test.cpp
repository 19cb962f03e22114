// The GPU's packed form of INT4 / INT8 layers (quant/int_gpu_layout.h) against the CPU loader:
// every quantizer checkpoint under tests/data/int_quant/, every fused linear layer, whole and as
// tensor-parallel rank slices, packed for bf16 and f16 and read back through the kernel layout's
// host reference, equals the CPU backend's dequantized weights up to the scale's rounding to the
// layer dtype (exact where the scale is exact in it).
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "models/llama.h"
#include "models/weight_plan.h"
#include "quant/fp8_weights.h"
#include "quant/int_gpu_layout.h"

namespace pagellm {
namespace {

const std::filesystem::path kData =
    std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests" / "data" / "int_quant";

std::vector<std::string> weight_only_formats() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(kData))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Checks one packed layer against the CPU loader's weights of the same plan entry.
void expect_matches(const quant::IntGpuLayer& L, DType dtype, const std::vector<float>& ref,
                    const std::string& what) {
  ASSERT_EQ(int64_t(ref.size()), L.n * L.k) << what;
  ASSERT_EQ(int64_t(L.wq.size()), L.n * L.k * L.bits / 8) << what;
  ASSERT_EQ(int64_t(L.scale.size()), L.n * L.groups()) << what;
  const double rel = dtype == DType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  int64_t exact = 0;
  for (int64_t r = 0; r < L.n; ++r)
    for (int64_t c = 0; c < L.k; ++c) {
      const float want = ref[size_t(r * L.k + c)];
      const float got = quant::int_gpu_weight(L, dtype, r, c);
      exact += got == want;
      ASSERT_LE(std::fabs(double(got) - want), std::fabs(double(want)) * rel)
          << what << " row " << r << " col " << c;
    }
  // Most scales are not exact in bf16, but many weights are zero (q == zero): some matches exact.
  EXPECT_GT(exact, 0) << what;
}

void check_format(const std::string& name, const parallel::ShardSpec& shard) {
  const std::filesystem::path dir = kData / name;
  const io::ModelConfig c = io::load_model_config(dir);
  ASSERT_TRUE(c.quant.int_weights()) << name;
  const io::WeightStore store = io::WeightStore::open(dir);
  const models::LlamaWeights w = models::load_llama_weights(c, store, shard);
  int packed_layers = 0;
  for (const models::WeightTensorSpec& t : models::llama_weight_plan(c, shard)) {
    if (!quant::quantized_slot(t.slot)) continue;
    std::vector<quant::IntPartValues> values;
    for (const models::HfTensorSpec& part : t.parts)
      values.push_back(quant::unpack_int_part(store, part, c.quant));
    std::vector<const quant::IntPartValues*> parts;
    for (const auto& v : values) parts.push_back(&v);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      std::string why;
      const std::optional<quant::IntGpuLayer> L = quant::pack_int_layer(parts, dtype, &why);
      const std::string what = name + " " + t.label + " rank " + std::to_string(shard.tp_rank) +
                               "/" + std::to_string(shard.tp_size) + " " +
                               std::string(dtype_name(dtype));
      if (!L) {
        // Only act-order slices of input columns may mix group widths on one rank.
        EXPECT_TRUE(c.quant.desc_act && shard.tp_size > 1) << what << ": " << why;
        EXPECT_FALSE(why.empty()) << what;
        continue;
      }
      ++packed_layers;
      EXPECT_EQ(L->bits, c.quant.bits) << what;
      if (c.quant.desc_act && shard.tp_size == 1) {
        EXPECT_FALSE(L->perm.empty()) << what;
      }
      if (!c.quant.desc_act) {
        EXPECT_TRUE(L->perm.empty()) << what;
      }
      expect_matches(*L, dtype, models::weight_slot(w, t), what);
    }
  }
  EXPECT_GT(packed_layers, 0) << name;
}

TEST(IntGpuLayout, EveryQuantizerCheckpointPacksToItsDequantizedWeights) {
  const std::vector<std::string> names = weight_only_formats();
  ASSERT_GE(names.size(), 10u) << kData;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    check_format(name, {});
    for (int r = 0; r < 2; ++r) {
      parallel::ShardSpec shard;
      shard.tp_size = 2, shard.tp_rank = r;
      check_format(name, shard);
    }
  }
}

quant::IntPartValues tiny_part(int bits, int64_t rows, int64_t cols, int64_t group) {
  quant::IntPartValues v;
  v.bits = bits, v.rows = rows, v.cols = cols, v.groups = (cols + group - 1) / group;
  for (int64_t i = 0; i < rows * cols; ++i) v.q.push_back(uint8_t(i * 7 % (1 << bits)));
  v.scale.assign(size_t(rows * v.groups), 0.5f);
  v.zero.assign(size_t(rows * v.groups), 1 << (bits - 1));
  for (int64_t c = 0; c < cols; ++c) v.group.push_back(int32_t(c / group));
  return v;
}

TEST(IntGpuLayout, NibbleOrderPutsAdjacentColumnsInNibblesIAndIPlus4) {
  quant::IntPartValues v = tiny_part(4, 1, 32, 32);
  for (int c = 0; c < 32; ++c) v.q[size_t(c)] = uint8_t(c % 16);
  const auto L = quant::pack_int_layer({&v}, DType::kBF16, nullptr);
  ASSERT_TRUE(L);
  const uint32_t word0 = uint32_t(L->wq[0]) | uint32_t(L->wq[1]) << 8 | uint32_t(L->wq[2]) << 16 |
                         uint32_t(L->wq[3]) << 24;
  // Columns 0..7 hold 0..7: nibbles 0..7 = columns 0, 2, 4, 6, 1, 3, 5, 7.
  EXPECT_EQ(word0, 0x75316420u);
  EXPECT_TRUE(L->zero.empty());  // every zero is 8: symmetric
}

TEST(IntGpuLayout, RefusesWhatTheKernelCannotTake) {
  std::string why;
  quant::IntPartValues narrow = tiny_part(4, 2, 48, 48);
  EXPECT_FALSE(quant::pack_int_layer({&narrow}, DType::kBF16, &why));
  EXPECT_NE(why.find("48 input columns"), std::string::npos) << why;
  quant::IntPartValues g16 = tiny_part(4, 2, 64, 16);
  EXPECT_FALSE(quant::pack_int_layer({&g16}, DType::kBF16, &why));
  EXPECT_NE(why.find("16 input columns wide"), std::string::npos) << why;
  quant::IntPartValues a = tiny_part(4, 2, 64, 32), b = tiny_part(8, 2, 64, 32);
  EXPECT_FALSE(quant::pack_int_layer({&a, &b}, DType::kBF16, &why));
  EXPECT_NE(why.find("fused parts differ"), std::string::npos) << why;
  quant::IntPartValues big_zero = tiny_part(8, 1, 32, 32);
  big_zero.zero[0] = 256;  // GPTQ v1 8-bit: stored 255 + 1
  EXPECT_FALSE(quant::pack_int_layer({&big_zero}, DType::kBF16, &why));
  EXPECT_NE(why.find("zero point 256"), std::string::npos) << why;
  // Act-order groups of unequal width (a slice of input columns): refused, not mispacked.
  quant::IntPartValues mixed = tiny_part(4, 1, 64, 32);
  for (int c = 0; c < 64; ++c) mixed.group[size_t(c)] = c < 40 ? 0 : 1;
  EXPECT_FALSE(quant::pack_int_layer({&mixed}, DType::kBF16, &why));
  EXPECT_NE(why.find("different widths"), std::string::npos) << why;
}

TEST(IntGpuLayout, ActOrderColumnsAreGroupedAndPermuted) {
  quant::IntPartValues v = tiny_part(4, 2, 64, 32);
  for (int c = 0; c < 64; ++c) v.group[size_t(c)] = c % 2;  // interleaved groups
  v.scale = {1.f, 2.f, 3.f, 4.f};
  v.zero = {8, 9, 7, 8};  // asymmetric
  const auto L = quant::pack_int_layer({&v}, DType::kF16, nullptr);
  ASSERT_TRUE(L);
  ASSERT_EQ(L->perm.size(), 64u);
  EXPECT_EQ(L->perm[0], 0);
  EXPECT_EQ(L->perm[1], 2);
  EXPECT_EQ(L->perm[32], 1);
  EXPECT_EQ(L->group_size, 32);
  ASSERT_EQ(L->zero.size(), 4u);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t c = 0; c < 64; ++c) {
      const size_t g = size_t(r * 2 + c % 2);
      EXPECT_EQ(quant::int_gpu_weight(*L, DType::kF16, r, c),
                float(int(v.q[size_t(r * 64 + c)]) - v.zero[g]) * v.scale[g]);
    }
}

}  // namespace
}  // namespace pagellm
