// Per-row FP8 (e4m3) quantization of 16-bit rows (activations per token, weights per output
// channel), its per-128-column-group variant (block-scaled layers), and the epilogues of the
// tensor-core paths (scales of the unscaled GEMM, bias of the block-scaled GEMM). One block per
// row: the row is read twice (amax, then convert); the second pass hits L1/L2, and a row is at most
// a few tens of KB, so the kernel runs at close to one pass over HBM for large m.
#include <cuda_fp8.h>

#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_act_quant.cuh"
#include "backends/cuda/fp8_convert.cuh"
#include "backends/cuda/gemm/fp8_internal.h"

namespace pagellm::cuda {
namespace {

constexpr int kQuantThreads = 256;

// grid: one block of kThreads per row. x [num_rows, k], xq [num_rows, k], scale [num_rows];
// k % 8 == 0. kSlices > 0: each thread's (at most kSlices) 16-byte slices of the row are all
// loaded first and kept in registers, so a thread has them all in flight at once and the row is
// read once. kSlices == 0 (rows of more than 2 x 1024 slices): two passes, the second served by
// L1/L2.
template <typename T, int kThreads, int kSlices>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ x, uint8_t* __restrict__ xq,
                         float* __restrict__ scale, int k) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  uint8_t* qr = xq + row * k;
  const int num_vec = k / 8;  // 8 elements = 16 bytes in, 8 bytes out
  float amax = 0.f;
  if constexpr (kSlices > 0) {
    float f[kSlices][8];
#pragma unroll
    for (int j = 0; j < kSlices; ++j) {
      const int v = threadIdx.x + j * kThreads;
      if (v < num_vec) {
        load16(xr + v * 8, f[j]);
        amax = abs_max(f[j], amax);
      }
    }
    const float s = fp8_act_scale(block_max(amax, scratch));
    if (threadIdx.x == 0) scale[row] = s;
    const Fp8Divisor d = fp8_divisor(s);
#pragma unroll
    for (int j = 0; j < kSlices; ++j) {
      const int v = threadIdx.x + j * kThreads;
      if (v < num_vec) store_e4m3(qr + v * 8, f[j], d);
    }
  } else {
    for (int v = threadIdx.x; v < num_vec; v += kThreads) {
      float f[8];
      load16(xr + v * 8, f);
      amax = abs_max(f, amax);
    }
    const float s = fp8_act_scale(block_max(amax, scratch));
    if (threadIdx.x == 0) scale[row] = s;
    const Fp8Divisor d = fp8_divisor(s);
    for (int v = threadIdx.x; v < num_vec; v += kThreads) {
      float f[8];
      load16(xr + v * 8, f);
      store_e4m3(qr + v * 8, f, d);
    }
  }
}

// Rows of up to 512 slices: 256 threads, one or two slices each; up to 2,048 slices (k 16,384):
// 1,024 threads, two each (one block of 256 threads with 7 slices each ran k 14,336 at half the
// copy rate); longer rows: the two-pass loop.
template <typename T>
cudaError_t launch_quantize_rows(const T* x, int num_rows, int k, uint8_t* xq, float* scale,
                                 cudaStream_t stream) {
  const int slices = k / 8;
  if (slices <= 256)
    quantize_rows_kernel<T, 256, 1><<<num_rows, 256, 0, stream>>>(x, xq, scale, k);
  else if (slices <= 512)
    quantize_rows_kernel<T, 256, 2><<<num_rows, 256, 0, stream>>>(x, xq, scale, k);
  else if (slices <= 2048)
    quantize_rows_kernel<T, 1024, 2><<<num_rows, 1024, 0, stream>>>(x, xq, scale, k);
  else
    quantize_rows_kernel<T, kQuantThreads, 0>
        <<<num_rows, kQuantThreads, 0, stream>>>(x, xq, scale, k);
  return cudaGetLastError();
}

// 128-column groups: each half-warp (16 lanes x 8 elements) quantizes one group, so the amax is a
// 4-step shuffle and nothing waits on a block barrier. x [m, k], xq [m, k], scale [k / 128, m]
// (group-major); grid covers m * k / 128 groups, 16 per block.
template <typename T>
__global__ void __launch_bounds__(kQuantThreads)
    quantize_groups_kernel(const T* __restrict__ x, uint8_t* __restrict__ xq,
                           float* __restrict__ scale, int m, int k) {
  const int groups_per_row = k / kFp8Block;
  const int64_t group = (int64_t{blockIdx.x} * kQuantThreads + threadIdx.x) / 16;
  const bool valid = group < int64_t{m} * groups_per_row;
  const int64_t row = valid ? group / groups_per_row : 0;
  const int g = valid ? static_cast<int>(group % groups_per_row) : 0;
  const int64_t offset = row * k + g * kFp8Block + (threadIdx.x & 15) * 8;
  float f[8] = {};
  if (valid) load16(x + offset, f);
  float amax = abs_max(f);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!valid) return;
  const float s = fp8_act_scale(amax);
  if ((threadIdx.x & 15) == 0) scale[int64_t{g} * m + row] = s;
  store_e4m3(xq + offset, f, fp8_divisor(s));
}

