#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/hf_config.h"

namespace pagellm::io {
namespace {

using nlohmann::json;

json base() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 1000},
          {"hidden_size", 256},
          {"intermediate_size", 512},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 8},
          {"max_position_embeddings", 4096}};
}

ModelConfig parse(const json& j) { return parse_model_config(j.dump(), "m/config.json"); }

// Expects an Error of `kind` whose message names the file and contains `needle`.
void expect_error(const json& j, ErrorKind kind, const std::string& needle) {
  try {
    parse(j);
    ADD_FAILURE() << "accepted: " << j.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("m/config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(HfConfig, LlamaDefaults) {
  const ModelConfig c = parse(base());
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.num_key_value_heads, 8);  // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 32);            // hidden / heads
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
}

TEST(HfConfig, Llama3RopeScalingOldAndNewStyle) {
  json j = base();
  j["num_key_value_heads"] = 2;
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["eos_token_id"] = {128001, 128009};
  j["torch_dtype"] = "bfloat16";
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128009}));
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  // transformers 5: rope_parameters carries the theta as well.
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"rope_theta", 250000.0},
                          {"original_max_position_embeddings", 2048}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(c.rope_theta, 250000.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 2048);
}

TEST(HfConfig, LinearScalingAndUnsupportedTypes) {
  json j = base();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse(j).rope_scaling.type, RopeScaling::Type::kLinear);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_error(j, ErrorKind::kUnsupported, "dynamic");
  j["rope_scaling"] = {{"type", "linear"}, {"factor", -1.0}};
  expect_error(j, ErrorKind::kInvalidArgument, "factor");
}

TEST(HfConfig, QwenFamilies) {
  json j = base();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["sliding_window"] = 4096;
  j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = true;
  ModelConfig c = parse(j);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_TRUE(c.tie_word_embeddings);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["head_dim"] = 128;  // Qwen3 sets head_dim independently of hidden / heads
  c = parse(j);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window false: no window
  j["use_sliding_window"] = true;
  j["sliding_window"] = 1024;
  EXPECT_EQ(parse(j).sliding_window, 0);  // every layer is below max_window_layers (28)
  j["max_window_layers"] = 1;
  c = parse(j);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.layer_window(0), 0);
  EXPECT_EQ(c.layer_window(c.num_hidden_layers - 1), 1024);
}

TEST(HfConfig, MistralSlidingWindow) {
  json j = base();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse(j).model_type, "mistral");
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["sliding_window"] = 4096;  // == max_position_embeddings: never cuts the context
  EXPECT_EQ(parse(j).sliding_window, 0);
  j["sliding_window"] = 1024;  // the engine serves up to the window
  EXPECT_EQ(parse(j).sliding_window, 1024);
  j["sliding_window"] = 0;
  expect_error(j, ErrorKind::kInvalidArgument, "sliding_window");
}

TEST(HfConfig, ArchitectureFromModelTypeAndUnknown) {
  json j = base();
  j.erase("architectures");
  j["model_type"] = "qwen3";
  EXPECT_EQ(parse(j).architecture, "Qwen3ForCausalLM");
  j["architectures"] = {"GemmaForCausalLM"};
  expect_error(j, ErrorKind::kUnsupported, "GemmaForCausalLM");
}

TEST(HfConfig, RangeAndTypeErrors) {
  auto with = [](const char* key, json v) {
    json j = base();
    j[key] = v;
    return j;
  };
  expect_error(with("hidden_size", 0), ErrorKind::kInvalidArgument, "hidden_size");
  expect_error(with("vocab_size", "big"), ErrorKind::kInvalidArgument, "vocab_size");
  expect_error(with("num_key_value_heads", 3), ErrorKind::kInvalidArgument, "num_key_value_heads");
  expect_error(with("num_key_value_heads", 16), ErrorKind::kInvalidArgument, "num_key_value_heads");
  expect_error(with("head_dim", 7), ErrorKind::kInvalidArgument, "head_dim");
  expect_error(with("rms_norm_eps", -1.0), ErrorKind::kInvalidArgument, "rms_norm_eps");
  expect_error(with("num_hidden_layers", int64_t{1} << 40), ErrorKind::kInvalidArgument,
               "num_hidden_layers");
  expect_error(with("hidden_act", "gelu"), ErrorKind::kUnsupported, "hidden_act");
  expect_error(with("torch_dtype", "int8"), ErrorKind::kUnsupported, "int8");
  expect_error(with("eos_token_id", json::array({1, "x"})), ErrorKind::kInvalidArgument,
               "eos_token_id");
  expect_error(with("hidden_size", 250), ErrorKind::kInvalidArgument, "num_attention_heads");
  expect_error(json::array({1, 2}), ErrorKind::kInvalidArgument, "object");
  try {
    parse_model_config("{\"a\":\n", "m/config.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos);
  }
}

TEST(HfConfig, GenerationConfig) {
  GenerationConfig g =
      parse_generation_config(R"({"eos_token_id": 7, "temperature": 0.6, "top_p": 0.9,
      "top_k": 20, "max_new_tokens": 64, "bos_token_id": 1})",
                              "g.json");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{7}));
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.max_new_tokens, 64);
  EXPECT_EQ(g.bos_token_id, 1);
  EXPECT_FALSE(g.min_p);
  g = parse_generation_config(R"({"eos_token_id": [2, 1]})", "g.json");
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{2, 1}));
  EXPECT_THROW(parse_generation_config(R"({"top_p": 1.5})", "g.json"), Error);
  EXPECT_THROW(parse_generation_config(R"({"eos_token_id": -1})", "g.json"), Error);
  EXPECT_THROW(parse_generation_config("[]", "g.json"), Error);
}

TEST(HfConfig, LoadsStories260KFolder) {
  const auto dir = std::filesystem::path(PAGELLM_SHARED_DIR) / "models/stories260K";
  if (!std::filesystem::exists(dir / "config.json")) GTEST_SKIP();
  const ModelConfig c = load_model_config(dir);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(load_generation_config(dir).eos_token_ids, (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(load_generation_config("/nonexistent-dir").eos_token_ids.empty());
}

}  // namespace
}  // namespace pagellm::io
