// W8A8-INT8 linear (gemm/int_gemm.h): per-token int8 quantization of the activations, then on
// Hopper, where its tiles fill the GPU, the wgmma GEMM with the scales and bias in its epilogue
// (int8_gemm_sm90.cu), elsewhere cuBLASLt's int8 GEMM with int32 sums and an epilogue kernel that
// applies both scales and the bias. cuBLASLt is
// column-major, so the row-major acc[m, n] = xq[m, k] · wq[n, k]ᵀ is computed as accᵀ = wq · xqᵀ
// (A = wq read transposed, the "TN" layout the int8 kernels want).
#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/gemm_context.h"

namespace pagellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kInt8Mode = 100;  // GemmContext::fp8_algos key mode of the int8 GEMM

// One block per row: amax, then round(x * (127 / amax)) clamped to [-128, 127]; scale amax / 127
// (a row of zeros: codes 0, scale 0). The float operations are the host reference's.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_int8_rows(const T* __restrict__ x, int8_t* __restrict__ xq, float* __restrict__ scale,
                       int k) {
  __shared__ float warp_amax[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * k;
  float amax = 0.f;
  for (int c = threadIdx.x; c < k; c += kThreads) amax = fmaxf(amax, fabsf(to_float(xr[c])));
  amax = warp_max(amax);
  if ((threadIdx.x & 31) == 0) warp_amax[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float inv = amax > 0.f ? 127.0f / amax : 0.f;
  if (threadIdx.x == 0) scale[row] = amax / 127.0f;
  for (int c = threadIdx.x; c < k; c += kThreads) {
    const float v = rintf(__fmul_rn(to_float(xr[c]), inv));
    xq[row * k + c] = static_cast<int8_t>(fminf(fmaxf(v, -128.f), 127.f));
  }
}

template <typename T>
__global__ void scale_int32(const int32_t* __restrict__ acc, const float* __restrict__ x_scale,
                            const float* __restrict__ w_scale, const T* __restrict__ bias,
                            T* __restrict__ y, int rows, int n) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{rows} * n) return;
  const int r = static_cast<int>(i / n), j = static_cast<int>(i % n);
  // Rounded operation by operation (no contraction), as the wgmma kernel's epilogue.
  float v = __fmul_rn(__fmul_rn(static_cast<float>(acc[i]), x_scale[r]), w_scale[j]);
  if (bias) v = __fadd_rn(v, to_float(bias[j]));
  y[i] = from_float<T>(v);
}

bool make_descs(const Int8LinearParams& p, int rows, LtDescs& d) {
  if (cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32I, CUDA_R_32I) != CUBLAS_STATUS_SUCCESS)
    return false;
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a);
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b);
  return cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8I, p.k, p.n, p.k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8I, p.k, rows, p.k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32I, p.n, rows, p.n) == CUBLAS_STATUS_SUCCESS;
}

const GemmContext::Fp8Algo& find_algo(GemmContext* ctx, const Int8LinearParams& p, int rows,
                                      const LtDescs& d) {
  const GemmContext::Fp8Key key{kInt8Mode, static_cast<int>(p.dtype), rows, p.n, p.k, false, 16};
  return cached_lt_algo(ctx, key, d, 0, 0);
}

// PAGELLM_W8A8_GEMM=cublaslt or =wgmma at start pins kAuto's choice (A/B runs; wgmma still only
// where it fits).
Int8LinearParams::Path env_path() {
  static const Int8LinearParams::Path path = [] {
    const char* v = std::getenv("PAGELLM_W8A8_GEMM");
    if (v && std::strcmp(v, "cublaslt") == 0) return Int8LinearParams::Path::kCublasLt;
    if (v && std::strcmp(v, "wgmma") == 0) return Int8LinearParams::Path::kWgmma;
    return Int8LinearParams::Path::kAuto;
  }();
  return path;
}

bool use_wgmma(const Int8LinearParams& p) {
  switch (p.path) {
    case Int8LinearParams::Path::kCublasLt:
      return false;
    case Int8LinearParams::Path::kWgmma:
      return true;
    case Int8LinearParams::Path::kAuto:
      break;
  }
  const Int8LinearParams::Path pinned = env_path();
  if (pinned == Int8LinearParams::Path::kCublasLt) return false;
  return (pinned == Int8LinearParams::Path::kWgmma || int8_gemm_sm90_pays(p)) &&
         int8_gemm_sm90_fits(p);
}

template <typename T>
cudaError_t run(GemmContext* ctx, const Int8LinearParams& p, cudaStream_t stream) {
  quantize_int8_rows<T>
      <<<p.m, kThreads, 0, stream>>>(static_cast<const T*>(p.x), p.xq_work, p.x_scale_work, p.k);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  if (use_wgmma(p)) return int8_gemm_sm90(p, stream);
  for (int r0 = 0; r0 < p.m; r0 += p.acc_rows) {
    const int rows = std::min(p.acc_rows, p.m - r0);
    LtDescs d;
    if (!make_descs(p, rows, d)) return cudaErrorNotSupported;
    const GemmContext::Fp8Algo& algo = find_algo(ctx, p, rows, d);
    if (!algo.found) return cudaErrorNotSupported;
    const int32_t alpha = 1, beta = 0;
    if (cublasLtMatmul(ctx->handle, d.op, &alpha, p.wq, d.a, p.xq_work + int64_t{r0} * p.k, d.b,
                       &beta, p.acc_work, d.c, p.acc_work, d.c, &algo.algo, ctx->workspace,
                       ctx->workspace_bytes, stream) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
    const int64_t total = int64_t{rows} * p.n;
    scale_int32<T>
        <<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
            p.acc_work, p.x_scale_work + r0, p.w_scale, static_cast<const T*>(p.bias),
            static_cast<T*>(p.y) + int64_t{r0} * p.n, rows, p.n);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t int8_linear(GemmContext* ctx, const Int8LinearParams& p, cudaStream_t stream) {
  if (!ctx || p.m < 0 || p.n <= 0 || p.k <= 0 || p.k % 4 != 0 || p.n % 4 != 0)
    return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (!p.x || !p.wq || !p.w_scale || !p.y || !p.xq_work || !p.x_scale_work || !p.acc_work ||
      p.acc_rows <= 0 || !aligned16(p.x) || !aligned16(p.wq) || !aligned16(p.xq_work) ||
      !aligned16(p.acc_work))
    return cudaErrorInvalidValue;
  if (p.path == Int8LinearParams::Path::kWgmma && !int8_gemm_sm90_fits(p))
    return cudaErrorInvalidValue;
  if (p.dtype == DType::kBF16) return run<__nv_bfloat16>(ctx, p, stream);
  if (p.dtype == DType::kF16) return run<__half>(ctx, p, stream);
  return cudaErrorNotSupported;
}

}  // namespace pagellm::cuda
