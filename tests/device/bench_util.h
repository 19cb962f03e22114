// Timing helpers of the device benchmarks (fp8_bench.cpp, int_tests.cpp): event-timed launches,
// graph-captured launches, random weights, and the two ceilings every figure is set against (device
// copy rate, cuBLASLt bf16 GEMM rate) measured in the same process.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "backends/cuda/kernels.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {

// Median milliseconds of fn over `reps` event-timed launches after 3 warm-ups.
inline double time_ms(const std::function<void()>& fn, int reps = 25) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms(static_cast<size_t>(reps));
  for (auto& t : ms) {
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&t, a, b));
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Milliseconds per call of fn, captured kCalls times into one graph (fn rotates its buffers), as
// the median of 10 replays.
inline double time_graph_ms(const std::function<void(cudaStream_t)>& fn) {
  constexpr int kCalls = 20;
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < kCalls; ++i) fn(stream);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(exec, stream));
  std::vector<float> ms(10);
  for (auto& t : ms) {
    CK(cudaEventRecord(a, stream));
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&t, a, b));
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(stream));
  return ms[ms.size() / 2] / kCalls;
}

// count random bf16 values in [-bound, bound] (the dummy-weight generator, as one row).
inline void fill_random(void* out, int64_t count, uint64_t key, double bound) {
  CK(fill_uniform(DType::kBF16, out, 1, count, count, key, bound, nullptr));
}

inline double copy_gbs() {
  const size_t bytes = size_t(2) << 30;
  DevMem a(bytes), b(bytes);
  fill_random(a.ptr, int64_t(bytes / 2), 7, 1.0);
  const double ms =
      time_ms([&] { CK(cudaMemcpyAsync(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice)); }, 10);
  return 2.0 * bytes / (ms * 1e6);
}

// Llama-3.1-8B's projections (n x k): the shapes the GEMM benchmarks time.
struct ProjectionShape {
  const char* name;
  int n, k;
};
inline constexpr ProjectionShape kLlamaProjections[] = {{"qkv 6144x4096", 6144, 4096},
                                                        {"o 4096x4096", 4096, 4096},
                                                        {"gu 28672x4096", 28672, 4096},
                                                        {"down 4096x14336", 4096, 14336}};

inline double bf16_gemm_tflops(GemmContext* ctx) {
  const int s = 8192;
  DevMem x(size_t(s) * s * 2), w(size_t(s) * s * 2), y(size_t(s) * s * 2);
  fill_random(x.ptr, int64_t(s) * s, 1, 1.0);
  fill_random(w.ptr, int64_t(s) * s, 2, 1.0);
  const double ms = time_ms(
      [&] {
        CK(gemm(ctx, {DType::kBF16, x.ptr, w.ptr, y.ptr, s, s, s, false}, nullptr));
      },
      10);
  return 2.0 * s * s * s / (ms * 1e9);
}

}  // namespace pagellm::cuda::test
