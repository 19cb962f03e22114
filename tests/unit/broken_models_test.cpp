// Every malformed model folder must give one pagellm::Error whose single-line message names the
// offending file — never a crash, hang or huge allocation. Each case starts from a valid tiny Llama
// folder and damages it one way.
#include <functional>

#include <gtest/gtest.h>

#include "common/error.h"
#include "model_files_util.h"
#include "pagellm/llm.h"
#include "runner/model_loader.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::SafetensorsBuilder;
using testing::write_file;

struct BrokenCase {
  std::string name;
  std::function<void(const fs::path&)> damage;
  std::string file;  // the file the message must name
  ErrorKind kind = ErrorKind::kInvalidArgument;
};

void rewrite_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json c = testing::tiny_llama_config();
  edit(c);
  write_file(dir / "config.json", c.dump());
}

void rewrite_weights(const fs::path& dir, const std::function<void(SafetensorsBuilder&)>& edit) {
  SafetensorsBuilder b;
  testing::add_tiny_llama_tensors(b);
  edit(b);
  write_file(dir / "model.safetensors", b.bytes());
}

void write_sharded(const fs::path& dir, const std::string& second_shard_name) {
  fs::remove(dir / "model.safetensors");
  SafetensorsBuilder a, b;
  testing::add_tiny_llama_tensors(a, "lm_head.weight");
  b.add_f32("lm_head.weight", {32, 16});
  write_file(dir / "model-00001-of-00002.safetensors", a.bytes());
  json map;
  for (const auto& [name, entry] : a.header.items()) map[name] = "model-00001-of-00002.safetensors";
  map["lm_head.weight"] = second_shard_name;
  write_file(dir / "model.safetensors.index.json",
             json{{"metadata", json::object()}, {"weight_map", map}}.dump());
  write_file(dir / "model-00002-of-00002.safetensors", b.bytes());
}

std::vector<BrokenCase> broken_cases() {
  const auto kInvalid = ErrorKind::kInvalidArgument;
  const auto kNotFound = ErrorKind::kNotFound;
  const auto kUnsupported = ErrorKind::kUnsupported;
  return {
      {"missing_config", [](const fs::path& d) { fs::remove(d / "config.json"); }, "config.json",
       kNotFound},
      {"invalid_config_json",
       [](const fs::path& d) { write_file(d / "config.json", "{\"vocab_size\": 32,"); },
       "config.json", kInvalid},
      {"unsupported_architecture",
       [](const fs::path& d) {
         rewrite_config(d, [](json& c) { c["architectures"] = {"GPT2LMHeadModel"}; });
       },
       "config.json", kUnsupported},
      {"heads_not_divisible",
       [](const fs::path& d) { rewrite_config(d, [](json& c) { c["num_key_value_heads"] = 3; }); },
       "config.json", kInvalid},
      {"negative_size",
       [](const fs::path& d) { rewrite_config(d, [](json& c) { c["hidden_size"] = -16; }); },
       "config.json", kInvalid},
      {"sliding_window",
       [](const fs::path& d) {
         rewrite_config(d, [](json& c) {
           c["architectures"] = {"MistralForCausalLM"};
           c["sliding_window"] = -64;
         });
       },
       "config.json", kInvalid},
      {"unsupported_rope",
       [](const fs::path& d) {
         rewrite_config(d, [](json& c) {
           c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
         });
       },
       "config.json", kUnsupported},
      {"invalid_generation_config",
       [](const fs::path& d) { write_file(d / "generation_config.json", "[1, 2"); },
       "generation_config.json", kInvalid},
      {"missing_safetensors", [](const fs::path& d) { fs::remove(d / "model.safetensors"); },
       "model.safetensors", kNotFound},
      {"file_shorter_than_header",
       [](const fs::path& d) { write_file(d / "model.safetensors", "abc"); }, "model.safetensors",
       kInvalid},
      {"truncated_safetensors",
       [](const fs::path& d) {
         std::string bytes = testing::read_file(d / "model.safetensors");
         bytes.resize(bytes.size() - 100);
         write_file(d / "model.safetensors", bytes);
       },
       "model.safetensors", kInvalid},
      {"header_length_beyond_file",
       [](const fs::path& d) {
         std::string bytes = testing::read_file(d / "model.safetensors");
         for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(0x7f);
         write_file(d / "model.safetensors", bytes);
       },
       "model.safetensors", kInvalid},
      {"invalid_header_json",
       [](const fs::path& d) {
         write_file(d / "model.safetensors", testing::safetensors_bytes("{\"a\": [1,", ""));
       },
       "model.safetensors", kInvalid},
      {"offsets_out_of_range",
       [](const fs::path& d) {
         rewrite_weights(d, [](SafetensorsBuilder& b) {
           b.header["model.norm.weight"]["data_offsets"] = {1u << 30, (1u << 30) + 64};
         });
       },
       "model.safetensors", kInvalid},
      {"overlapping_offsets",
       [](const fs::path& d) {
         rewrite_weights(d, [](SafetensorsBuilder& b) {
           b.header["model.norm.weight"]["data_offsets"] = {32, 96};
         });
       },
       "model.safetensors", kInvalid},
      {"byte_length_disagrees_with_shape",
       [](const fs::path& d) {
         rewrite_weights(
             d, [](SafetensorsBuilder& b) { b.header["model.norm.weight"]["shape"] = {17}; });
       },
       "model.safetensors", kInvalid},
      {"unsupported_dtype",
       [](const fs::path& d) {
         rewrite_weights(
             d, [](SafetensorsBuilder& b) { b.header["model.norm.weight"]["dtype"] = "F64"; });
       },
       "model.safetensors", kUnsupported},
      {"integer_dtype",  // 16 floats read as 16 int32s: a float tensor may not be an integer one
       [](const fs::path& d) {
         rewrite_weights(
             d, [](SafetensorsBuilder& b) { b.header["model.norm.weight"]["dtype"] = "I32"; });
       },
       "model.safetensors", kInvalid},
      {"missing_tensor",
       [](const fs::path& d) {
         SafetensorsBuilder b;
         testing::add_tiny_llama_tensors(b, "model.layers.1.mlp.up_proj.weight");
         write_file(d / "model.safetensors", b.bytes());
       },
       "model.safetensors", kNotFound},
      {"unexpected_tensor",
       [](const fs::path& d) {
         rewrite_weights(d, [](SafetensorsBuilder& b) { b.add_f32("model.layers.2.extra", {4}); });
       },
       "model.safetensors", kInvalid},
      {"shape_mismatch_vs_config",
       [](const fs::path& d) {
         // Same byte count, wrong shape: only the config comparison can catch it.
         rewrite_weights(d, [](SafetensorsBuilder& b) {
           b.header["model.layers.0.self_attn.q_proj.weight"]["shape"] = {8, 32};
         });
       },
       "model.safetensors", kInvalid},
      {"shard_missing",
       [](const fs::path& d) { write_sharded(d, "model-00003-of-00002.safetensors"); },
       "model-00003-of-00002.safetensors", kNotFound},
      {"shard_path_escape", [](const fs::path& d) { write_sharded(d, "../evil.safetensors"); },
       "model.safetensors.index.json", kInvalid},
      {"invalid_index_json",
       [](const fs::path& d) {
         write_sharded(d, "model-00002-of-00002.safetensors");
         write_file(d / "model.safetensors.index.json", "{\"weight_map\": ");
       },
       "model.safetensors.index.json", kInvalid},
  };
}

