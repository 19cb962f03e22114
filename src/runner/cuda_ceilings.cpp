// The GPU's copy rate and 16-bit GEMM rate (runner/device_ceilings.h), measured like
// ../shared/device/cuda_probe.cu: a 1 GiB device-to-device copy and a cuBLAS 8192^3 GEMM, each the
// best of five after a warm-up.
#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/kernels.h"
#include "common/error.h"
#include "runner/device_ceilings.h"

namespace pagellm::runner {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw_error(ErrorKind::kInternal, std::string("measuring the GPU's ceilings: ") + what + ": " +
                                          cudaGetErrorString(e));
}

// Milliseconds of the fastest of 5 runs of fn on stream (after one warm-up).
template <typename Fn>
float best_ms(cudaStream_t stream, Fn&& fn) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  fn();
  float best = 1e30f;
  for (int i = 0; i < 5; ++i) {
    check(cudaEventRecord(e0, stream), "event");
    fn();
    check(cudaEventRecord(e1, stream), "event");
    check(cudaEventSynchronize(e1), "timing");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "timing");
    best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return best;
}

}  // namespace

DeviceCeilings measure_cuda_ceilings(const std::string& dtype) {
  DeviceCeilings c;
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "stream");
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "allocating 1 GiB");
  check(cudaMalloc(&b, bytes), "allocating 1 GiB");
  check(cudaMemsetAsync(a, 1, bytes, stream), "memset");
  const float copy_ms = best_ms(stream, [&] {
    check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
  });
  c.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
  // 8192^3 in 16 bits: x, w and y fit the two buffers (128 MiB each).
  const int n = 8192;
  const DType t = dtype == "float16" || dtype == "half" ? DType::kF16 : DType::kBF16;
  cudaError_t err = cudaSuccess;
  cuda::GemmContext* ctx = cuda::gemm_create(size_t(32) << 20, &err);
  check(err, "cuBLASLt");
  const cuda::GemmParams p{t, a, static_cast<char*>(a) + (size_t(256) << 20), b, n, n, n, false};
  const float gemm_ms = best_ms(stream, [&] { check(cuda::gemm(ctx, p, stream), "gemm"); });
  c.gemm_tflops = 2.0 * double(n) * n * n / (gemm_ms * 1e-3) / 1e12;
  cuda::gemm_destroy(ctx);
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(stream);
  c.what = std::string("GPU: device-to-device copy of 1 GiB, cuBLAS ") +
           (t == DType::kF16 ? "f16" : "bf16") + " GEMM 8192^3 (best of 5)";
  return c;
}

}  // namespace pagellm::runner
