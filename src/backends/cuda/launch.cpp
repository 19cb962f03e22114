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

// The process-wide mode: PAGELLM_PDL=1 / set_programmatic_launch(true) on, PAGELLM_PDL=0 /
// set_programmatic_launch(false) off, else per step (ProgrammaticLaunchScope).
enum Mode : int { kUndecided = -1, kOff = 0, kOn = 1, kPerStep = 2 };

std::atomic<int>& pdl_mode() {
  static std::atomic<int> mode{kUndecided};
  return mode;
}

bool pdl_supported() {
  static const bool supported = device_supports_pdl();
  return supported;
}

thread_local bool t_step_wants_pdl = false;  // the innermost ProgrammaticLaunchScope's wish

}  // namespace

bool programmatic_launch() {
  int mode = pdl_mode().load(std::memory_order_relaxed);
  if (mode == kUndecided) {
    const char* env = std::getenv("PAGELLM_PDL");
    mode = !env                         ? kPerStep
           : std::strcmp(env, "1") == 0 ? kOn
           : std::strcmp(env, "0") == 0 ? kOff
                                        : kPerStep;
    pdl_mode().store(mode, std::memory_order_relaxed);
  }
  if (mode == kOff || (mode == kPerStep && !t_step_wants_pdl)) return false;
  return pdl_supported();
}

void set_programmatic_launch(bool on) {
  pdl_mode().store(on ? kOn : kOff, std::memory_order_relaxed);
}

ProgrammaticLaunchScope::ProgrammaticLaunchScope(bool wanted) : outer_(t_step_wants_pdl) {
  t_step_wants_pdl = wanted;
}

ProgrammaticLaunchScope::~ProgrammaticLaunchScope() { t_step_wants_pdl = outer_; }

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

// Whether the current device runs sm_90a code (compute capability 9.0 exactly), asked once per
// device: tensor and pipeline parallelism drive several devices from one process.
bool device_is_sm90() {
  static std::atomic<uint64_t> known{0}, yes{0};  // bit d: device d asked / is 9.0 (devices 0-63)
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit && (known.load(std::memory_order_acquire) & bit))
    return (yes.load(std::memory_order_relaxed) & bit) != 0;
  const bool is90 =
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
      major == 9 && minor == 0;
  if (bit) {
    if (is90) yes.fetch_or(bit, std::memory_order_relaxed);
    known.fetch_or(bit, std::memory_order_release);
  }
  return is90;
}

}  // namespace pagellm::cuda
