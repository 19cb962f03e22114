// RMSNorm, optionally fused with the residual add that precedes it in every Llama-family layer.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_act_quant.cuh"

namespace pagellm::cuda {
namespace {

// The normed value of one element: transformers computes weight * (x * inv).to(dtype), two
// roundings in bf16/f16.
// Gemma (unit_offset): x * inv * (1 + w) in fp32, one rounding.
template <typename T>
__device__ __forceinline__ float normed(float x, float w, float inv, bool unit_offset) {
  return unit_offset ? round_to<T>(x * inv * (1.f + w)) : round_to<T>(w * round_to<T>(x * inv));
}

// A row that one round of the block covers (decode: hidden <= 4 * 1024): x, the residual and the
// weight are loaded together and kept in registers, so the row costs one memory round trip instead
// of two (the same operations as the two-pass loop below, so the same bits).
template <typename T, int VEC, bool kFp8>
__device__ __forceinline__ void norm_row_in_registers(const RmsNormParams& p, const T* x, T* res,
                                                      T* out, const T* w, float* scratch) {
  const int i = threadIdx.x * VEC;
  const bool active = i < p.hidden;
  float v[VEC], wv[VEC];
  float sumsq = 0.f;
  if (active) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      v[j] = to_float(x[i + j]);
      wv[j] = to_float(w[i + j]);
    }
    if (res) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        v[j] = round_to<T>(v[j] + to_float(res[i + j]));
        res[i + j] = from_float<T>(v[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) sumsq += v[j] * v[j];
  }
  const float inv = rsqrtf(block_sum(sumsq, scratch) / p.hidden + p.eps);
  float o[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) o[j] = active ? normed<T>(v[j], wv[j], inv, p.unit_offset) : 0.f;
  if (active && out) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[i + j] = from_float<T>(o[j]);
  }
  if constexpr (kFp8) {
    const float s = p.fp8.group ? 0.f : fp8_act_scale(block_max(abs_max(o), scratch));
    if (threadIdx.x == 0 && !p.fp8.group) p.fp8.scale[blockIdx.x] = s;
    quantize_to_fp8_out(p.fp8, blockIdx.x, p.num_rows, p.hidden, i, o, s, active);
  }
}

// Rows of more than one round: the sum of squares, then the normed row (and, per-row FP8, its
// amax), then with a per-row FP8 copy a third pass that quantizes it. Each thread owns the same
// VEC-wide slices in every pass, so `out` may alias `x` and later passes re-read only this
// thread's own writes.
template <typename T, int VEC, bool kFp8>
__device__ __forceinline__ void norm_row_in_passes(const RmsNormParams& p, const T* x, T* res,
                                                   T* out, const T* w, float* scratch) {
  float sumsq = 0.f;
  for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
    float v[VEC];
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[j] = to_float(x[i + j]);
    if (res) {
      // The residual stream is stored in the model dtype, so the sum is rounded before use.
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        v[j] = round_to<T>(v[j] + to_float(res[i + j]));
        res[i + j] = from_float<T>(v[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) sumsq += v[j] * v[j];
  }
  const float inv = rsqrtf(block_sum(sumsq, scratch) / p.hidden + p.eps);
  const T* src = res ? res : x;
  auto normed_slice = [&](int i, float(&o)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o[j] = normed<T>(to_float(src[i + j]), to_float(w[i + j]), inv, p.unit_offset);
  };
  float amax = 0.f;
  // With 128-column groups, hidden % 128 == 0: a warp's 128 columns are all in or all out.
  for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
    float o[VEC];
    normed_slice(i, o);
    if (out) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) out[i + j] = from_float<T>(o[j]);
    }
    if constexpr (kFp8) {
      if (p.fp8.group)
        quantize_to_fp8_out(p.fp8, blockIdx.x, p.num_rows, p.hidden, i, o, 0.f, true);
      amax = abs_max(o, amax);
    }
  }
  if constexpr (kFp8) {
    if (p.fp8.group) return;
    const float s = fp8_act_scale(block_max(amax, scratch));
    if (threadIdx.x == 0) p.fp8.scale[blockIdx.x] = s;
    for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
      float o[VEC];
      normed_slice(i, o);
      quantize_to_fp8_out(p.fp8, blockIdx.x, p.num_rows, p.hidden, i, o, s, true);
    }
  }
}

// One block per row.
template <typename T, int VEC, bool kFp8>
__global__ void __launch_bounds__(1024) rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t offset = p.rows_per_group > 0
                             ? (blockIdx.x / p.rows_per_group) * p.group_stride +
                                   int64_t(blockIdx.x % p.rows_per_group) * p.hidden
                             : int64_t(blockIdx.x) * p.hidden;
  const T* x = static_cast<const T*>(p.x) + offset;                      // [hidden]
  T* res = p.residual ? static_cast<T*>(p.residual) + offset : nullptr;  // [hidden]
  T* out = p.out ? static_cast<T*>(p.out) + offset : nullptr;            // [hidden]
  const bool second = p.second_weight && p.rows_per_group > 0 &&
                      int(blockIdx.x % p.rows_per_group) >= p.second_rows_from;
  const T* w = static_cast<const T*>(second ? p.second_weight : p.weight);  // [hidden]
  if (p.hidden <= int(blockDim.x) * VEC)  // block-uniform: the row fits one round
    norm_row_in_registers<T, VEC, kFp8>(p, x, res, out, w, scratch);
  else
    norm_row_in_passes<T, VEC, kFp8>(p, x, res, out, w, scratch);
}

bool fp8_out_valid(const RmsNormParams& p) {
  const Fp8Out& q = p.fp8;
  return p.dtype != DType::kF32 && p.rows_per_group == 0 && p.hidden % 16 == 0 && q.scale &&
         aligned16(q.q) && (q.group == 0 || (q.group == kFp8Block && p.hidden % kFp8Block == 0));
}

}  // namespace

cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.hidden <= 0) return cudaErrorInvalidValue;
  if (p.num_rows == 0) return cudaSuccess;
  if (!p.x || !p.weight || (!p.out && !p.fp8.on())) return cudaErrorInvalidValue;
  if (p.second_weight && (p.rows_per_group <= 0 || p.second_rows_from < 0))
    return cudaErrorInvalidValue;
  if (p.fp8.on() && !fp8_out_valid(p)) return cudaErrorInvalidValue;
  // Small rows (per-head norms) get small blocks; the VEC=4 path needs hidden % 4 == 0.
  const int vec = p.hidden % 4 == 0 ? 4 : 1;
  const int threads = std::clamp((p.hidden / vec + 31) / 32 * 32, 32, 1024);
  if (p.fp8.on())  // 16-bit rows (fp8_out_valid)
    return p.dtype == DType::kBF16
               ? launch_kernel(rms_norm_kernel<__nv_bfloat16, 4, true>, p.num_rows, threads, 0,
                               stream, p)
               : launch_kernel(rms_norm_kernel<__half, 4, true>, p.num_rows, threads, 0, stream, p);
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    return launch_kernel(
        vec == 4 ? rms_norm_kernel<scalar_t, 4, false> : rms_norm_kernel<scalar_t, 1, false>,
        p.num_rows, threads, 0, stream, p);
  });
}

}  // namespace pagellm::cuda
