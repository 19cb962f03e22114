// Device helpers shared by pagellm's CUDA kernels: element conversions, 16-byte vector access, warp
// reductions and the dtype dispatch used by every host launcher.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}

// Rounds v to T's precision and back: the place where Hugging Face stores an intermediate in the
// model dtype.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

// The gated MLP's activation on a gate and an up value already stored in T, as transformers
// computes it: silu(gate) rounded to T, times up (the caller rounds the product when storing it).
template <typename T>
__device__ __forceinline__ float silu_mul(float gate, float up) {
  return round_to<T>(gate / (1.f + expf(-gate))) * up;
}

// 16 bytes of T, loaded or stored in one instruction.
template <typename T>
struct Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  alignas(16) T v[kSize];
};

template <typename T>
__device__ __forceinline__ void load16(const T* src, float (&out)[16 / sizeof(T)]) {
  Vec16<T> tmp = *reinterpret_cast<const Vec16<T>*>(src);
#pragma unroll
  for (int i = 0; i < Vec16<T>::kSize; ++i) out[i] = to_float(tmp.v[i]);
}

template <typename T>
__device__ __forceinline__ void store16(T* dst, const float (&in)[16 / sizeof(T)]) {
  Vec16<T> tmp;
#pragma unroll
  for (int i = 0; i < Vec16<T>::kSize; ++i) tmp.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Vec16<T>*>(dst) = tmp;
}

// VEC elements of T: one 16-byte access when VEC * sizeof(T) == 16 (the address aligned to it),
// else one access per element.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* src, float (&out)[VEC]) {
  if constexpr (VEC * sizeof(T) == 16) {
    load16(src, out);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = to_float(src[i]);
  }
}

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* dst, const float (&in)[VEC]) {
  if constexpr (VEC * sizeof(T) == 16) {
    store16(dst, in);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) dst[i] = from_float<T>(in[i]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of at most 1024 threads; every thread gets the total. `scratch`: 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = (blockDim.x + 31) >> 5;
  float total = lane < num_warps ? scratch[lane] : 0.f;
  return warp_sum(total);
}

// Max over a block of at most 1024 threads; every thread gets the result. `scratch`: 32 floats.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int num_warps = (blockDim.x + 31) >> 5;
  return warp_max(lane < num_warps ? scratch[lane] : 0.f);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline cudaError_t launch_status() { return cudaGetLastError(); }

// ---- Programmatic dependent launch (sm_90+) ---------------------------------------------------
// Kernels started through launch_kernel() may begin while the kernel before them on the stream is
// still running: their blocks get onto free SMs early and do the work that does not depend on it
// (index math, and for the weight-streaming GEMVs the first weight loads, so HBM stays busy across
// the gap between kernels). Every such kernel calls pdl_wait() in every block before it reads what
// an earlier kernel wrote or writes anything an earlier kernel reads; pdl_wait() returns once the
// previous kernel has finished and its writes are visible (and so, transitively, every earlier
// one). pdl_launch_dependents() lets the next kernel start launching. Both are no-ops on older GPUs
// and in kernels launched the ordinary way. Short kernels call it first thing; the weight-streaming
// GEMVs and the decode attention call it late, once their last loads are in flight: the next
// kernel's early blocks then overlap only their drain, instead of competing with their whole
// stream for HBM and holding SM slots idle (docs/PERF.md, "late trigger").
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Raises Kernel's dynamic shared-memory limit to `bytes` on the current device, once per device:
// the limit is a per-device setting, and tensor / pipeline parallelism drives several devices from
// one process (a process-wide "once" left every device but the first at 48 KB, and their launches
// failed). A host-side call, safe during graph capture.
template <auto Kernel>
cudaError_t allow_dynamic_smem(int bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: set on device d (devices 0-63; others every time)
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit && (done.load(std::memory_order_acquire) & bit)) return cudaSuccess;
  err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && bit) done.fetch_or(bit, std::memory_order_release);
  return err;
}

// kernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent launch when
// programmatic_launch() is on (kernels.h).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace pagellm::cuda

// Calls BODY with `scalar_t` bound to the device type of `dtype`.
#define PAGELLM_DISPATCH_DTYPE(dtype, ...) \
  [&]() -> cudaError_t {                   \
    switch (dtype) {                       \
      case ::pagellm::DType::kF32: {       \
        using scalar_t = float;            \
        return __VA_ARGS__();              \
      }                                    \
      case ::pagellm::DType::kF16: {       \
        using scalar_t = __half;           \
        return __VA_ARGS__();              \
      }                                    \
      case ::pagellm::DType::kBF16: {      \
        using scalar_t = __nv_bfloat16;    \
        return __VA_ARGS__();              \
      }                                    \
      default: /* FP8: storage only */     \
        break;                             \
    }                                      \
    return cudaErrorNotSupported;          \
  }()
