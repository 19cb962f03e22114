// EngineArgs' step budget: 0 resolves to the default of the device and entry point (vLLM's
// offline defaults on a GPU, 2,048 for `serve` and on the CPU), a budget given is kept, and
// validation names the flag.
#include <gtest/gtest.h>

#include "common/error.h"
#include "model_files_util.h"
#include "pagellm/engine_args.h"

namespace pagellm {
namespace {

TEST(EngineArgs, StepBudgetDefaultsToTheDevicesOnTheCpu) {
  EngineArgs offline;
  offline.device = "cpu";
  EXPECT_EQ(offline.max_num_batched_tokens, 0);
  offline.validate();  // 0 is valid: "the default"
  offline.resolve_device();
  EXPECT_EQ(offline.max_num_batched_tokens, EngineArgs::kDefaultBatchedTokens);

  EngineArgs serving;
  serving.device = "cpu";
  serving.api_server = true;
  serving.resolve_device();
  EXPECT_EQ(serving.max_num_batched_tokens, EngineArgs::kDefaultBatchedTokens);

  EngineArgs given;
  given.device = "cpu";
  given.max_num_batched_tokens = 123;
  given.resolve_device();
  given.resolve_device();  // harmless twice
  EXPECT_EQ(given.max_num_batched_tokens, 123);
}

TEST(EngineArgs, NegativeStepBudgetIsRefusedWithTheFlagName) {
  EngineArgs args;
  args.max_num_batched_tokens = -1;
  const std::string message = testing::error_message_of([&] { args.validate(); });
  EXPECT_NE(message.find("--max-num-batched-tokens"), std::string::npos) << message;
}

}  // namespace
}  // namespace pagellm
