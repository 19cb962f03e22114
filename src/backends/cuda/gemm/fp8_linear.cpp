// fp8_linear: chooses between the weight-only kernel (decode-sized m, or no FP8 tensor cores) and
// cuBLASLt's FP8 GEMM on per-token quantized activations. cuBLASLt is column-major, so the
// row-major y[m, n] = xq[m, k] · wq[n, k]ᵀ is computed as yᵀ = wq · xqᵀ: A = wq read transposed
// (the "TN" layout FP8 requires), B = xq, D = y, with the row-major strides as leading dims; the
// per-channel scales are A's outer vector [n] and the per-token scales B's [m]. Block-scaled
// weights pass their [ceil(n / 128), stride] scales as A's 128x128 block scales (the K-block index
// fastest, rows padded to 16 bytes) and the activations' [k / 128, m] group scales as B's 1x128
// scales (the token index fastest); tests/device/fp8_tests.cpp checks both layouts on the GPU.
#include <cublasLt.h>

#include <cstdlib>
#include <cstring>

#include "backends/cuda/gemm/fp8_internal.h"
#include "backends/cuda/gemm_context.h"

namespace pagellm::cuda {

bool fp8_fast_accum() {
  static const bool on = [] {
    const char* v = std::getenv("PAGELLM_FP8_FAST_ACCUM");
    return !v || std::strcmp(v, "0") != 0;
  }();
  return on;
}

namespace {

// kScaled: scales (and bias) inside cuBLASLt, D of the layer dtype. kUnscaled: unit scales, D as
// bf16 in y (an e4m3 product sum reaches 448² · k, beyond f16's range), then fp8_scale_output.
// kBlock: 128x128 weight-block and 1x128 activation-group scales inside cuBLASLt, D of the layer
// dtype, bias added by fp8_add_bias.
enum class LtMode { kScaled, kUnscaled, kBlock };

int alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return (a & 15u) == 0 ? 16 : (a & 7u) == 0 ? 8 : (a & 3u) == 0 ? 4 : 2;
}

bool aligned16(const void* p) { return alignment_of(p) == 16; }

int sm_version(GemmContext* ctx) {
  if (ctx->sm_version < 0) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return 0;
    ctx->sm_version = major * 10 + minor;
  }
  return ctx->sm_version;
}

bool make_descs(const Fp8LinearParams& p, LtMode mode, LtDescs& d) {
  if (cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
    return false;
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a);
  cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b);
  if (mode != LtMode::kBlock && fp8_fast_accum()) {
    const int8_t fast = 1;
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  }
  const cudaDataType_t out_type =
      mode == LtMode::kUnscaled ? CUDA_R_16BF : (p.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF);
  if (mode != LtMode::kUnscaled) {
    const int32_t a_mode = mode == LtMode::kBlock ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const int32_t b_mode = mode == LtMode::kBlock ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                  : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    const void* a_scale = p.w_scale;
    const void* b_scale = p.x_scale_work;
    if (cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                       sizeof a_mode) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                       sizeof b_mode) != CUBLAS_STATUS_SUCCESS)
      return false;  // a cuBLASLt older than 12.9
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                   sizeof a_scale);
    cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                   sizeof b_scale);
    if (p.bias && mode == LtMode::kScaled) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                     sizeof epilogue);
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias,
                                     sizeof p.bias);
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &out_type,
                                     sizeof out_type);
    }
  }
  return cublasLtMatrixLayoutCreate(&d.a, CUDA_R_8F_E4M3, p.k, p.n, p.k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d.b, CUDA_R_8F_E4M3, p.k, p.m, p.k) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d.c, out_type, p.n, p.m, p.n) == CUBLAS_STATUS_SUCCESS;
}

GemmContext::Fp8Key algo_key(const Fp8LinearParams& p, LtMode mode) {
  return {static_cast<int>(mode), static_cast<int>(p.dtype), p.m, p.n, p.k,
          p.bias != nullptr,      alignment_of(p.y)};
}

const GemmContext::Fp8Algo& find_algo(GemmContext* ctx, const Fp8LinearParams& p, LtMode mode,
                                      const LtDescs& d) {
  return cached_lt_algo(ctx, algo_key(p, mode), d, 16, static_cast<uint32_t>(alignment_of(p.y)));
}

}  // namespace

