// Mixture-of-experts kernels: routing, per-slot expert projections, the weighted sum (moe.h).
#include <algorithm>
#include <cmath>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"
#include "backends/cuda/moe.h"

namespace pagellm::cuda {
namespace {

constexpr int kRouteThreads = 128;   // 4 tokens per block, one warp each
constexpr int kLinearThreads = 256;  // 8 warps: one output row each
constexpr int kCombineThreads = 256;

// (value, id) of the larger value, the lower id on ties.
__device__ __forceinline__ void keep_best(float& v, int& id, float ov, int oid) {
  if (ov > v || (ov == v && oid < id)) v = ov, id = oid;
}

// One warp per token; lane l holds experts l, l + 32, ... (PER_LANE of them) in registers: the
// softmax in fp32, then top_k rounds of a warp argmax (shuffles only). Lane 0 writes the raw
// probabilities, then lanes j < top_k rescale slot j.
template <typename T, int PER_LANE>
__global__ void moe_route_kernel(const __grid_constant__ MoeRouteParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * (kRouteThreads / 32) + (threadIdx.x >> 5);
  if (t >= p.num_tokens) return;  // the whole warp
  const int E = p.num_experts;
  const T* logits = static_cast<const T*>(p.logits) + size_t(t) * E;  // [E]
  float v[PER_LANE];
  float max = -INFINITY;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    const int e = lane + 32 * i;
    v[i] = e < E ? to_float(logits[e]) : -INFINITY;
    max = fmaxf(max, v[i]);
  }
  max = warp_max(max);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    v[i] = lane + 32 * i < E ? expf(v[i] - max) : -1.f;  // -1: never picked
    sum += fmaxf(v[i], 0.f);
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) v[i] = v[i] >= 0.f ? v[i] / sum : -1.f;
  int32_t* ids = p.ids + size_t(t) * p.top_k;
  float* weights = p.weights + size_t(t) * p.top_k;
  float kept = 0.f;
  for (int j = 0; j < p.top_k; ++j) {
    float best = -INFINITY;
    int id = INT32_MAX;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) keep_best(best, id, v[i], lane + 32 * i);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      keep_best(best, id, __shfl_xor_sync(0xffffffffu, best, o),
                __shfl_xor_sync(0xffffffffu, id, o));
    if (!(best >= 0.f) || id >= E) best = 0.f, id = j;  // NaN logits (a broken checkpoint)
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i)
      if (lane + 32 * i == id) v[i] = -1.f;  // taken
    kept += best;
    if (lane == 0) ids[j] = id, weights[j] = best;
  }
  __syncwarp();
  for (int j = lane; j < p.top_k; j += 32)
    weights[j] = round_to<T>(p.renormalize ? weights[j] / kept : weights[j]);
}

// Adds row · x over in_features to acc, in VEC-element (16-byte) loads by the lanes of a warp.
template <typename T, int VEC>
__device__ __forceinline__ float row_dot(const T* row, const T* x, int in_features, int lane) {
  float acc = 0.f;
#pragma unroll 4
  for (int i = lane * VEC; i < in_features; i += 32 * VEC) {
    float a[VEC], b[VEC];
    if constexpr (VEC > 1) {
      load16(row + i, a);
      load16(x + i, b);
    } else {
      a[0] = to_float(row[i]);
      b[0] = to_float(x[i]);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc = fmaf(a[k], b[k], acc);
  }
  return warp_sum(acc);
}

// The same for a row of FP8 codes (in_features % 16 == 0): 16 codes and 16 activations a lane
// per round, the row's scale applied to the sum.
template <typename T>
__device__ __forceinline__ float fp8_row_dot(const uint8_t* row, float scale, const T* x,
                                             int in_features, int lane) {
  float acc = 0.f;
#pragma unroll 2
  for (int i = lane * 16; i < in_features; i += 32 * 16) {
    float a[2][8], b[2][8];  // b: 16-bit activations, two 16-byte loads
    fp8x16_to_floats(__ldcs(reinterpret_cast<const uint4*>(row + i)), a);
    load16(x + i, b[0]);
    load16(x + i + 8, b[1]);
#pragma unroll
    for (int e = 0; e < 16; ++e) acc = fmaf(a[e / 8][e % 8], b[e / 8][e % 8], acc);
  }
  return warp_sum(acc) * scale;
}

// Row `row` of slot s's expert (FP8: with its scale) dotted with x.
template <typename T, int VEC, bool FP8>
__device__ __forceinline__ float expert_row_dot(const MoeLinearParams& p, size_t row, const T* x,
                                                int lane) {
  if constexpr (FP8) {
    return fp8_row_dot<T>(static_cast<const uint8_t*>(p.w) + row * p.in_features, p.w_scale[row], x,
                          p.in_features, lane);
  } else {
    return row_dot<T, VEC>(static_cast<const T*>(p.w) + row * p.in_features, x, p.in_features,
                           lane);
  }
}

// grid (slots, row blocks): warp w of a block computes output row blockIdx.y * 8 + w of slot
// blockIdx.x (GATED: the gate and up rows of that column, then the SiLU-and-mul). FP8: e4m3
// weights with per-row scales.
template <typename T, int VEC, bool GATED, bool FP8>
__global__ void moe_linear_kernel(const __grid_constant__ MoeLinearParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int s = blockIdx.x, lane = threadIdx.x & 31;
  const int row = blockIdx.y * (kLinearThreads / 32) + (threadIdx.x >> 5);
  if (row >= p.out_features) return;                           // the whole warp
  const size_t rows = size_t(GATED ? 2 : 1) * p.out_features;  // of one expert
  const size_t w_row = size_t(p.ids[s]) * rows + row;
  const T* x = static_cast<const T*>(p.x) + size_t(s / p.x_row_div) * p.in_features;
  float out = expert_row_dot<T, VEC, FP8>(p, w_row, x, lane);
  if constexpr (GATED) {
    const float g = round_to<T>(out);
    const float u = round_to<T>(expert_row_dot<T, VEC, FP8>(p, w_row + p.out_features, x, lane));
    out = round_to<T>(g / (1.f + expf(-g))) * u;
  }
  if (lane == 0) static_cast<T*>(p.y)[size_t(s) * p.out_features + row] = from_float<T>(out);
}

// grid (tokens, column chunks).
template <typename T>
__global__ void moe_combine_kernel(const __grid_constant__ MoeCombineParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int t = blockIdx.x;
  const T* y = static_cast<const T*>(p.y);
  const float* w = p.weights + size_t(t) * p.top_k;
  T* out = static_cast<T*>(p.out) + size_t(t) * p.hidden;
  const size_t slot0 = size_t(t) * p.top_k;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < p.hidden; i += gridDim.y * blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < p.top_k; ++j) {
      const size_t row = p.y_rows ? size_t(p.y_rows[slot0 + j]) : slot0 + j;
      acc = fmaf(w[j], to_float(y[row * p.hidden + i]), acc);
    }
    out[i] = from_float<T>(acc);
  }
}

