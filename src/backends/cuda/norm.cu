// RMSNorm, optionally fused with the residual add that precedes it in every Llama-family layer.
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

// A row that one round of the block covers (decode: hidden <= 4 * 1024): x, the residual and the
// weight are loaded together and kept in registers, so the row costs one memory round trip instead
// of two (the same operations as the two-pass loop below, so the same bits).
template <typename T, int VEC>
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
  if (!active) return;
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[i + j] = from_float<T>(wv[j] * round_to<T>(v[j] * inv));
}

// One block per row; each thread owns the same VEC-wide slices in both passes, so `out` may alias
// `x` and the second pass re-reads only this thread's own writes.
template <typename T, int VEC>
__global__ void rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t offset = p.rows_per_group > 0
                             ? (blockIdx.x / p.rows_per_group) * p.group_stride +
                                   int64_t(blockIdx.x % p.rows_per_group) * p.hidden
                             : int64_t(blockIdx.x) * p.hidden;
  const T* x = static_cast<const T*>(p.x) + offset;                      // [hidden]
  T* res = p.residual ? static_cast<T*>(p.residual) + offset : nullptr;  // [hidden]
  T* out = static_cast<T*>(p.out) + offset;                              // [hidden]
  const T* w = static_cast<const T*>(p.weight);                          // [hidden]

  if (p.hidden <= int(blockDim.x) * VEC) {  // block-uniform: the row fits one round
    norm_row_in_registers<T, VEC>(p, x, res, out, w, scratch);
    return;
  }
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
  for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      // transformers: weight * (x * inv).to(dtype) -- two roundings in bf16/f16.
      const float normed = round_to<T>(to_float(src[i + j]) * inv);
      out[i + j] = from_float<T>(to_float(w[i + j]) * normed);
    }
  }
}

}  // namespace

cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.hidden <= 0) return cudaErrorInvalidValue;
  if (p.num_rows == 0) return cudaSuccess;
  if (!p.x || !p.weight || !p.out) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    // Small rows (per-head norms) get small blocks; the VEC=4 path needs hidden % 4 == 0.
    const int vec = p.hidden % 4 == 0 ? 4 : 1;
    int threads = (p.hidden / vec + 31) / 32 * 32;
    threads = threads < 32 ? 32 : threads > 1024 ? 1024 : threads;
    return launch_kernel(vec == 4 ? rms_norm_kernel<scalar_t, 4> : rms_norm_kernel<scalar_t, 1>,
                         p.num_rows, threads, 0, stream, p);
  });
}

}  // namespace pagellm::cuda
