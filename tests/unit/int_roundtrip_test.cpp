// Round trip against the independent quantizer (tools/quantize_int.py, issue 12): every checkpoint
// under tests/data/int_quant/<format>/ loads through the real CPU path (config.json ->
// QuantConfig -> check_llama_checkpoint -> load_llama_weights) to dequantized linear weights whose
// fp32 bytes hash to the sha256 the quantizer wrote in dequantized.json; tensor-parallel ranks
// hold exact slices of them.
#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>

#include <gtest/gtest.h>

#include "models/llama.h"
#include "models/weight_plan.h"
#include "model_files_util.h"
#include "quant/fp8_weights.h"

namespace pagellm {
namespace {

using nlohmann::json;

const std::filesystem::path kData =
    std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests" / "data" / "int_quant";

std::string sha256_hex(const float* data, size_t count) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data, count * sizeof(float), out, &n, EVP_sha256(), nullptr);
  std::string hex;
  char b[3];
  for (unsigned int i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", out[i]);
    hex += b;
  }
  return hex;
}

// The dequantized HF tensors of a loaded model, by name (the fused runtime tensors cut into parts).
std::map<std::string, std::vector<float>> linear_parts(const io::ModelConfig& c,
                                                       models::LlamaWeights& w,
                                                       const parallel::ShardSpec& shard = {}) {
  std::map<std::string, std::vector<float>> out;
  for (const models::WeightTensorSpec& t : models::llama_weight_plan(c, shard)) {
    if (!quant::quantized_slot(t.slot)) continue;
    const std::vector<float>& got = models::weight_slot(w, t);
    size_t off = 0;
    for (const models::HfTensorSpec& part : t.parts) {
      out[part.name].assign(got.begin() + long(off), got.begin() + long(off + part.num_elements()));
      off += size_t(part.num_elements());
    }
  }
  return out;
}

std::vector<std::string> formats() {
  std::vector<std::string> out;
  if (!std::filesystem::exists(kData)) return out;
  for (const auto& e : std::filesystem::directory_iterator(kData))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(IntRoundTrip, EveryQuantizerCheckpointDequantizesToItsHashes) {
  const std::vector<std::string> names = formats();
  ASSERT_GE(names.size(), 10u) << kData;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::filesystem::path dir = kData / name;
    const io::ModelConfig c = io::load_model_config(dir);
    ASSERT_TRUE(c.quant.int_weights()) << c.quant.describe();
    const io::WeightStore store = io::WeightStore::open(dir);
    models::LlamaWeights w = models::load_llama_weights(c, store);
    const std::map<std::string, std::vector<float>> got = linear_parts(c, w);
    const json want = json::parse(testing::read_file(dir / "dequantized.json"));
    ASSERT_EQ(want.size(), got.size());
    for (const auto& [tensor, expected] : want.items()) {
      const std::vector<float>& v = got.at(tensor);
      ASSERT_EQ(int64_t(v.size()), expected["shape"][0].get<int64_t>() * expected["shape"][1].get<int64_t>());
      if (sha256_hex(v.data(), v.size()) == expected["sha256"].get<std::string>()) continue;
      std::string first;
      for (size_t i = 0; i < 8; ++i) first += std::to_string(v[i]) + " ";
      double sum = 0;
      for (float x : v) sum += x;
      ADD_FAILURE() << tensor << ": sha256 differs; pagellm first values " << first << "sum " << sum
                    << "; quantizer first " << expected["first"].dump() << " sum "
                    << expected["sum"].dump();
    }
    // Tensor parallel 2: each rank's slices are exact slices of the whole dequantized weights.
    for (int r = 0; r < 2; ++r) {
      parallel::ShardSpec shard;
      shard.tp_size = 2, shard.tp_rank = r;
      models::LlamaWeights wr = models::load_llama_weights(c, store, shard);
      for (const models::WeightTensorSpec& t : models::llama_weight_plan(c, shard)) {
        if (!quant::quantized_slot(t.slot)) continue;
        const std::vector<float>& local = models::weight_slot(wr, t);
        size_t off = 0;
        for (const models::HfTensorSpec& part : t.parts) {
          const std::vector<float>& full = got.at(part.name);
          models::for_each_slice_run(part, [&](int64_t f, int64_t l, int64_t count) {
            for (int64_t i = 0; i < count; ++i)
              ASSERT_EQ(local[off + size_t(l + i)], full[size_t(f + i)]) << part.name << " rank " << r;
          });
          off += size_t(part.num_elements());
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagellm
