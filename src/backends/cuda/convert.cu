// Element-type conversion of weights on the device (checkpoint dtype -> runner dtype), bit for bit
// the host conversions of common/dtype.h. The CUDA intrinsics are not used on purpose: they
// canonicalise NaNs (cvt.rn.bf16.f32 gives 0x7fff), where the host keeps the sign and payload bits,
// and a GPU-loaded model must equal a host-converted one exactly.
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

__device__ __forceinline__ uint32_t bf16_to_f32_bits(uint16_t h) { return uint32_t(h) << 16; }

// common/dtype.cpp f16_to_f32: exact, subnormals renormalised, NaN payload kept.
__device__ __forceinline__ uint32_t f16_to_f32_bits(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return sign;
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
  }
  if (exp == 31) return sign | 0x7f800000u | mant << 13;
  return sign | (exp + 127 - 15) << 23 | mant << 13;
}

// common/dtype.h f32_to_bf16: round to nearest even; a NaN keeps its top bits and is made quiet.
__device__ __forceinline__ uint16_t f32_bits_to_bf16(uint32_t bits) {
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// common/dtype.cpp f32_to_f16: round to nearest even, overflow to inf, f16 subnormals rounded too.
__device__ __forceinline__ uint16_t f32_bits_to_f16(uint32_t bits) {
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;
  if (abs >= 0x477ff000u) return sign | 0x7c00u;
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return sign;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(abs >> 23);  // 14..24 for this range
    uint32_t result = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (result & 1u))) ++result;
    return sign | uint16_t(result);
  }
  uint32_t result = ((abs >> 23) - 112) << 10 | ((abs >> 13) & 0x3ffu);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return sign | uint16_t(result);
}

// common/fp8.h fp8_to_f32: exact (every e4m3 / e5m2 value is an f32 value).
template <DType kSrc>
__device__ __forceinline__ uint32_t fp8_to_f32_bits(uint8_t v) {
  constexpr int man_bits = kSrc == DType::kF8E4M3 ? 3 : 2;
  constexpr int bias = kSrc == DType::kF8E4M3 ? 7 : 15;
  constexpr int exp_mask = kSrc == DType::kF8E4M3 ? 0xf : 0x1f;
  const uint32_t sign = uint32_t(v & 0x80) << 24;
  const int e = (v >> man_bits) & exp_mask;
  const int m = v & ((1 << man_bits) - 1);
  if (kSrc == DType::kF8E4M3 && e == 0xf && m == 0x7) return sign | 0x7fc00000u;
  if (kSrc == DType::kF8E5M2 && e == 0x1f) return sign | 0x7f800000u | (m ? 0x400000u : 0u);
  float out = e == 0 ? ldexpf(float(m), 1 - bias - man_bits)
                     : ldexpf(float((1 << man_bits) | m), e - bias - man_bits);
  return sign | __float_as_uint(out);
}

// Raw words: uint32_t for f32, uint16_t for f16 / bf16. Every conversion goes through f32 bits.
template <DType kSrc>
__device__ __forceinline__ uint32_t load_as_f32(const void* src, int64_t i) {
  if constexpr (kSrc == DType::kF32) return static_cast<const uint32_t*>(src)[i];
  if constexpr (kSrc == DType::kBF16) return bf16_to_f32_bits(static_cast<const uint16_t*>(src)[i]);
  if constexpr (kSrc == DType::kF16) return f16_to_f32_bits(static_cast<const uint16_t*>(src)[i]);
  if constexpr (kSrc == DType::kF8E4M3 || kSrc == DType::kF8E5M2)
    return fp8_to_f32_bits<kSrc>(static_cast<const uint8_t*>(src)[i]);
  return 0;
}

template <DType kDst>
__device__ __forceinline__ void store_from_f32(void* dst, int64_t i, uint32_t bits) {
  if constexpr (kDst == DType::kF32) static_cast<uint32_t*>(dst)[i] = bits;
  if constexpr (kDst == DType::kBF16) static_cast<uint16_t*>(dst)[i] = f32_bits_to_bf16(bits);
  if constexpr (kDst == DType::kF16) static_cast<uint16_t*>(dst)[i] = f32_bits_to_f16(bits);
}

template <DType kSrc, DType kDst>
__global__ void convert_kernel(const void* __restrict__ src, void* __restrict__ dst,
                               int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    store_from_f32<kDst>(dst, i, load_as_f32<kSrc>(src, i));
}

template <DType kSrc>
cudaError_t launch_from(const void* src, DType dst_dtype, void* dst, int64_t count,
                        cudaStream_t stream) {
  const int threads = 256;
  const int64_t needed = (count + threads - 1) / threads;
  const int blocks = int(needed < 4096 ? needed : 4096);
  switch (dst_dtype) {
    case DType::kF32:
      convert_kernel<kSrc, DType::kF32><<<blocks, threads, 0, stream>>>(src, dst, count);
      break;
    case DType::kF16:
      convert_kernel<kSrc, DType::kF16><<<blocks, threads, 0, stream>>>(src, dst, count);
      break;
    case DType::kBF16:
      convert_kernel<kSrc, DType::kBF16><<<blocks, threads, 0, stream>>>(src, dst, count);
      break;
    default:  // FP8 destinations are written by the quantization kernels (gemm/fp8_gemm.h)
      return cudaErrorNotSupported;
  }
  return launch_status();
}

bool aligned_to(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

cudaError_t convert_dtype(DType src_dtype, const void* src, DType dst_dtype, void* dst,
                          int64_t count, cudaStream_t stream) {
  if (count < 0 || (count > 0 && (!src || !dst))) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (!aligned_to(src, dtype_size(src_dtype)) || !aligned_to(dst, dtype_size(dst_dtype)))
    return cudaErrorInvalidValue;
  if (src_dtype == dst_dtype)  // bits unchanged (also NaN payloads), as a host copy would be
    return cudaMemcpyAsync(dst, src, size_t(count) * dtype_size(src_dtype),
                           cudaMemcpyDeviceToDevice, stream);
  switch (src_dtype) {
    case DType::kF32:
      return launch_from<DType::kF32>(src, dst_dtype, dst, count, stream);
    case DType::kF16:
      return launch_from<DType::kF16>(src, dst_dtype, dst, count, stream);
    case DType::kBF16:
      return launch_from<DType::kBF16>(src, dst_dtype, dst, count, stream);
    case DType::kF8E4M3:
      return launch_from<DType::kF8E4M3>(src, dst_dtype, dst, count, stream);
    case DType::kF8E5M2:
      return launch_from<DType::kF8E5M2>(src, dst_dtype, dst, count, stream);
    default:  // integer storage types (INT4/INT8 checkpoints) are never converted
      break;
  }
  return cudaErrorNotSupported;
}

}  // namespace pagellm::cuda
