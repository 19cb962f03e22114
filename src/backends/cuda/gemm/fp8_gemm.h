// FP8 (e4m3) linear layers on the GPU: the one runtime form every FP8 checkpoint format is loaded
// into — an e4m3 weight [n, k] with one fp32 scale per output channel (per-tensor scales are
// broadcast; fused q/k/v and gate/up shards keep their own scales row by row) — and dynamic
// per-token activation quantization. Decode-sized m reads the FP8 weight once and multiplies the
// 16-bit activations directly (weight-bound); larger m quantizes activations per token and runs a
// tensor-core FP8 GEMM (sm_89+) with the per-token x per-channel scales applied in the epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

// Largest finite e4m3 value: scales are amax / kFp8Max.
constexpr float kFp8Max = 448.0f;

// xq[i, :] = saturate(x[i, :] / scale[i]) as e4m3, scale[i] = max(amax(x[i, :]), eps) / kFp8Max.
// x [m, k] of dtype (16-bit), xq [m, k] bytes, scale [m] fp32.
struct QuantizeFp8Params {
  DType dtype = DType::kBF16;
  const void* x = nullptr;
  void* xq = nullptr;
  float* scale = nullptr;
  int m = 0;
  int k = 0;
};
cudaError_t quantize_fp8_per_token(const QuantizeFp8Params& p, cudaStream_t stream);

// The same per row of a weight w [n, k] of dtype: wq [n, k] e4m3, w_scale [n] (for
// `--quantization fp8` on a 16-bit checkpoint, and for requantizing block-scaled weights).
cudaError_t quantize_fp8_per_channel(DType dtype, const void* w, int n, int k, void* wq,
                                     float* w_scale, cudaStream_t stream);

// y [m, n] of dtype = (x [m, k] · dequant(wq)ᵀ) + bias, dequant(wq)[j, :] = wq[j, :] * w_scale[j].
// xq_work [m, k] bytes and x_scale_work [m] floats are scratch for the activation quantization.
struct Fp8LinearParams {
  DType dtype = DType::kBF16;  // of x, y and bias
  const void* x = nullptr;     // [m, k]
  const void* wq = nullptr;    // [n, k] e4m3
  const float* w_scale = nullptr;  // [n]
  void* y = nullptr;           // [m, n]
  const void* bias = nullptr;  // [n] or null
  int m = 0;
  int n = 0;
  int k = 0;
  void* xq_work = nullptr;        // [m, k] e4m3 scratch
  float* x_scale_work = nullptr;  // [m] scratch
};
// Graph-capturable (no allocation, no synchronization). Returns cudaErrorNotSupported on a GPU
// without FP8 tensor cores for m above the weight-only path's limit.
cudaError_t fp8_linear(GemmContext* ctx, const Fp8LinearParams& p, cudaStream_t stream);

}  // namespace pagellm::cuda
