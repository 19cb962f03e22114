// SiLU-and-mul, the gated activation of Llama-family MLPs (gelu-tanh-and-mul for Gemma), with an
// optional FP8 copy of its output for the down projection, and the soft cap of Gemma 2's logits.
#include <algorithm>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_act_quant.cuh"

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

// The 8 outputs of columns [i, i + 8) of a row, rounded to T as silu_and_mul stores them.
template <typename T>
__device__ __forceinline__ void gated_products(const SiluAndMulParams& p, const T* gate,
                                               const T* up, int i, float (&o)[8]) {
  float g[8], u[8];
  load16(gate + i, g);
  load16(up + i, u);
#pragma unroll
  for (int e = 0; e < 8; ++e)
    o[e] = round_to<T>(p.gelu_tanh ? gelu_tanh_mul<T>(g[e], u[e]) : silu_mul<T>(g[e], u[e]));
}

// The FP8 copy with one scale per row: one 256-thread block per row, the row's products staged in
// shared memory as T (inner * sizeof(T) bytes), then the row's amax, then the codes. Each thread
// reads back only the slices it wrote, so the block barrier is the amax's alone; the staging keeps
// registers few, so several blocks share an SM and one block's barrier overlaps another's loads
// (the products held in registers instead ran at a third of the copy rate: docs/PERF.md). With
// out set the T rows are written too.
template <typename T>
__global__ void __launch_bounds__(kThreads, 6)
    silu_and_mul_fp8_rows_kernel(const __grid_constant__ SiluAndMulParams p) {
  extern __shared__ uint4 staged_words[];
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  T* staged = reinterpret_cast<T*>(staged_words);
  const int64_t t = blockIdx.x;
  const T* gate = static_cast<const T*>(p.x) + t * 2 * p.inner;
  const T* up = gate + p.inner;
  float amax = 0.f;
#pragma unroll 1
  for (int i = threadIdx.x * 8; i < p.inner; i += kThreads * 8) {
    float o[8];
    gated_products(p, gate, up, i, o);
    amax = abs_max(o, amax);
    store16(staged + i, o);
    if (p.out) store16(static_cast<T*>(p.out) + t * p.inner + i, o);
  }
  const float s = fp8_act_scale(block_max(amax, scratch));
  if (threadIdx.x == 0) p.fp8.scale[t] = s;
  const Fp8Divisor d = fp8_divisor(s);
  uint8_t* q = static_cast<uint8_t*>(p.fp8.q) + t * p.inner;
  for (int i = threadIdx.x * 8; i < p.inner; i += kThreads * 8) {
    float o[8];
    load16(staged + i, o);
    store_e4m3(q + i, o, d);
  }
}

// The FP8 copy with one scale per 128 columns: grid (num_tokens, column chunks), 8 columns per
// lane; the 16 lanes of a group agree on its amax by shuffles, so no block barrier. Every lane of
// a warp runs the same rounds (the shuffles take the whole warp).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    silu_and_mul_fp8_groups_kernel(const __grid_constant__ SiluAndMulParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* gate = static_cast<const T*>(p.x) + t * 2 * p.inner;
  const T* up = gate + p.inner;
  const int lane = threadIdx.x & 31;
  for (int base = (blockIdx.y * kThreads + (threadIdx.x & ~31)) * 8; base < p.inner;
       base += gridDim.y * kThreads * 8) {
    const int i = base + lane * 8;
    const bool valid = i < p.inner;
    float o[8] = {};
    if (valid) {
      gated_products(p, gate, up, i, o);
      if (p.out) store16(static_cast<T*>(p.out) + t * p.inner + i, o);
    }
    quantize_to_fp8_out(p.fp8, t, p.num_tokens, p.inner, i, o, 0.f, valid);
  }
}

// Rows of more than this many bytes of T take the two kernels (silu_and_mul refuses the FP8 copy).
constexpr int kMaxStagedBytes = 160 * 1024;

template <typename T>
cudaError_t launch_silu_and_mul_fp8(const SiluAndMulParams& p, cudaStream_t stream) {
  if (p.fp8.group == kFp8Block) {
    const dim3 grid(p.num_tokens, std::min((p.inner + kThreads * 8 - 1) / (kThreads * 8), 65535));
    return launch_kernel(silu_and_mul_fp8_groups_kernel<T>, grid, kThreads, 0, stream, p);
  }
  // Past 48 KB the launch needs the opt-in, which is per device: set with every such launch, as
  // the sampler does.
  const size_t staged = size_t(p.inner) * sizeof(T);
  if (staged > 48 * 1024) {
    const cudaError_t err = cudaFuncSetAttribute(
        silu_and_mul_fp8_rows_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(staged));
    if (err != cudaSuccess) return err;
  }
  return launch_kernel(silu_and_mul_fp8_rows_kernel<T>, dim3(p.num_tokens), kThreads, staged,
                       stream, p);
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

bool silu_and_mul_fp8_valid(const SiluAndMulParams& p) {
  const Fp8Out& q = p.fp8;
  if (p.dtype == DType::kF32 || p.inner <= 0 || p.inner % 16 != 0 || !q.scale || !aligned16(q.q) ||
      !aligned16(p.x) || (p.out && !aligned16(p.out)))
    return false;
  if (q.group == kFp8Block) return p.inner % kFp8Block == 0;
  return q.group == 0 && p.inner * 2 <= kMaxStagedBytes;
}

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
  if (!p.x || (!p.out && !p.fp8.on())) return cudaErrorInvalidValue;
  if (p.fp8.on()) {
    if (!silu_and_mul_fp8_valid(p)) return cudaErrorInvalidValue;
    if (p.dtype == DType::kBF16) return launch_silu_and_mul_fp8<__nv_bfloat16>(p, stream);
    return launch_silu_and_mul_fp8<__half>(p, stream);
  }
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_silu_and_mul<scalar_t>(p, stream); });
}

}  // namespace pagellm::cuda