cudaError_t quantize_groups(DType dtype, const void* x, int m, int k, void* xq, float* scale,
                            cudaStream_t stream) {
  if (m < 0 || k <= 0 || k % kFp8Block != 0) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  if (!x || !xq || !scale || !aligned16(x) || !aligned16(xq)) return cudaErrorInvalidValue;
  if (dtype == DType::kF32) return cudaErrorNotSupported;
  const int64_t num_groups = int64_t{m} * (k / kFp8Block);
  const dim3 grid(static_cast<unsigned>((num_groups * 16 + kQuantThreads - 1) / kQuantThreads));
  if (dtype == DType::kBF16)
    quantize_groups_kernel<__nv_bfloat16><<<grid, kQuantThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<uint8_t*>(xq), scale, m, k);
  else
    quantize_groups_kernel<__half><<<grid, kQuantThreads, 0, stream>>>(
        static_cast<const __half*>(x), static_cast<uint8_t*>(xq), scale, m, k);
  return cudaGetLastError();
}

cudaError_t quantize_rows(DType dtype, const void* x, int num_rows, int k, void* xq, float* scale,
                          cudaStream_t stream) {
  if (num_rows < 0 || k <= 0 || k % 8 != 0) return cudaErrorInvalidValue;
  if (num_rows == 0) return cudaSuccess;
  if (!x || !xq || !scale || !aligned16(x) || !aligned16(xq)) return cudaErrorInvalidValue;
  if (dtype == DType::kF32) return cudaErrorNotSupported;
  if (dtype == DType::kBF16)
    return launch_quantize_rows(static_cast<const __nv_bfloat16*>(x), num_rows, k,
                                static_cast<uint8_t*>(xq), scale, stream);
  return launch_quantize_rows(static_cast<const __half*>(x), num_rows, k, static_cast<uint8_t*>(xq),
                              scale, stream);
}

// y [m, n] += bias [n] in place (the block-scaled cuBLASLt path, which has no bias epilogue).
template <typename T>
__global__ void add_bias_kernel(T* y, const T* __restrict__ bias, int m, int n) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const float b = to_float(bias[col]);
  for (int row = blockIdx.y; row < m; row += gridDim.y) {
    const int64_t i = int64_t{row} * n + col;
    y[i] = from_float<T>(to_float(y[i]) + b);
  }
}

// y [m, n] in place: bf16 unscaled product -> T with row and column scales and bias. grid.x covers
// n, grid.y strides over rows.
template <typename T>
__global__ void scale_output_kernel(void* y, const float* __restrict__ x_scale,
                                    const float* __restrict__ w_scale, const T* __restrict__ bias,
                                    int m, int n) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const float ws = w_scale[col];
  const float b = bias ? to_float(bias[col]) : 0.f;
  for (int row = blockIdx.y; row < m; row += gridDim.y) {
    const int64_t i = int64_t{row} * n + col;
    // Same element size: each thread reads its bf16 and writes its T at the same address.
    const float v = __bfloat162float(static_cast<const __nv_bfloat16*>(y)[i]);
    static_cast<T*>(y)[i] = from_float<T>(v * x_scale[row] * ws + b);
  }
}

}  // namespace

namespace {

// out[r, c] = e4m3(wq[r, c]) * scale[((row0 + r) / block_n) * scale_cols + (col0 + c) / block_k]
// rounded to T: the fp32 product, then one rounding (bf16 / f16).
template <typename T>
__global__ void dequantize_blocks_kernel(const uint8_t* __restrict__ wq,
                                         const float* __restrict__ scale, T* __restrict__ out,
                                         Fp8BlockDequantParams p) {
  const int64_t total = p.rows * p.cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.cols, c = i % p.cols;
    const __nv_fp8_e4m3 q = *reinterpret_cast<const __nv_fp8_e4m3*>(wq + i);
    const float s = scale[(p.row0 + r) / p.block_n * p.scale_cols + (p.col0 + c) / p.block_k];
    out[i] = T(float(q) * s);
  }
}

