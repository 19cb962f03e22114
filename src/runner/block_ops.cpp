#include "runner/block_ops.h"

#include "common/error.h"

namespace pagellm::runner {

void check_block_ops(const engine::SchedulerOutput& batch, int64_t num_blocks,
                     int64_t num_swap_blocks, const std::string& runner) {
  auto device_ok = [&](int32_t b) { return b >= 0 && b < num_blocks; };
  auto host_ok = [&](int32_t b) { return b >= 0 && b < num_swap_blocks; };
  auto fail = [&](const std::string& message) {
    throw_error(ErrorKind::kInternal, runner + ": " + message);
  };
  const std::string swap_blocks = "; " + std::to_string(num_swap_blocks) + " swap blocks)";
  for (const auto& [dev, host] : batch.blocks_to_swap_out)
    if (!device_ok(dev) || !host_ok(host))
      fail("swap-out of an invalid block pair (device " + std::to_string(dev) + ", host " +
           std::to_string(host) + swap_blocks);
  for (const auto& [host, dev] : batch.blocks_to_swap_in)
    if (!device_ok(dev) || !host_ok(host))
      fail("swap-in of an invalid block pair (host " + std::to_string(host) + ", device " +
           std::to_string(dev) + swap_blocks);
  for (const auto& [src, dst] : batch.blocks_to_copy)
    if (!device_ok(src) || !device_ok(dst)) fail("copy of an invalid KV block");
}

}  // namespace pagellm::runner
