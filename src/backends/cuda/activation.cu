// SiLU-and-mul, the gated activation of Llama-family MLPs (gelu-tanh-and-mul for Gemma), and the
// soft cap of Gemma 2's logits.
#include <algorithm>

#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kThreads = 256;

// gelu_tanh(gate) rounded to T, times up: transformers' gelu_pytorch_tanh with silu_mul's
// roundings.
template <typename T>
__device__ __forceinline__ float gelu_tanh_mul(float gate, float up) {
  const float inner = 0.7978845608028654f * (gate + 0.044715f * gate * gate * gate);
  return round_to<T>(0.5f * gate * (1.f + tanhf(inner))) * up;
}

// grid: (num_tokens, column chunks); VEC columns per thread (16 bytes when the row allows it), one
// round per thread where the grid covers the row. transformers computes silu(gate) in the model
// dtype and then multiplies, so both products are rounded to T.
template <typename T, int VEC>
__global__ void silu_and_mul_kernel(const __grid_constant__ SiluAndMulParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* gate = static_cast<const T*>(p.x) + t * 2 * p.inner;  // [inner]
  const T* up = gate + p.inner;                                  // [inner]
  T* out = static_cast<T*>(p.out) + t * p.inner;                 // [inner]
  for (int i = (blockIdx.y * blockDim.x + threadIdx.x) * VEC; i < p.inner;
       i += gridDim.y * blockDim.x * VEC) {
    float g[VEC], u[VEC], o[VEC];
    if constexpr (VEC > 1) {
      load16(gate + i, g);
      load16(up + i, u);
    } else {
      g[0] = to_float(gate[i]);
      u[0] = to_float(up[i]);
    }
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      o[e] = p.gelu_tanh ? gelu_tanh_mul<T>(g[e], u[e]) : silu_mul<T>(g[e], u[e]);
    if constexpr (VEC > 1) {
      store16(out + i, o);
    } else {
      out[i] = from_float<T>(o[0]);
    }
  }
}

template <typename T>
cudaError_t launch_silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  constexpr int kVec = Vec16<T>::kSize;
  const bool vec = p.inner % kVec == 0 && aligned16(p.x) && aligned16(p.out);
  const int per_block = kThreads * (vec ? kVec : 4);
  const dim3 grid(p.num_tokens, std::min((p.inner + per_block - 1) / per_block, 65535));
  return launch_kernel(vec ? silu_and_mul_kernel<T, kVec> : silu_and_mul_kernel<T, 1>, grid,
                       kThreads, 0, stream, p);
}

template <typename T>
__global__ void soft_cap_kernel(T* x, int64_t count, float cap) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = from_float<T>(cap * tanhf(to_float(x[i]) / cap));
}

}  // namespace

cudaError_t soft_cap(DType dtype, void* x, int64_t count, float cap, cudaStream_t stream) {
  if (count < 0 || !(cap > 0.f)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!x) return cudaErrorInvalidValue;
  const int blocks = int(std::min<int64_t>((count + kThreads - 1) / kThreads, 4096));
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    return launch_kernel(soft_cap_kernel<scalar_t>, blocks, kThreads, 0, stream,
                         static_cast<scalar_t*>(x), count, cap);
  });
}

cudaError_t silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.inner <= 0) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.x || !p.out) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_silu_and_mul<scalar_t>(p, stream); });
}

}  // namespace pagellm::cuda
