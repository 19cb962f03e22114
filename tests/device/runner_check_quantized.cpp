// Quantized checkpoints of the newer families on the GPU (issues 11, 12 and 18), and longrope: the
// tiny Qwen3-MoE, Mixtral, Phi-3 and Gemma 2 / 3 references of tests/data/hf_reference written as
// INT (AWQ, GPTQ 8-bit and 4-bit act-order, compressed-tensors asymmetric, W8A8-INT8) or FP8
// checkpoints here, as the unit tests write them (tests/unit/quantized_checkpoint_util.h), then the
// CUDA runner (bf16) against the CPU runner on the same checkpoint. INT experts are dequantized at
// load on the GPU; the dense INT layers take the packed kernels where their groups allow (32
// columns). The Phi-3 longrope reference runs with its short and its long factors.
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "../unit/quantized_checkpoint_util.h"
#include "common/dtype.h"
#include "io/safetensors.h"
#include "runner_check.h"

namespace pagellm {
namespace {

using testing::Format;

const char* format_name(std::optional<Format> f) {
  if (!f) return "fbgemm_fp8";
  switch (*f) {
    case Format::kAwq:
      return "awq";
    case Format::kGptqV1:
      return "gptq 8-bit";
    case Format::kGptqV2:
      return "gptq v2";
    case Format::kGptqActOrder:
      return "gptq act-order";
    case Format::kCtPacked:
      return "ct w4a16";
    case Format::kCtPackedAsym:
      return "ct w4a16 asym";
    case Format::kCtW8A8:
      return "ct w8a8-int8";
    case Format::kAutoRoundGptq:
      return "auto-round";
  }
  return "?";
}

// Gemma 2's tiny reference caps its logits at 3.0, where they all sit near the cap and the argmax
// of bf16 runs is noise even without quantization; the published models cap at 30.
void uncap_logits(const std::filesystem::path& dir) {
  nlohmann::json config = nlohmann::json::parse(testing::read_file(dir / "config.json"));
  if (config.contains("final_logit_softcapping")) config["final_logit_softcapping"] = 30.0;
  testing::write_file(dir / "config.json", config.dump());
}

// Writes reference `name` in `format` (none: FP8 per channel) with groups of `group` columns and
// checks the GPU runner against the CPU runner on it: in bf16 (the quantized kernels), in fp32
// (weight-only formats: the loaders, exactly) and its dequantized twin in bf16 (what the
// quantized kernels' bf16 run is held against).
void check_packed(const std::filesystem::path& ref, const char* name, std::optional<Format> format,
                  int group, const testing::TempDir& tmp) {
  std::optional<testing::Spec> spec;
  if (format) {
    spec = testing::spec_of(*format);
    if (spec->group_size > 0) spec = testing::with_group_size(*spec, group);
    // 8-bit levels span 16 times the 4-bit ones: weights of the same size (4-bit's are already
    // larger than the references'), so that bf16's rounding does not decide the argmax.
    if (spec->bits == 8) spec->scale /= 16;
  }
  const std::string label = std::string(name) + " " + format_name(format) +
                            (spec && spec->group_size > 0 ? " g" + std::to_string(group) : "");
  const std::filesystem::path out =
      tmp.path() / (std::string(name) + "_" + std::to_string(format ? int(*format) : -1));
  const testing::Packed m = testing::write_packed(ref / name, out, spec);
  uncap_logits(m.dir);
  uncap_logits(m.twin);
  const io::ModelConfig c = io::load_model_config(m.dir);
  const io::WeightStore store = io::WeightStore::open(m.dir);
  check_tiny_model(c, label, DType::kBF16, std::nullopt, false, &store);
  // One and two decoding sequences: the one-row INT GEMV with SiLU-and-mul in its epilogue, and
  // the two-row step that the 16-bit GEMV takes in unquantized models.
  if (format)
    for (int seqs : {1, 2})
      check_tiny_model(c, label, DType::kBF16, std::nullopt, false, &store, seqs);
  if (format && *format != Format::kCtW8A8)
    check_tiny_model(c, label, DType::kF32, std::nullopt, false, &store);
  const io::ModelConfig twin_config = io::load_model_config(m.twin);
  const io::WeightStore twin = io::WeightStore::open(m.twin);
  check_tiny_model(twin_config, label + " dequantized twin", DType::kBF16, std::nullopt, false,
                   &twin);
}

}  // namespace

void check_quantized_families(const std::filesystem::path& models_dir) {
  std::printf(
      "== quantized Qwen3-MoE / Mixtral / Phi-3 / Gemma checkpoints, longrope (GPU vs CPU)\n");
  const std::filesystem::path ref = models_dir / "hf_reference";
  if (!std::filesystem::exists(ref / "phi3_longrope_tiny")) {
    report(false, "no " + (ref / "phi3_longrope_tiny").string() + " in the bundle");
    return;
  }
  testing::TempDir tmp;
  for (const char* name : {"qwen3_moe_tiny", "mixtral_tiny"})  // Mixtral's experts: 48 columns
    for (Format f : {Format::kAwq, Format::kGptqActOrder, Format::kCtPackedAsym})
      check_packed(ref, name, f, std::string(name) == "mixtral_tiny" ? 16 : 32, tmp);
  for (const char* name : {"phi3_tiny", "gemma2_tiny", "gemma3_tiny"}) {
    check_packed(ref, name, std::nullopt, 0, tmp);
    for (Format f : {Format::kAwq, Format::kGptqV1, Format::kGptqActOrder, Format::kCtPackedAsym,
                     Format::kCtW8A8})
      check_packed(ref, name, f, 32, tmp);
  }
  for (bool use_long : {false, true}) {
    io::ModelConfig c = io::load_model_config(ref / "phi3_longrope_tiny");
    c.rope_scaling.use_long = use_long;
    const io::WeightStore store = io::WeightStore::open(ref / "phi3_longrope_tiny");
    for (DType t : {DType::kF32, DType::kBF16})
      check_tiny_model(c,
                       std::string("phi3 longrope ") + (use_long ? "long" : "short") + " factors",
                       t, std::nullopt, false, &store);
  }
}

}  // namespace pagellm
