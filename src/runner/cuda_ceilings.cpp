// The GPU's copy rate and 16-bit GEMM rate (runner/device_ceilings.h), measured as
// ../shared/device/cuda_probe.cu measures them: device-to-device copies of 2 GiB on the default
// stream and a cuBLAS 8192^3 GEMM on uniform random operands (constant or zero data draws less
// power and runs faster than real weights), each averaged over 10 runs after 3 warm-ups. Then,
// where the GPU has FP8 tensor cores, the FP8 GEMM of FP8 weights' prefill on the same shape and
// data: both operands quantized to e4m3 (per row), timed as fp8_linear runs it on activations an
// earlier kernel quantized (cuBLASLt, per-token x per-channel scales in the epilogue).
#include <cuda_runtime.h>

#include <memory>

#include "backends/cuda/gemm/fp8_gemm.h"
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

// Mean milliseconds of 10 runs of fn on stream, after 3 warm-ups.
template <typename Fn>
float mean_ms(cudaStream_t stream, Fn&& fn) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  for (int i = 0; i < 3; ++i) fn();
  check(cudaEventRecord(e0, stream), "event");
  for (int i = 0; i < 10; ++i) fn();
  check(cudaEventRecord(e1, stream), "event");
  check(cudaEventSynchronize(e1), "timing");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, e0, e1), "timing");
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / 10;
}

// Two device buffers freed on every path out.
struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  ~Buffers() {
    cudaFree(a);
    cudaFree(b);
  }
};

// TFLOP/s of fp8_linear's tensor-core GEMM on n x n x n, or 0 where the GPU has no FP8 tensor
// cores. x and w: n x n of dtype t; work: 3 n^2 bytes + 8 n floats of scratch (the e4m3 operands,
// their scales), y: n x n of t.
double fp8_gemm_tflops(DType t, int n, const void* x, const void* w, unsigned char* work, void* y) {
  cudaError_t err = cudaSuccess;
  const std::unique_ptr<cuda::GemmContext, void (*)(cuda::GemmContext*)> ctx(
      cuda::gemm_create(size_t(32) << 20, &err), cuda::gemm_destroy);
  check(err, "cuBLASLt");
  const size_t elems = size_t(n) * n;
  cuda::Fp8LinearParams p;
  p.dtype = t;
  p.wq = work;
  p.xq_work = work + elems;
  float* scales = reinterpret_cast<float*>(work + 2 * elems);
  p.w_scale = scales;
  p.x_scale_work = scales + n;
  p.y = y;
  p.m = p.n = p.k = n;
  p.x_quantized = true;  // as when the RMSNorm before quantized x (kernels.h Fp8Out)
  // Rows of x quantized as rows of a weight are per-token quantized activations.
  check(cuda::quantize_fp8_per_channel(t, w, n, n, work, scales, nullptr), "quantizing w");
  check(cuda::quantize_fp8_per_channel(t, x, n, n, p.xq_work, p.x_scale_work, nullptr),
        "quantizing x");
  cuda::fp8_linear_set_path(ctx.get(), cuda::Fp8Path::kScaledGemm);
  if (cuda::fp8_linear(ctx.get(), p, nullptr) != cudaSuccess) {
    cudaGetLastError();  // no FP8 tensor cores (or no cuBLASLt FP8 kernel): not measured
    return 0;
  }
  const float ms =
      mean_ms(nullptr, [&] { check(cuda::fp8_linear(ctx.get(), p, nullptr), "fp8 gemm"); });
  return 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12;
}

}  // namespace

DeviceCeilings measure_cuda_ceilings(const std::string& dtype) {
  DeviceCeilings c;
  Buffers buf;
  const size_t bytes = size_t(2) << 30;
  check(cudaMalloc(&buf.a, bytes), "allocating 2 GiB");
  check(cudaMalloc(&buf.b, bytes), "allocating 2 GiB");
  check(cudaMemset(buf.a, 1, bytes), "memset");
  const float copy_ms = mean_ms(
      nullptr, [&] { check(cudaMemcpy(buf.b, buf.a, bytes, cudaMemcpyDeviceToDevice), "copy"); });
  c.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e-3) / 1e9;
  // 8192^3 in 16 bits: x and w (128 MiB each) in a, y in b.
  const int n = 8192;
  const int64_t elems = int64_t(n) * n;
  const DType t = dtype == "float16" || dtype == "half" ? DType::kF16 : DType::kBF16;
  void* w = static_cast<char*>(buf.a) + (size_t(256) << 20);
  check(cuda::fill_uniform(t, buf.a, 1, elems, elems, 1, 0.5, nullptr), "filling x");
  check(cuda::fill_uniform(t, w, 1, elems, elems, 2, 0.5, nullptr), "filling w");
  cudaError_t err = cudaSuccess;
  cuda::GemmContext* ctx = cuda::gemm_create(size_t(32) << 20, &err);
  check(err, "cuBLASLt");
  const cuda::GemmParams p{t, buf.a, w, buf.b, n, n, n, false};
  const float gemm_ms = mean_ms(nullptr, [&] { check(cuda::gemm(ctx, p, nullptr), "gemm"); });
  cuda::gemm_destroy(ctx);
  c.gemm_tflops = 2.0 * double(n) * n * n / (gemm_ms * 1e-3) / 1e12;
  c.what = std::string("GPU: device-to-device copy of 2 GiB, cuBLAS ") +
           (t == DType::kF16 ? "f16" : "bf16") + " GEMM 8192^3 on random data (mean of 10)";
  // The FP8 operands and scales after y in b; y takes b's first 128 MiB.
  unsigned char* work = static_cast<unsigned char*>(buf.b) + (size_t(256) << 20);
  c.fp8_gemm_tflops = fp8_gemm_tflops(t, n, buf.a, w, work, buf.b);
  if (c.fp8_gemm_tflops > 0)
    c.what += ", cuBLASLt e4m3 GEMM 8192^3 with per-token x per-channel scales";
  return c;
}

}  // namespace pagellm::runner