const GemmContext::Fp8Algo& cached_lt_algo(GemmContext* ctx, const GemmContext::Fp8Key& key,
                                           const LtDescs& d, uint32_t ab_align, uint32_t c_align) {
  auto it = ctx->fp8_algos.find(key);
  if (it != ctx->fp8_algos.end()) return it->second;
  GemmContext::Fp8Algo found;
  cublasLtMatmulPreference_t pref = nullptr;
  if (cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &ctx->workspace_bytes, sizeof ctx->workspace_bytes);
    if (ab_align != 0) {
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                           &ab_align, sizeof ab_align);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                           &ab_align, sizeof ab_align);
    }
    if (c_align != 0) {
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                           &c_align, sizeof c_align);
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                           &c_align, sizeof c_align);
    }
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof result);
    int num_found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(ctx->handle, d.op, d.a, d.b, d.c, d.c, pref, 1, &result,
                                       &num_found) == CUBLAS_STATUS_SUCCESS &&
        num_found > 0) {
      found.found = true;
      found.algo = result.algo;
    }
    cublasLtMatmulPreferenceDestroy(pref);
  }
  return ctx->fp8_algos.emplace(key, found).first->second;
}

namespace {

// Whether the tensor-core path can take p in `mode`: FP8 tensor cores, aligned scratch and bias.
bool tensor_core_fits(GemmContext* ctx, const Fp8LinearParams& p, LtMode mode) {
  if (!p.xq_work || !p.x_scale_work || !aligned16(p.xq_work)) return false;
  if (sm_version(ctx) < 89) return false;
  // cuBLASLt's bias epilogue wants an aligned vector; the scale kernel takes any.
  return !(mode == LtMode::kScaled && p.bias && !aligned16(p.bias));
}

// The cuBLASLt algorithm for p in `mode` (descriptors made into d), or null when that path cannot
// run (tensor_core_fits, or no algorithm for the shape).
const GemmContext::Fp8Algo* tensor_core_algo(GemmContext* ctx, const Fp8LinearParams& p,
                                             LtMode mode, LtDescs& d) {
  if (!tensor_core_fits(ctx, p, mode) || !make_descs(p, mode, d)) return nullptr;
  const GemmContext::Fp8Algo& algo = find_algo(ctx, p, mode, d);
  return algo.found ? &algo : nullptr;
}

// The same question without descriptors once the shape's answer is cached (a host-side check per
// call: fp8_linear asks it before it runs).
bool tensor_core_runs(GemmContext* ctx, const Fp8LinearParams& p, LtMode mode) {
  if (!tensor_core_fits(ctx, p, mode)) return false;
  const auto it = ctx->fp8_algos.find(algo_key(p, mode));
  if (it != ctx->fp8_algos.end()) return it->second.found;
  LtDescs d;
  return tensor_core_algo(ctx, p, mode, d) != nullptr;
}

// Quantizes x per token into the scratch (unless the kernel that wrote x did: p.x_quantized), then
// one cuBLASLt call (+ the scale kernel when unscaled). cudaErrorNotSupported, before any launch,
// when cuBLASLt has no algorithm.
cudaError_t run_tensor_core(GemmContext* ctx, const Fp8LinearParams& p, LtMode mode,
                            cudaStream_t stream) {
  if (!p.xq_work || !p.x_scale_work || !aligned16(p.xq_work)) return cudaErrorInvalidValue;
  LtDescs d;
  const GemmContext::Fp8Algo* algo = tensor_core_algo(ctx, p, mode, d);
  if (!algo) return cudaErrorNotSupported;
  if (!p.x_quantized) {
    QuantizeFp8Params q{p.dtype, p.x, p.xq_work, p.x_scale_work, p.m, p.k};
    if (mode == LtMode::kBlock) q.group_size = kFp8Block;
    const cudaError_t err = quantize_fp8_per_token(q, stream);
    if (err != cudaSuccess) return err;
  }
  const float alpha = 1.f, beta = 0.f;
  if (cublasLtMatmul(ctx->handle, d.op, &alpha, p.wq, d.a, p.xq_work, d.b, &beta, p.y, d.c, p.y,
                     d.c, &algo->algo, ctx->workspace, ctx->workspace_bytes,
                     stream) != CUBLAS_STATUS_SUCCESS)
    return cudaErrorUnknown;
  if (mode == LtMode::kUnscaled) return fp8_scale_output(p, stream);
  if (mode == LtMode::kBlock && p.bias) return fp8_add_bias(p, stream);
  return cudaSuccess;
}

}  // namespace

void fp8_linear_set_path(GemmContext* ctx, Fp8Path path) {
  if (ctx) ctx->fp8_path = static_cast<int>(path);
}

