// --device handling of the model loader, in every build: without a CUDA backend or without a GPU,
// `--device cuda` is a clean kUnsupported error; with both, the demo model loads on the GPU.
#include <gtest/gtest.h>

#include "common/error.h"
#include "pagellm/engine_args.h"
#include "runner/model_loader.h"

namespace pagellm {
namespace {

TEST(DeviceSelection, UnknownDeviceIsInvalidArgument) {
  EngineArgs args;
  args.device = "tpu";
  try {
    runner::load_model(args);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--device tpu"), std::string::npos) << e.what();
  }
}

TEST(DeviceSelection, CudaIsUnsupportedOrLoadsTheDemoModel) {
  EngineArgs args;
  args.device = "cuda";
  args.max_num_seqs = 4;
  args.max_num_batched_tokens = 64;
  args.max_model_len = 128;
  args.gpu_memory_utilization = 0.05;
  try {
    runner::LoadedModel m = runner::load_model(args);
    // A CUDA build on a machine with a GPU.
    EXPECT_EQ(m.runner->config().vocab_size, 258);
    EXPECT_GT(m.runner->num_kv_blocks(), 0);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pagellm
