// The tensor-core multiply-accumulate shared by the weight-only GEMMs (gemm/fp8_weight_only_mma.cu,
// gemm/int_weight_only.cu, ...): mma.sync m16n8k16 with 16-bit A and B and fp32 accumulators; and
// the row mapping of the gated GEMVs.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pagellm::cuda {

// c += A (16x16, row) · B (16x8, col), fp32 accumulators; T = __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Weight row r of a group of R rows whose first output is row0, in a weight of n rows: rows row0 ..
// row0 + R - 1, or, gated (w = [gate; up], n = 2 x inner), gate rows row0 .. row0 + R/2 - 1 and
// the up rows inner + the same. Rows past the end re-read the last row (their sums are discarded).
template <int R, bool kGated>
__device__ __forceinline__ int weight_row(int n, int row0, int r) {
  if constexpr (!kGated) {
    return min(row0 + r, n - 1);
  } else {
    const int inner = n / 2;
    return min(row0 + r % (R / 2), inner - 1) + (r < R / 2 ? 0 : inner);
  }
}

}  // namespace pagellm::cuda
