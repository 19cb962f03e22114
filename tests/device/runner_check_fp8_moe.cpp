// FP8 checkpoints of mixture-of-experts models on the GPU (issues 18 and 11): the tiny Qwen3-MoE
// and Mixtral references of tests/data/hf_reference written in FP8 here, as the unit tests write
// them (tests/unit/fp8_moe_test.cpp), then the CUDA runner (bf16) against the CPU runner on the
// same checkpoint: every linear weight per output channel (the attention's W8A8 GEMMs, the experts'
// W8A16 kernels), the experts alone in 16x16 blocks, and the 16-bit references under
// --quantization fp8.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../unit/fp8_checkpoint_util.h"
#include "../unit/model_files_util.h"
#include "common/dtype.h"
#include "io/safetensors.h"
#include "quant/fp8_weights.h"
#include "quant/quant_config.h"
#include "runner_check.h"

namespace pagellm {
namespace {

// Writes reference model src in FP8 into dst: per output channel (fbgemm_fp8) for every linear
// weight but the routers, or the experts alone in 16x16 blocks (block-wise fp8).
void write_fp8(const std::filesystem::path& src, const std::filesystem::path& dst, bool blocks) {
  std::filesystem::create_directories(dst);
  nlohmann::json config = nlohmann::json::parse(testing::read_file(src / "config.json"));
  config["quantization_config"] =
      blocks ? nlohmann::json{{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}}
             : nlohmann::json{{"quant_method", "fbgemm_fp8"}};
  testing::write_file(dst / "config.json", config.dump());
  const io::WeightStore store = io::WeightStore::open(src);
  testing::SafetensorsBuilder b;
  for (const std::string& name : store.names()) {
    const io::TensorView& t = store.get(name);
    std::vector<float> w = quant::read_f32(t);
    const bool linear = name.ends_with("proj.weight") || name.ends_with(".w1.weight") ||
                        name.ends_with(".w2.weight") || name.ends_with(".w3.weight");
    if (!linear || (blocks && name.find(".experts.") == std::string::npos)) {
      b.add_f32_values(name, t.shape, w);
      continue;
    }
    const int64_t n = t.shape[0], k = t.shape[1];
    std::string bytes;
    std::vector<float> scales;
    testing::quantize_fp8(w, n, k, blocks ? 16 : 1, blocks ? 16 : k, bytes, scales);
    testing::add_raw(b, name, "F8_E4M3", t.shape, bytes);
    if (blocks)
      b.add_f32_values(quant::sibling_name(name, "weight_scale_inv"), {(n + 15) / 16, (k + 15) / 16},
                       scales);
    else
      b.add_f32_values(quant::sibling_name(name, "weight_scale"), {n, 1}, scales);
  }
  testing::write_file(dst / "model.safetensors", b.bytes());
}

}  // namespace

void check_fp8_moe(const std::filesystem::path& models_dir) {
  std::printf("== FP8 checkpoints of tiny MoE models (GPU vs CPU runner)\n");
  const std::filesystem::path ref = models_dir / "hf_reference";
  if (!std::filesystem::exists(ref / "qwen3_moe_tiny")) {
    report(false, "no " + (ref / "qwen3_moe_tiny").string() + " in the bundle");
    return;
  }
  testing::TempDir tmp;
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"})
    for (bool blocks : {false, true}) {
      const std::filesystem::path dir = tmp.path() / (std::string(name) + (blocks ? "_b" : "_c"));
      write_fp8(ref / name, dir, blocks);
      const io::ModelConfig c = io::load_model_config(dir);
      const io::WeightStore store = io::WeightStore::open(dir);
      check_tiny_model(c, std::string(name) + (blocks ? " FP8 experts 16x16 blocks" : " FP8 per channel"),
                       DType::kBF16, std::nullopt, false, &store);
    }
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"}) {  // --quantization fp8
    io::ModelConfig c = io::load_model_config(ref / name);
    c.quant = quant::resolve_quantization(c.quant, "fp8", "runner_check");
    const io::WeightStore store = io::WeightStore::open(ref / name);
    check_tiny_model(c, std::string(name) + " --quantization fp8", DType::kBF16, std::nullopt,
                     false, &store);
  }
}

}  // namespace pagellm
