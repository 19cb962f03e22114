// Dense GEMMs through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ in Hugging Face Linear layout, one
// dtype for all three, fp32 accumulation. cuBLASLt is column-major, so the row-major product is
// computed as yᵀ = w · xᵀ: A = w read transposed, B = x, C = y, all with their row-major strides as
// leading dims.
#include <cublasLt.h>

#include <cstring>

#include "backends/cuda/gemm_context.h"
#include "backends/cuda/gemv.h"

namespace pagellm::cuda {

GemmContext* gemm_create(std::size_t workspace_bytes, cudaError_t* error) {
  auto* ctx = new GemmContext();
  *error = cudaSuccess;
  if (cublasLtCreate(&ctx->handle) != CUBLAS_STATUS_SUCCESS) {
    *error = cudaErrorInitializationError;
  } else if (workspace_bytes > 0) {
    *error = cudaMalloc(&ctx->workspace, workspace_bytes);
    if (*error == cudaSuccess) ctx->workspace_bytes = workspace_bytes;
  }
  if (*error != cudaSuccess) {
    gemm_destroy(ctx);
    return nullptr;
  }
  return ctx;
}

cudaError_t gemm_silu_and_mul(GemmContext* ctx, const GemmParams& p, cudaStream_t stream) {
  if (!ctx || p.m < 0 || p.n <= 0 || p.k <= 0 || p.n % 2 != 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.y) return cudaErrorInvalidValue;
  if (!ctx->use_gemv || !gemv_applies(p) || p.accumulate) return cudaErrorNotSupported;
  return gemv_silu_and_mul(p, stream);
}

void gemm_set_use_gemv(GemmContext* ctx, bool use) {
  if (ctx) ctx->use_gemv = use;
}

void gemm_destroy(GemmContext* ctx) {
  if (!ctx) return;
  if (ctx->workspace) cudaFree(ctx->workspace);
  if (ctx->handle) cublasLtDestroy(ctx->handle);
  delete ctx;
}

namespace {

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:  // storage types: FP8 layers go through fp8_linear; integers are never GEMM inputs
      break;
  }
  return CUDA_R_32F;
}

}  // namespace

cudaError_t gemm(GemmContext* ctx, const GemmParams& p, cudaStream_t stream) {
  if (!ctx || p.m < 0 || p.n <= 0 || p.k <= 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.y) return cudaErrorInvalidValue;
  if (is_fp8(p.dtype) || (p.batch > 1 && p.bias)) return cudaErrorNotSupported;
  if (p.batch < 1) return cudaErrorInvalidValue;
  if (p.batch == 1 && ctx->use_gemv && gemv_applies(p)) return gemv(p, stream);
  const cudaDataType_t type = cuda_type(p.dtype);
  LtDescs d;
  // fp32 inputs use plain fp32 compute (never TF32) so that fp32 models stay exact.
  if (cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a);
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b);
  if (p.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = type;
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof p.bias);
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                   sizeof bias_type);
  }
  if (cublasLtMatrixLayoutCreate(&d.a, type, p.k, p.n, p.k) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&d.b, type, p.k, p.m, p.k) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatrixLayoutCreate(&d.c, type, p.n, p.m, p.n) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  if (p.batch > 1) {
    const std::pair<cublasLtMatrixLayout_t, int64_t> strided[] = {
        {d.a, p.stride_w}, {d.b, p.stride_x}, {d.c, p.stride_y}};
    for (const auto& [layout, stride] : strided) {
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &p.batch,
                                       sizeof p.batch);
      cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                       sizeof stride);
    }
  }

  const GemmContext::Key key{static_cast<int>(p.dtype), p.m,    p.n, p.k, p.accumulate,
                             p.bias != nullptr,         p.batch};
  auto it = ctx->algos.find(key);
  if (it == ctx->algos.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &ctx->workspace_bytes, sizeof ctx->workspace_bytes);
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof result);
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, d.op, d.a, d.b, d.c, d.c,
                                                             pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return cudaErrorNotSupported;
    it = ctx->algos.emplace(key, result.algo).first;
  }
  const float alpha = 1.f, beta = p.accumulate ? 1.f : 0.f;
  const cublasStatus_t st =
      cublasLtMatmul(ctx->handle, d.op, &alpha, p.w, d.a, p.x, d.b, &beta, p.y, d.c, p.y, d.c,
                     &it->second, ctx->workspace, ctx->workspace_bytes, stream);
  return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace pagellm::cuda
