// Mixture-of-experts kernels: routing, per-slot expert projections, the weighted sum (moe.h).
#include <algorithm>
#include <cmath>

#include "backends/cuda/common.cuh"
#include "backends/cuda/moe.h"

namespace pagellm::cuda {
namespace {

constexpr int kRouteThreads = 256;
constexpr int kLinearThreads = 256;  // 8 warps: one output row each
constexpr int kCombineThreads = 256;

// (value, id) of the larger value, the lower id on ties.
__device__ __forceinline__ void keep_best(float& v, int& id, float ov, int oid) {
  if (ov > v || (ov == v && oid < id)) v = ov, id = oid;
}

// The block's best (value, id); every thread gets it. scratch_v / scratch_i: 32 entries each.
__device__ __forceinline__ void block_best(float& v, int& id, float* scratch_v, int* scratch_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    keep_best(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
  __syncthreads();  // the scratch may still be read by a previous call
  if (lane == 0) scratch_v[warp] = v, scratch_i[warp] = id;
  __syncthreads();
  const int num_warps = (blockDim.x + 31) >> 5;
  v = lane < num_warps ? scratch_v[lane] : -INFINITY;
  id = lane < num_warps ? scratch_i[lane] : INT32_MAX;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    keep_best(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
}

// One block per token: softmax over the experts in fp32, then top_k rounds of a block argmax.
template <typename T>
__global__ void moe_route_kernel(const __grid_constant__ MoeRouteParams p) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float probs[kMoeMaxExperts];
  __shared__ float top_v[kMoeMaxTopK];
  __shared__ int top_i[kMoeMaxTopK];
  __shared__ float scratch_v[32];
  __shared__ int scratch_i[32];
  const int t = blockIdx.x, E = p.num_experts;
  const T* logits = static_cast<const T*>(p.logits) + size_t(t) * E;  // [E]
  float best = -INFINITY;
  int best_id = INT32_MAX;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    probs[e] = to_float(logits[e]);
    keep_best(best, best_id, probs[e], e);
  }
  block_best(best, best_id, scratch_v, scratch_i);
  const float max = best;
  float sum = 0.f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) sum += expf(probs[e] - max);
  sum = block_sum(sum, scratch_v);
  for (int e = threadIdx.x; e < E; e += blockDim.x) probs[e] = expf(probs[e] - max) / sum;
  __syncthreads();
  for (int j = 0; j < p.top_k; ++j) {
    float v = -INFINITY;
    int id = INT32_MAX;
    for (int e = threadIdx.x; e < E; e += blockDim.x) keep_best(v, id, probs[e], e);
    block_best(v, id, scratch_v, scratch_i);
    if (threadIdx.x == 0) {
      if (id >= E) v = 0.f, id = j;  // NaN logits (a broken checkpoint): any valid expert
      top_v[j] = v, top_i[j] = id;
      probs[id] = -1.f;  // taken (probabilities are >= 0)
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float kept = 0.f;
  for (int j = 0; j < p.top_k; ++j) kept += top_v[j];
  for (int j = 0; j < p.top_k; ++j) {
    p.ids[t * p.top_k + j] = top_i[j];
    p.weights[t * p.top_k + j] = round_to<T>(p.renormalize ? top_v[j] / kept : top_v[j]);
  }
}

// grid (slots, row blocks): warp w of a block computes output row blockIdx.y * 8 + w of slot
// blockIdx.x, a dot product over in_features in VEC-element (16-byte) loads.
template <typename T, int VEC>
__global__ void moe_linear_kernel(const __grid_constant__ MoeLinearParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int s = blockIdx.x, lane = threadIdx.x & 31;
  const int row = blockIdx.y * (kLinearThreads / 32) + (threadIdx.x >> 5);
  if (row >= p.out_features) return;  // the whole warp
  const T* w = static_cast<const T*>(p.w) +
               (size_t(p.ids[s]) * p.out_features + row) * p.in_features;  // [in_features]
  const T* x = static_cast<const T*>(p.x) + size_t(s / p.x_row_div) * p.in_features;
  float acc = 0.f;
  for (int i = lane * VEC; i < p.in_features; i += 32 * VEC) {
    float a[VEC], b[VEC];
    if constexpr (VEC > 1) {
      load16(w + i, a);
      load16(x + i, b);
    } else {
      a[0] = to_float(w[i]);
      b[0] = to_float(x[i]);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) acc = fmaf(a[k], b[k], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) static_cast<T*>(p.y)[size_t(s) * p.out_features + row] = from_float<T>(acc);
}

// grid (tokens, column chunks).
template <typename T>
__global__ void moe_combine_kernel(const __grid_constant__ MoeCombineParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int t = blockIdx.x;
  const T* y = static_cast<const T*>(p.y) + size_t(t) * p.top_k * p.hidden;  // [top_k, hidden]
  const float* w = p.weights + size_t(t) * p.top_k;
  T* out = static_cast<T*>(p.out) + size_t(t) * p.hidden;
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < p.hidden; i += gridDim.y * blockDim.x) {
    float acc = 0.f;
    for (int j = 0; j < p.top_k; ++j) acc = fmaf(w[j], to_float(y[size_t(j) * p.hidden + i]), acc);
    out[i] = from_float<T>(acc);
  }
}

template <typename T>
cudaError_t launch_moe_linear(const MoeLinearParams& p, cudaStream_t stream) {
  constexpr int kVec = Vec16<T>::kSize;
  const bool vec = p.in_features % kVec == 0 && aligned16(p.x) && aligned16(p.w);
  const dim3 grid(p.num_slots, (p.out_features + kLinearThreads / 32 - 1) / (kLinearThreads / 32));
  return launch_kernel(vec ? moe_linear_kernel<T, kVec> : moe_linear_kernel<T, 1>, grid,
                       kLinearThreads, 0, stream, p);
}

}  // namespace

cudaError_t moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_experts < 1 || p.num_experts > kMoeMaxExperts || p.top_k < 1 ||
      p.top_k > std::min(p.num_experts, kMoeMaxTopK))
    return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.logits || !p.ids || !p.weights) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    return launch_kernel(moe_route_kernel<scalar_t>, p.num_tokens, kRouteThreads, 0, stream, p);
  });
}

cudaError_t moe_linear(const MoeLinearParams& p, cudaStream_t stream) {
  if (p.num_slots < 0 || p.out_features < 1 || p.in_features < 1 || p.x_row_div < 1 ||
      p.out_features > 65535 * (kLinearThreads / 32))
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
