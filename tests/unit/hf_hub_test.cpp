// Hugging Face Hub ids without a network (issue 19): id / revision / file-name validation, the
// environment's cache and endpoint, and resolution from a cache laid out as huggingface_hub's.
// Downloads are tested end to end against a fake Hub (tests/e2e/hf_hub_test.sh).
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "common/error.h"
#include "io/hf_hub.h"
#include "model_files_util.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;
using namespace io::hub;

bool throws(const std::function<void()>& fn) {
  const std::string message = testing::error_message_of(fn);
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  return !message.empty();
}

TEST(HfHub, ValidatesIdsRevisionsAndFileNames) {
  EXPECT_TRUE(is_repo_id("Qwen/Qwen3-8B"));
  EXPECT_FALSE(is_repo_id("/models/llama"));
  EXPECT_FALSE(is_repo_id("llama"));
  EXPECT_FALSE(is_repo_id("a/b/c"));
  EXPECT_FALSE(is_repo_id("./x"));
  EXPECT_FALSE(throws([] { check_repo_id("meta-llama/Llama-3.1-8B-Instruct"); }));
  for (const char* bad : {"a/..", "../b", "a b/c", "a/b?c", "a--b/c", "a/", "/b", "a/b/c"})
    EXPECT_TRUE(throws([&] { check_repo_id(bad); })) << bad;
  EXPECT_FALSE(throws([] { check_revision("main"); }));
  EXPECT_FALSE(throws([] { check_revision("refs/pr/1"); }));
  EXPECT_FALSE(throws([] { check_revision("0123456789abcdef0123456789abcdef01234567"); }));
  for (const char* bad : {"", "../x", "/main", "a//b", "v1/..", "a b"})
    EXPECT_TRUE(throws([&] { check_revision(bad); })) << bad;
  EXPECT_FALSE(throws([] { check_repo_file("model-00001-of-00004.safetensors"); }));
  EXPECT_FALSE(throws([] { check_repo_file("original/params.json"); }));
  for (const char* bad : {"../x.json", "/etc/passwd", "a/../../b", "a\\b", "a/b/c/d/e"})
    EXPECT_TRUE(throws([&] { check_repo_file(bad); })) << bad;
  EXPECT_TRUE(wanted_file("model-00002-of-00004.safetensors"));
  EXPECT_TRUE(wanted_file("tokenizer.json"));
  EXPECT_FALSE(wanted_file("pytorch_model.bin"));
  EXPECT_FALSE(wanted_file("original/consolidated.safetensors"));
  EXPECT_FALSE(wanted_file("README.md"));
}

TEST(HfHub, OptionsFollowHuggingFaceHubsEnvironment) {
  testing::TempDir dir;
  ::setenv("HF_HOME", dir.path().c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  ::unsetenv("HF_TOKEN");
  ::unsetenv("HUGGING_FACE_HUB_TOKEN");
  ::setenv("HF_ENDPOINT", "https://mirror.example/", 1);
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  testing::write_file(dir.path() / "token", "hf_saved\n");
  HubOptions o = options_from_env("", "");
  EXPECT_EQ(o.cache_dir, dir.path() / "hub");
  EXPECT_EQ(o.endpoint, "https://mirror.example");
  EXPECT_EQ(o.token, "hf_saved");
  EXPECT_EQ(o.revision, "main");
  EXPECT_TRUE(o.offline);
  ::setenv("HF_TOKEN", "hf_env", 1);
  ::setenv("HF_HUB_CACHE", "/somewhere", 1);
  o = options_from_env("v2", "/downloads");
  EXPECT_EQ(o.token, "hf_env");
  EXPECT_EQ(o.cache_dir, fs::path("/downloads"));  // --download-dir wins
  EXPECT_EQ(o.revision, "v2");
  EXPECT_EQ(options_from_env("", "").cache_dir, fs::path("/somewhere"));
  for (const char* v : {"HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"})
    ::unsetenv(v);
}

TEST(HfHub, ResolvesCompleteSnapshotsFromTheCache) {
  testing::TempDir dir;
  HubOptions o;
  o.cache_dir = dir.path();
  o.offline = true;
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path repo = repo_dir(o, "org/model");
  EXPECT_EQ(repo, dir.path() / "models--org--model");
  const fs::path snap = repo / "snapshots" / commit;
  fs::create_directories(snap);
  fs::create_directories(repo / "refs");
  testing::write_file(repo / "refs" / "main", commit + "\n");
  EXPECT_FALSE(cached_snapshot(o, "org/model"));  // no config.json yet
  testing::write_file(snap / "config.json", "{}");
  testing::write_file(snap / "model.safetensors.index.json",
                      R"({"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}})");
  testing::write_file(snap / "model-1.safetensors", "x");
  EXPECT_FALSE(cached_snapshot(o, "org/model"));  // a shard is missing
  testing::write_file(snap / "model-2.safetensors", "x");
  EXPECT_EQ(cached_snapshot(o, "org/model"), snap);
  EXPECT_EQ(resolve_model("org/model", o), snap);
  o.revision = commit;  // a commit needs no ref
  EXPECT_EQ(cached_snapshot(o, "org/model"), snap);
  o.revision = "v1";  // no refs/v1: offline, an error naming the id
  EXPECT_TRUE(throws([&] { resolve_model("org/model", o); }));
}

}  // namespace
}  // namespace pagellm
