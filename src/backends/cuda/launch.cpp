// The programmatic-dependent-launch switch shared by every launcher (common.cuh: launch_kernel).
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

}  // namespace pagellm::cuda
