// Quantized copies of the tiny reference models of tests/data/hf_reference, shared by the unit
// tests (quantized_families_test.cpp) and the GPU runner check (tests/device): every linear layer
// an export packs written as AWQ, GPTQ or compressed-tensors INT weights (random integers, zeros
// and scales), or the reference weights in FP8 per output channel (fbgemm_fp8); the routers,
// embeddings, norms and LM heads left as they are. Beside it, an F32 twin holding the dequantized
// weights.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fp8_checkpoint_util.h"
#include "int_checkpoint_util.h"
#include "io/safetensors.h"
#include "model_files_util.h"
#include "quant/fp8_weights.h"

namespace pagellm::testing {

// The linear layers an INT export packs: attention, dense MLP and expert projections (Mixtral's
// experts are w1 / w2 / w3), not the routers ("mlp.gate", "block_sparse_moe.gate").
inline bool packed_by_export(const std::string& name) {
  return name.ends_with("proj.weight") || name.ends_with(".w1.weight") ||
         name.ends_with(".w2.weight") || name.ends_with(".w3.weight");
}

// Spec f with groups of group_size input columns (in its quantization_config too).
inline Spec with_group_size(Spec s, int group_size) {
  s.group_size = group_size;
  nlohmann::json& q = s.quantization_config;
  if (q.contains("config_groups"))
    q["config_groups"]["group_0"]["weights"]["group_size"] = group_size;
  else
    q["group_size"] = group_size;
  return s;
}

struct Packed {
  std::filesystem::path dir, twin;  // the packed checkpoint; its F32 twin (no quantization_config)
  std::map<std::string, std::vector<float>> dequantized;  // by tensor name
};

// Writes the reference model in folder src as out_root/NAME (packed: `spec`'s INT format, or FP8
// per channel without one) and out_root/NAME_f32 (its twin); `drop` names a tensor left out of the
// packed one.
inline Packed write_packed(const std::filesystem::path& src, const std::filesystem::path& out_root,
                           const std::optional<Spec>& spec, const std::string& drop = "") {
  Packed m;
  const std::string name = src.filename().string();
  m.dir = out_root / name;
  m.twin = out_root / (name + "_f32");
  std::filesystem::create_directories(m.dir);
  std::filesystem::create_directories(m.twin);
  const nlohmann::json config = nlohmann::json::parse(read_file(src / "config.json"));
  write_file(m.twin / "config.json", config.dump());
  nlohmann::json packed_config = config;
  packed_config["quantization_config"] =
      spec ? spec->quantization_config : nlohmann::json{{"quant_method", "fbgemm_fp8"}};
  write_file(m.dir / "config.json", packed_config.dump());
  const io::WeightStore store = io::WeightStore::open(src);
  SafetensorsBuilder packed, twin;
  std::mt19937 rng(11);
  for (const std::string& t : store.names()) {
    const io::TensorView& v = store.get(t);
    std::vector<float> w = quant::read_f32(v);
    if (packed_by_export(t) && !spec) {
      const int64_t n = v.shape[0], k = v.shape[1];
      std::string bytes;
      std::vector<float> scales;
      w = quantize_fp8(w, n, k, 1, k, bytes, scales);
      m.dequantized[t] = w;
      add_raw(packed, t, "F8_E4M3", v.shape, bytes);
      packed.add_f32_values(quant::sibling_name(t, "weight_scale"), {n, 1}, scales);
    } else if (packed_by_export(t)) {
      const IntWeight iw = make_weight(*spec, v.shape[0], v.shape[1], rng);
      w = iw.dequantized();
      m.dequantized[t] = w;
      write_int_weight(packed, spec->format, t.substr(0, t.size() - 7), iw);  // no ".weight"
    } else {
      packed.add_f32_values(t, v.shape, w);
    }
    twin.add_f32_values(t, v.shape, w);
  }
  packed.header.erase(drop);  // its bytes stay, unreferenced (safetensors allows gaps)
  write_file(m.dir / "model.safetensors", packed.bytes());
  write_file(m.twin / "model.safetensors", twin.bytes());
  return m;
}

}  // namespace pagellm::testing
