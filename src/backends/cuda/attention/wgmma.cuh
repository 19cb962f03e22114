// Hopper warpgroup MMA (wgmma, sm_90a) building blocks of the prefill tile kernel (tile_sm90.cuh)
// and the INT4 weight-only kernel for decode batches (gemm/int_weight_wgmma.cu):
// the shared-memory matrix descriptor for 128-byte-swizzled tiles, the m64nNk16 MMAs with A in
// registers, and the fences and waits around them. Only meaningful in code compiled for sm_90a;
// callers guard their use with PAGELLM_WGMMA_AVAILABLE.
//
// Tile layout (what the descriptors describe): a [rows, D] tile of 16-bit elements is stored as
// D / 64 column blocks of [rows, 64] (128 bytes per row), each 1024-byte aligned, with the 16-byte
// chunk c of row r at chunk position c ^ (r & 7): the hardware's 128-byte swizzle, which also keeps
// ldmatrix and cp.async free of bank conflicts.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAGELLM_WGMMA_AVAILABLE 1
#else
#define PAGELLM_WGMMA_AVAILABLE 0
#endif

namespace pagellm::cuda::attention::wgmma {

// Byte offset of 16-byte chunk `chunk` (0 .. D/8-1) of row `row` in a [rows, D] tile laid out as
// above.
template <int kRows>
__device__ __forceinline__ int sw128_offset(int row, int chunk) {
  return (chunk >> 3) * (kRows * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4);
}

// Shared-memory matrix descriptor of a 128-byte-swizzled operand starting at shared address
// `addr`. K-major operands (the reduction dimension contiguous, 8-row groups 1024 bytes apart):
// lbo is unused. MN-major operands: lbo = bytes between 64-element column blocks, sbo = bytes
// between groups of 8 reduction rows.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t{1} << 62);
}

#if PAGELLM_WGMMA_AVAILABLE
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared-memory writes of the generic proxy (cp.async, st.shared) made visible to wgmma's reads.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Pins accumulator registers at this point of the program: the compiler may neither read them
// before an earlier wait() nor move writes past a later MMA.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[i][e])::"memory");
}

#define PAGELLM_WGMMA_M64N8K16(TYPE)                               \
  asm volatile(                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"                  \
      "wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE   \
      " {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, %10;\n}\n"      \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]) \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

#define PAGELLM_WGMMA_M64N16K16(TYPE)                                                             \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE                                 \
      " {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, %14;\n}\n"                      \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3])                                                              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

#define PAGELLM_WGMMA_M64N32K16(TYPE)                                                             \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE                                 \
      " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15},"                                 \
      " {%16,%17,%18,%19}, %20, p, 1, 1, %22;\n}\n"                                               \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])                                \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

#define PAGELLM_WGMMA_M64N64K16(TYPE)                                                             \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                 \
      " {"                                                                                        \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                    \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"                           \
      "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"                                             \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
        "+f"(d[7][2]), "+f"(d[7][3])                                                              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

#define PAGELLM_WGMMA_M64N128K16(TYPE)                                                            \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                \
      " {"                                                                                        \
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"                                    \
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"                          \
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"                          \
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"                           \
      "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"                                             \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
        "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
        "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]),               \
        "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]),           \
        "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]),           \
        "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]),           \
        "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]),           \
        "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])                                            \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB))

// d = a · b (accumulate == 0) or d += a · b for one m64nNk16 step of the warpgroup, N the
// accumulator's 8-column tiles (wgmma n = 8 N): a [64, 16] in registers (each warp's 16 rows in
// mma.sync's m16n8k16 A layout), b [16, 8 N] in shared memory (desc_b; kTransB = 1 for an
// MN-major b), d in the m16n8 accumulator layout per 8 columns.
#define PAGELLM_WGMMA_M64K16(TYPE)  \
  if constexpr (N == 1) {           \
    PAGELLM_WGMMA_M64N8K16(TYPE);   \
  } else if constexpr (N == 2) {    \
    PAGELLM_WGMMA_M64N16K16(TYPE);  \
  } else if constexpr (N == 4) {    \
    PAGELLM_WGMMA_M64N32K16(TYPE);  \
  } else if constexpr (N == 8) {    \
    PAGELLM_WGMMA_M64N64K16(TYPE);  \
  } else {                          \
    PAGELLM_WGMMA_M64N128K16(TYPE); \
  }
template <typename T, int kTransB, int N>
__device__ __forceinline__ void mma_m64k16(float (&d)[N][4], const uint32_t (&a)[4],
                                           uint64_t desc_b, int accumulate) {
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16,
                "wgmma tiles of 8, 16, 32, 64 or 128 columns");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    PAGELLM_WGMMA_M64K16("bf16")
  } else {
    PAGELLM_WGMMA_M64K16("f16")
  }
}
#undef PAGELLM_WGMMA_M64K16
#undef PAGELLM_WGMMA_M64N8K16
#undef PAGELLM_WGMMA_M64N16K16
#undef PAGELLM_WGMMA_M64N32K16
#undef PAGELLM_WGMMA_M64N64K16
#undef PAGELLM_WGMMA_M64N128K16
#endif  // PAGELLM_WGMMA_AVAILABLE

}  // namespace pagellm::cuda::attention::wgmma
