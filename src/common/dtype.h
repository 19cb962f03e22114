// Element types of weights and activations, and the scalar conversions between them.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace pagellm {

enum class DType { kF32, kF16, kBF16 };

std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);
// Parses a safetensors dtype tag ("F32", "F16", "BF16"); nullopt for anything else.
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

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts `count` elements of `dtype` at `src` to fp32.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t count);

}  // namespace pagellm
