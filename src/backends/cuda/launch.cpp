// The programmatic-dependent-launch switch shared by every launcher (common.cuh: launch_kernel),
// and the SM count that sizes persistent grids.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {
namespace {

bool device_supports_pdl() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  return major >= 9;
}

std::atomic<int>& pdl_state() {  // -1: not decided yet, 0: off, 1: on
  static std::atomic<int> state{-1};
  return state;
}

}  // namespace

bool programmatic_launch() {
  int s = pdl_state().load(std::memory_order_relaxed);
  if (s < 0) {
    const char* env = std::getenv("PAGELLM_PDL");
    const bool on = env && std::strcmp(env, "1") == 0;
    s = on && device_supports_pdl() ? 1 : 0;
    pdl_state().store(s, std::memory_order_relaxed);
  }
  return s == 1;
}

void set_programmatic_launch(bool on) {
  pdl_state().store(on && device_supports_pdl() ? 1 : 0, std::memory_order_relaxed);
}

int sm_count() {
  static std::atomic<int> count[64] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  std::atomic<int>& slot = count[device & 63];
  int c = slot.load(std::memory_order_relaxed);
  if (c > 0) return c;
  if (cudaDeviceGetAttribute(&c, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || c <= 0)
    return 132;
  slot.store(c, std::memory_order_relaxed);
  return c;
}

}  // namespace pagellm::cuda
