// INT4 / INT8 checkpoints in tests: linear weights from known integers, zeros and scales, packed
// as each format stores them (AWQ, GPTQ v1 / v2 / act-order, compressed-tensors pack-quantized and
// int-quantized, AutoRound's GPTQ-style export), with their quantization_config (the INT checkpoint
// and INT mixture-of-experts tests).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "fp8_checkpoint_util.h"
#include "model_files_util.h"

namespace pagellm::testing {

using nlohmann::json;

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
  float scale = 0.01f;  // make_weight's scales: 0.5-1.5 times this, either sign
};

inline Spec spec_of(Format f) {
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

inline IntWeight make_weight(const Spec& sp, int64_t out, int64_t in, std::mt19937& rng) {
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
    const float s = (0.5f + float(rng() % 1000) / 1000.0f) * sp.scale * (rng() % 2 ? 1 : -1);
    w.s.push_back(ct ? bf16_to_f32(f32_to_bf16(s)) : f16_to_f32(f32_to_f16(s)));
  }
  for (int64_t c = 0; c < in; ++c) w.group.push_back(int32_t(c / gs));
  if (sp.format == Format::kGptqActOrder) std::shuffle(w.group.begin(), w.group.end(), rng);
  return w;
}

inline void add_raw(SafetensorsBuilder& b, const std::string& name, const char* dtype,
                    const std::vector<int64_t>& shape, const void* bytes, size_t n) {
  const size_t begin = b.data.size();
  b.data.append(static_cast<const char*>(bytes), n);
  b.header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, b.data.size()}}};
}

inline void add_i32(SafetensorsBuilder& b, const std::string& name,
                    const std::vector<int64_t>& shape, const std::vector<uint32_t>& v) {
  add_raw(b, name, "I32", shape, v.data(), v.size() * 4);
}

// Packs value v (already unsigned, < 2^bits) into slot `slot` of word `word`.
inline void put(std::vector<uint32_t>& words, int64_t word, int slot, int bits, int32_t v) {
  words[size_t(word)] |= (uint32_t(v) & ((1u << bits) - 1)) << (slot * bits);
}

// Scales [groups, out] (AWQ / GPTQ) in F16.
inline void add_scales_by_group(SafetensorsBuilder& b, const std::string& name,
                                const IntWeight& w) {
  std::vector<float> s;
  for (int64_t g = 0; g < w.groups; ++g)
    for (int64_t r = 0; r < w.out; ++r) s.push_back(w.s[size_t(r * w.groups + g)]);
  b.add_f16(name, {w.groups, w.out}, s);
}

inline void write_awq(SafetensorsBuilder& b, const std::string& m, const IntWeight& w) {
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

inline void write_gptq(SafetensorsBuilder& b, const std::string& m, const IntWeight& w, int bits,
                       bool v1, bool g_idx) {
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

inline void write_ct(SafetensorsBuilder& b, const std::string& m, const IntWeight& w, int bits,
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

inline void write_w8a8(SafetensorsBuilder& b, const std::string& m, const IntWeight& w) {
  std::vector<int8_t> q(w.q.begin(), w.q.end());
  add_raw(b, m + ".weight", "I8", {w.out, w.in}, q.data(), q.size());
  b.add_f32_values(m + ".weight_scale", {w.out, 1}, w.s);
}

// Writes w as module m ("model.layers.0.self_attn.q_proj", no ".weight") in format f.
inline void write_int_weight(SafetensorsBuilder& b, Format f, const std::string& m,
                             const IntWeight& w) {
  switch (f) {
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

}  // namespace pagellm::testing