class BrokenModel : public ::testing::TestWithParam<BrokenCase> {};

TEST_P(BrokenModel, GivesOneLineErrorNamingTheFile) {
  const BrokenCase& c = GetParam();
  testing::TempDir tmp;
  const fs::path dir = tmp.path() / "model";
  testing::write_tiny_llama(dir);
  c.damage(dir);
  EngineArgs args;
  args.model = dir.string();
  args.num_kv_blocks = 4;
  try {
    runner::load_model(args);
    FAIL() << c.name << ": load_model accepted a broken folder";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(c.file), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name << ": " << msg;
    EXPECT_EQ(e.kind(), c.kind) << c.name << ": " << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(Folders, BrokenModel, ::testing::ValuesIn(broken_cases()),
                         [](const ::testing::TestParamInfo<BrokenCase>& info) {
                           return info.param.name;
                         });

// The valid starting point loads (so every failure above is caused by its damage), sharded too.
TEST(BrokenModel, UndamagedFoldersLoad) {
  testing::TempDir tmp;
  EngineArgs args;
  args.num_kv_blocks = 4;
  args.model = (tmp.path() / "single").string();
  testing::write_tiny_llama(args.model);
  auto single = runner::load_model(args);
  EXPECT_EQ(single.config.hidden_size, 16);
  EXPECT_EQ(single.generation_config.eos_token_ids, (std::vector<int64_t>{2, 1}));
  args.model = (tmp.path() / "sharded").string();
  testing::write_tiny_llama(args.model);
  write_sharded(args.model, "model-00002-of-00002.safetensors");
  auto sharded = runner::load_model(args);
  EXPECT_EQ(sharded.runner->num_kv_blocks(), 4);
}

// A sliding window shorter than max_position_embeddings caps the context at the window, where
// attending every token is the model's attention; a longer --max-model-len is refused.
// Greedy tokens of one request on `args`' model.
std::vector<int32_t> greedy_tokens(const EngineArgs& args, int max_tokens) {
  LLMEngine engine(args);
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  engine.add_request("a", PromptInput::from_ids({1, 5, 7}), p);
  std::vector<int32_t> out;
  while (engine.has_unfinished_requests())
    for (RequestOutput& o : engine.step())
      if (o.finished) out = o.outputs.at(0).token_ids;
  return out;
}

// The CPU backend attends within the window, so it serves the model's whole context; up to the
// window the tokens are those of the same model without one.
TEST(SlidingWindow, CpuAttendsWithinTheWindowPastIt) {
  testing::TempDir tmp;
  EngineArgs args;
  args.num_kv_blocks = 16;
  args.model = std::string(PAGELLM_SHARED_DIR) + "/models/stories260K";
  const std::vector<int32_t> full = greedy_tokens(args, 60);
  // stories260K (it has a tokenizer) with a window in its config.
  args.model = (tmp.path() / "windowed").string();
  fs::copy(std::string(PAGELLM_SHARED_DIR) + "/models/stories260K", args.model,
           fs::copy_options::recursive);
  json config = json::parse(testing::read_file(fs::path(args.model) / "config.json"));
  config["sliding_window"] = 24;  // max_position_embeddings is 512
  write_file(fs::path(args.model) / "config.json", config.dump());
  {
    LLMEngine engine(args);
    EXPECT_EQ(engine.model_info().max_model_len, 512);
  }
  const std::vector<int32_t> windowed = greedy_tokens(args, 60);
  ASSERT_EQ(windowed.size(), 60u);
  ASSERT_EQ(full.size(), 60u);
  // 3 prompt tokens + 21 generated = the window: the same attention up to there.
  EXPECT_TRUE(std::equal(full.begin(), full.begin() + 21, windowed.begin()));
}

}  // namespace
}  // namespace pagellm