// 16 codes of one row per thread (cols % 16 == 0): out = e4m3 * scale[row], the fp32 product
// rounded once to T, written as two 16-byte stores.
template <typename T>
__global__ void dequantize_rows_kernel(const uint8_t* __restrict__ wq,
                                       const float* __restrict__ scale, T* __restrict__ out,
                                       int64_t rows, int64_t cols) {
  const int64_t chunks = cols / 16, total = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float s = scale[i / chunks];
    float v[2][8];
    fp8x16_to_floats(__ldcs(reinterpret_cast<const uint4*>(wq) + i), v);
#pragma unroll
    for (int e = 0; e < 16; ++e) v[e / 8][e % 8] *= s;
    store16(out + i * 16, v[0]);
    store16(out + i * 16 + 8, v[1]);
  }
}

}  // namespace

cudaError_t dequantize_fp8_rows(DType dtype, const void* wq, const float* scale, int64_t rows,
                                int64_t cols, void* out, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || cols % 16 != 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (!wq || !scale || !out || !aligned16(wq) || !aligned16(out)) return cudaErrorInvalidValue;
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((rows * (cols / 16) + threads - 1) / threads, 8192));
  const auto* q = static_cast<const uint8_t*>(wq);
  if (dtype == DType::kBF16)
    dequantize_rows_kernel<<<blocks, threads, 0, stream>>>(
        q, scale, static_cast<__nv_bfloat16*>(out), rows, cols);
  else if (dtype == DType::kF16)
    dequantize_rows_kernel<<<blocks, threads, 0, stream>>>(q, scale, static_cast<__half*>(out),
                                                           rows, cols);
  else
    return cudaErrorNotSupported;
  return cudaGetLastError();
}

cudaError_t dequantize_fp8_blocks(const Fp8BlockDequantParams& p, cudaStream_t stream) {
  if (p.rows < 0 || p.cols < 0 || p.block_n < 1 || p.block_k < 1 || p.scale_cols < 1 ||
      p.row0 < 0 || p.col0 < 0)
    return cudaErrorInvalidValue;
  if (p.rows == 0 || p.cols == 0) return cudaSuccess;
  if (!p.wq || !p.scale || !p.out) return cudaErrorInvalidValue;
  const int threads = 256;
  const int64_t needed = (p.rows * p.cols + threads - 1) / threads;
  const int blocks = int(std::min<int64_t>(needed, 8192));
  const auto* wq = static_cast<const uint8_t*>(p.wq);
  if (p.dtype == DType::kBF16)
    dequantize_blocks_kernel<<<blocks, threads, 0, stream>>>(wq, p.scale,
                                                             static_cast<__nv_bfloat16*>(p.out), p);
  else if (p.dtype == DType::kF16)
    dequantize_blocks_kernel<<<blocks, threads, 0, stream>>>(wq, p.scale,
                                                             static_cast<__half*>(p.out), p);
  else
    return cudaErrorNotSupported;
  return cudaGetLastError();
}

cudaError_t quantize_fp8_per_token(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.group_size == kFp8Block)
    return quantize_groups(p.dtype, p.x, p.m, p.k, p.xq, p.scale, stream);
  if (p.group_size != 0) return cudaErrorInvalidValue;
  return quantize_rows(p.dtype, p.x, p.m, p.k, p.xq, p.scale, stream);
}

cudaError_t quantize_fp8_per_channel(DType dtype, const void* w, int n, int k, void* wq,
                                     float* w_scale, cudaStream_t stream) {
  return quantize_rows(dtype, w, n, k, wq, w_scale, stream);
}

cudaError_t fp8_scale_output(const Fp8LinearParams& p, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid((p.n + kThreads - 1) / kThreads, static_cast<unsigned>(std::min(p.m, 4096)));
  if (p.dtype == DType::kBF16)
    scale_output_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        p.y, p.x_scale_work, p.w_scale, static_cast<const __nv_bfloat16*>(p.bias), p.m, p.n);
  else
    scale_output_kernel<__half><<<grid, kThreads, 0, stream>>>(
        p.y, p.x_scale_work, p.w_scale, static_cast<const __half*>(p.bias), p.m, p.n);
  return cudaGetLastError();
}

cudaError_t fp8_add_bias(const Fp8LinearParams& p, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid((p.n + kThreads - 1) / kThreads, static_cast<unsigned>(std::min(p.m, 4096)));
  if (p.dtype == DType::kBF16)
    add_bias_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(p.y), static_cast<const __nv_bfloat16*>(p.bias), p.m, p.n);
  else
    add_bias_kernel<__half><<<grid, kThreads, 0, stream>>>(
        static_cast<__half*>(p.y), static_cast<const __half*>(p.bias), p.m, p.n);
  return cudaGetLastError();
}

}  // namespace pagellm::cuda
