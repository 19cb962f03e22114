#include "common/dtype.h"

#include <cmath>

#include "common/error.h"
#include "common/fp8.h"

namespace pagellm {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kF8E5M2: return "float8_e5m2";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view tag) {
  if (tag == "F32") return DType::kF32;
  if (tag == "F16") return DType::kF16;
  if (tag == "BF16") return DType::kBF16;
  if (tag == "F8_E4M3") return DType::kF8E4M3;
  if (tag == "F8_E5M2") return DType::kF8E5M2;
  if (tag == "I8") return DType::kI8;
  if (tag == "U8") return DType::kU8;
  if (tag == "I32") return DType::kI32;
  if (tag == "I64") return DType::kI64;
  return std::nullopt;
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  if (name == "float32" || name == "float" || name == "fp32") return DType::kF32;
  if (name == "float16" || name == "half" || name == "fp16") return DType::kF16;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow to inf (incl. rounding up)
  if (abs < 0x38800000u) {                       // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24 for this range
    uint32_t result = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t result = ((abs >> 23) - 112) << 10 | ((abs >> 13) & 0x3ffu);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

void convert_to_f32(DType dtype, const void* src, float* dst, size_t count) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kF8E4M3:
    case DType::kF8E5M2: {
      const auto* s = static_cast<const uint8_t*>(src);
      const Fp8Format f = dtype == DType::kF8E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
      for (size_t i = 0; i < count; ++i) dst[i] = fp8_to_f32(s[i], f);
      return;
    }
    case DType::kI8:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64:
      break;
  }
  throw_error(ErrorKind::kInternal,
              "convert_to_f32: " + std::string(dtype_name(dtype)) + " is not a float type");
}

}  // namespace pagellm
