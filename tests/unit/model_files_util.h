// Test helpers that write Hugging Face model folders byte by byte: safetensors files from a header
// and a data section, and a complete tiny Llama folder that load_model accepts (the starting point
// the broken-model tests damage one way at a time).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/error.h"

namespace pagellm::testing {

// A fresh directory under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pagellm-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The message of the pagellm::Error that fn throws ("" when it throws none).
template <class Fn>
std::string error_message_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// 8-byte little-endian header length, the header text, the data section.
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Accumulates tensors into a header and data section, like safetensors' serializer.
struct SafetensorsBuilder {
  nlohmann::json header = nlohmann::json::object();
  std::string data;

  void add_f32(const std::string& name, const std::vector<int64_t>& shape,
               float fill_base = 0.01f) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    const size_t begin = data.size();
    for (int64_t i = 0; i < count; ++i) {
      const float v = fill_base * static_cast<float>((i * 7919) % 23 - 11);
      data.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  void add_f32_values(const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& values) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  void add_f16(const std::string& name, const std::vector<int64_t>& shape,
               const std::vector<float>& values) {
    const size_t begin = data.size();
    for (float v : values) {
      const uint16_t h = f32_to_f16(v);
      data.append(reinterpret_cast<const char*>(&h), sizeof h);
    }
    header[name] = {{"dtype", "F16"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  void add_bf16(const std::string& name, const std::vector<int64_t>& shape,
                const std::vector<float>& values) {
    const size_t begin = data.size();
    for (float v : values) {
      const uint16_t h = f32_to_bf16(v);
      data.append(reinterpret_cast<const char*>(&h), sizeof h);
    }
    header[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string bytes() const { return safetensors_bytes(header.dump(), data); }
};

// config.json of a tiny Llama that the tiny folder below matches.
inline nlohmann::json tiny_llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"max_position_embeddings", 128},
          {"rms_norm_eps", 1e-5},
          {"tie_word_embeddings", false},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

// Adds every tensor of tiny_llama_config() (optionally skipping one name).
inline void add_tiny_llama_tensors(SafetensorsBuilder& b, const std::string& skip = "") {
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    if (name != skip) b.add_f32(name, shape);
  };
  add("model.embed_tokens.weight", {32, 16});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {16});
    add(p + "self_attn.q_proj.weight", {16, 16});
    add(p + "self_attn.k_proj.weight", {8, 16});
    add(p + "self_attn.v_proj.weight", {8, 16});
    add(p + "self_attn.o_proj.weight", {16, 16});
    add(p + "post_attention_layernorm.weight", {16});
    add(p + "mlp.gate_proj.weight", {24, 16});
    add(p + "mlp.up_proj.weight", {24, 16});
    add(p + "mlp.down_proj.weight", {16, 24});
  }
  add("model.norm.weight", {16});
  add("lm_head.weight", {32, 16});
}

// Writes a complete, loadable tiny Llama folder.
inline void write_tiny_llama(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  write_file(dir / "config.json", tiny_llama_config().dump(2));
  write_file(dir / "generation_config.json", R"({"eos_token_id": [2, 1], "temperature": 0.7})");
  SafetensorsBuilder b;
  add_tiny_llama_tensors(b);
  write_file(dir / "model.safetensors", b.bytes());
}

}  // namespace pagellm::testing