template <typename T>
cudaError_t launch_moe_linear(const MoeLinearParams& p, cudaStream_t stream) {
  constexpr int kVec = Vec16<T>::kSize;
  const bool vec = p.in_features % kVec == 0 && aligned16(p.x) && aligned16(p.w);
  const dim3 grid(p.num_slots, (p.out_features + kLinearThreads / 32 - 1) / (kLinearThreads / 32));
  if constexpr (!std::is_same_v<T, float>) {
    if (p.w_scale)
      return launch_kernel(p.gated ? moe_linear_kernel<T, kVec, true, true>
                                   : moe_linear_kernel<T, kVec, false, true>,
                           grid, kLinearThreads, 0, stream, p);
  }
  auto kernel = vec ? (p.gated ? moe_linear_kernel<T, kVec, true, false>
                               : moe_linear_kernel<T, kVec, false, false>)
                    : (p.gated ? moe_linear_kernel<T, 1, true, false>
                               : moe_linear_kernel<T, 1, false, false>);
  return launch_kernel(kernel, grid, kLinearThreads, 0, stream, p);
}

}  // namespace

cudaError_t moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.top_k < 1 ||
      p.top_k > std::min(p.num_experts, kMoeMaxTopK))
    return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.logits || !p.ids || !p.weights) return cudaErrorInvalidValue;
  const int blocks = (p.num_tokens + kRouteThreads / 32 - 1) / (kRouteThreads / 32);
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    const int per_lane = (p.num_experts + 31) / 32;
    auto kernel = per_lane <= 1    ? moe_route_kernel<scalar_t, 1>
                  : per_lane <= 2  ? moe_route_kernel<scalar_t, 2>
                  : per_lane <= 4  ? moe_route_kernel<scalar_t, 4>
                  : per_lane <= 8  ? moe_route_kernel<scalar_t, 8>
                  : per_lane <= 16 ? moe_route_kernel<scalar_t, 16>
                                   : moe_route_kernel<scalar_t, 32>;
    return launch_kernel(kernel, blocks, kRouteThreads, 0, stream, p);
  });
}

cudaError_t moe_linear(const MoeLinearParams& p, cudaStream_t stream) {
  if (p.num_slots < 0 || p.out_features < 1 || p.in_features < 1 || p.x_row_div < 1 ||
      p.out_features > 65535 * (kLinearThreads / 32))
    return cudaErrorInvalidValue;
  if (p.w_scale &&
      (p.dtype == DType::kF32 || p.in_features % 16 != 0 || !aligned16(p.w) || !aligned16(p.x)))
    return cudaErrorInvalidValue;
  if (p.num_slots == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.ids || !p.y) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_moe_linear<scalar_t>(p, stream); });
}

cudaError_t moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.top_k < 1 || p.hidden < 1) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.y || !p.weights || !p.out) return cudaErrorInvalidValue;
  const int chunks = std::min((p.hidden + kCombineThreads - 1) / kCombineThreads, 65535);
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    return launch_kernel(moe_combine_kernel<scalar_t>, dim3(p.num_tokens, chunks), kCombineThreads,
                         0, stream, p);
  });
}

}  // namespace pagellm::cuda
