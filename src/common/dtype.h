// Element types of weights and activations, and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace pagellm {

// kF8E4M3 / kF8E5M2 are storage types only (FP8 checkpoints' weights, FP8 KV caches): never the
// dtype of activations or of a runner. The integer types are checkpoint storage only (packed INT4 /
// INT8 weights, zero points, g_idx, shapes): the quantization loaders read them, nothing converts
// them to floats.
enum class DType { kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kI8, kU8, kI32, kI64 };

std::string_view dtype_name(DType dtype);
// Inline so that the CUDA kernels library, which does not link pagellm's core, can use it.
constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kI8:
    case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 1;
}
// Parses a safetensors dtype tag ("F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I8", "U8", "I32",
// "I64"); nullopt for anything else.
std::optional<DType> dtype_from_safetensors(std::string_view tag);
// Parses a config.json torch_dtype / --dtype value ("float32", "bfloat16", "half", ...).
std::optional<DType> dtype_from_torch_name(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round-to-nearest-even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// True for the FP8 storage types.
inline bool is_fp8(DType dtype) { return dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2; }
// True for the integer storage types.
inline bool is_integer(DType dtype) {
  return dtype == DType::kI8 || dtype == DType::kU8 || dtype == DType::kI32 || dtype == DType::kI64;
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts `count` elements of `dtype` at `src` to fp32. `dtype` must not be an integer type
// (callers check: an integer tensor where a float one belongs is a checkpoint error).
void convert_to_f32(DType dtype, const void* src, float* dst, size_t count);

}  // namespace pagellm
