#include "runner/device_ceilings.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"

namespace pagellm::runner {
namespace {

using Clock = std::chrono::steady_clock;

// Best of `reps` timings of fn, in seconds.
template <typename Fn>
double best_seconds(int reps, Fn&& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

DeviceCeilings measure_cpu_ceilings() {
  DeviceCeilings c;
  const size_t bytes = size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 0);
  const double copy_s = best_seconds(3, [&] { std::memcpy(b.data(), a.data(), bytes); });
  c.copy_gbps = 2.0 * double(bytes) / copy_s / 1e9;
  const int64_t m = 128, n = 1024, k = 1024;
  std::vector<float> x(size_t(m * k), 0.5f), w(size_t(n * k), 0.25f), y(size_t(m * n));
  const cpu::PackedMatrix packed = cpu::pack_matrix(w.data(), n, k);
  const double mm_s = best_seconds(3, [&] { cpu::matmul(x.data(), packed, nullptr, y.data(), m); });
  c.gemm_tflops = 2.0 * double(m * n * k) / mm_s / 1e12;
  c.what = "CPU: memcpy of 256 MiB, fp32 matmul 128 x 1024 x 1024 (best of 3)";
  return c;
}

}  // namespace

DeviceCeilings measure_device_ceilings(const EngineArgs& args) {
#ifdef PAGELLM_HAVE_CUDA
  if (args.device == "cuda") return measure_cuda_ceilings(args.dtype);
#endif
  return measure_cpu_ceilings();
}

}  // namespace pagellm::runner