namespace {

// The path fp8_linear takes for p (auto: by m, the GPU and what cuBLASLt accepts).
enum class Taken { kWeightOnly, kScaled, kUnscaled, kNone };

// PAGELLM_FP8_DECODE_GEMM=scaled keeps decode batches on the weight-only kernel and cuBLASLt's
// scaled GEMM (the rule before kFp8DecodeMinRows..kFp8DecodeMaxRows; A/B measurements).
bool unscaled_decode_gemm() {
  static const bool on = [] {
    const char* v = std::getenv("PAGELLM_FP8_DECODE_GEMM");
    return !v || std::strcmp(v, "scaled") != 0;
  }();
  return on;
}

Taken path_for(GemmContext* ctx, const Fp8LinearParams& p) {
  const bool blocked = p.w_block != 0;
  const LtMode scaled = blocked ? LtMode::kBlock : LtMode::kScaled;
  switch (static_cast<Fp8Path>(ctx->fp8_path)) {
    case Fp8Path::kWeightOnly:
      return Taken::kWeightOnly;
    case Fp8Path::kScaledGemm:
      return Taken::kScaled;
    case Fp8Path::kGemmThenScale:
      return blocked ? Taken::kNone : Taken::kUnscaled;
    case Fp8Path::kAuto:
      break;
  }
  if (!blocked && p.m >= kFp8DecodeMinRows && p.m <= kFp8DecodeMaxRows && unscaled_decode_gemm() &&
      sm_version(ctx) >= 89 && tensor_core_runs(ctx, p, LtMode::kUnscaled))
    return Taken::kUnscaled;
  const int weight_only_max = blocked ? kFp8BlockWeightOnlyMaxRows : kFp8WeightOnlyMaxRows;
  if (p.m <= weight_only_max || sm_version(ctx) < 89) return Taken::kWeightOnly;
  if (tensor_core_runs(ctx, p, scaled)) return Taken::kScaled;
  if (!blocked && tensor_core_runs(ctx, p, LtMode::kUnscaled)) return Taken::kUnscaled;
  return Taken::kWeightOnly;
}

}  // namespace

bool fp8_linear_quantizes_x(GemmContext* ctx, const Fp8LinearParams& p) {
  if (!ctx || p.m <= 0 || p.n <= 0 || p.k <= 0 || p.k % 16 != 0 || p.dtype == DType::kF32)
    return false;
  switch (path_for(ctx, p)) {
    case Taken::kScaled:
      return tensor_core_runs(ctx, p, p.w_block ? LtMode::kBlock : LtMode::kScaled);
    case Taken::kUnscaled:
      return tensor_core_runs(ctx, p, LtMode::kUnscaled);
    default:
      return false;
  }
}

cudaError_t fp8_linear(GemmContext* ctx, const Fp8LinearParams& p, cudaStream_t stream) {
  if (!ctx || p.m < 0 || p.n <= 0 || p.k <= 0 || p.k % 16 != 0) return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  if (!p.wq || !p.w_scale || !p.y || !aligned16(p.wq)) return cudaErrorInvalidValue;
  if (!p.x_quantized && (!p.x || !aligned16(p.x))) return cudaErrorInvalidValue;
  if (p.w_block != 0 && (p.w_block != kFp8Block || p.k % kFp8Block != 0))
    return cudaErrorInvalidValue;
  if (p.dtype == DType::kF32) return cudaErrorNotSupported;
  const LtMode scaled = p.w_block != 0 ? LtMode::kBlock : LtMode::kScaled;
  switch (path_for(ctx, p)) {
    case Taken::kScaled:
      return run_tensor_core(ctx, p, scaled, stream);
    case Taken::kUnscaled:
      return run_tensor_core(ctx, p, LtMode::kUnscaled, stream);
    case Taken::kNone:
      return cudaErrorNotSupported;
    case Taken::kWeightOnly:
      break;
  }
  // The weight-only kernels read the 16-bit x: a pre-quantized x alone cannot take them.
  if (p.x_quantized) return cudaErrorInvalidValue;
  return fp8_weight_only(p, 0, stream);
}

cudaError_t fp8_linear_silu_and_mul(GemmContext* ctx, const Fp8LinearParams& p,
                                    cudaStream_t stream) {
  if (!ctx || p.m < 0 || p.n <= 0 || p.n % 2 != 0 || p.k <= 0 || p.k % 16 != 0)
    return cudaErrorInvalidValue;
  if (p.m == 0) return cudaSuccess;
  // Only where fp8_linear itself would take the default weight-only kernel (variant 1).
  if (p.x_quantized || p.dtype == DType::kF32 || path_for(ctx, p) != Taken::kWeightOnly ||
      !fp8_weight_only_takes_default(p))
    return cudaErrorNotSupported;
  return fp8_weight_only_silu_and_mul(p, stream);
}

}  // namespace pagellm::cuda
