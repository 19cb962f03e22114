// Tensor-core building blocks shared by the prefill tile kernel (tile.cuh) and the GQA decode
// kernel (decode_mma.cuh): cp.async and ldmatrix wrappers, the m16n8k16 mma, the swizzled
// shared-memory layout, and the online-softmax step over mma.sync score fragments (each thread
// holds rows g = lane / 4 and g + 8 of its warp's 16; a quad of 4 lanes shares a row).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda::attention {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global→shared copy; src_bytes == 0 fills the destination with zeros (rows past the
// context or the query range), so no garbage (possibly NaN) ever reaches the tensor cores.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// d += a · b for one m16n8k16 tile.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

// Where a block of a tile kernel works: tile item blockIdx.x (a sequence and its first query row)
// for query head blockIdx.y, over `rows` query rows and the keys the last of them reads.
struct TileSpan {
  int seq, row0, head, kv_head;
  int q_begin, q_len;  // the sequence's query tokens
  int pos0;            // position of its query row 0
  int n_keys;          // keys up to the block's last row, causal
};

// The span of tile item `item` for query head `head` (tile_span: the block's, blockIdx.x / .y).
__device__ __forceinline__ TileSpan tile_span_at(const AttentionParams& p,
                                                 const AttentionPlan& plan, int rows, int item,
                                                 int head) {
  TileSpan t;
  t.seq = plan.tile_items[2 * item];
  t.row0 = plan.tile_items[2 * item + 1];
  t.head = head;
  t.kv_head = t.head / (p.num_heads / p.num_kv_heads);
  t.q_begin = p.query_start_loc[t.seq];
  t.q_len = p.query_start_loc[t.seq + 1] - t.q_begin;
  t.pos0 = p.seq_lens[t.seq] - t.q_len;
  t.n_keys = t.pos0 + min(t.row0 + rows, t.q_len);
  return t;
}

__device__ __forceinline__ TileSpan tile_span(const AttentionParams& p, const AttentionPlan& plan,
                                              int rows) {
  return tile_span_at(p, plan, rows, blockIdx.x, blockIdx.y);
}

// Stores a thread's two output rows (query rows row_a and row_a + 8 of the span's sequence; rows
// at or past q_len are skipped) from mma accumulators o, times inv_a / inv_b, into p.out
// [num_tokens, num_heads, D].
template <typename T, int D>
__device__ __forceinline__ void store_tile_rows(const AttentionParams& p, const TileSpan& t,
                                                const float (&o)[D / 8][4], int row_a, int t4,
                                                float inv_a, float inv_b) {
  const int row_b = row_a + 8;
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    const int d = i * 8 + 2 * t4;
    if (row_a < t.q_len) {
      T* dst = out + (static_cast<int64_t>(t.q_begin + row_a) * p.num_heads + t.head) * D + d;
      *reinterpret_cast<uint32_t*>(dst) = pack2<T>(o[i][0] * inv_a, o[i][1] * inv_a);
    }
    if (row_b < t.q_len) {
      T* dst = out + (static_cast<int64_t>(t.q_begin + row_b) * p.num_heads + t.head) * D + d;
      *reinterpret_cast<uint32_t*>(dst) = pack2<T>(o[i][2] * inv_b, o[i][3] * inv_b);
    }
  }
}

// Shared-memory tiles are [rows, D] of T with the 16-byte chunks of each row XOR-swizzled by
// (row & 7): ldmatrix reads 8 rows at one logical chunk, and the swizzle spreads them over all
// banks.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// Sums each of a, b over the four lanes of a quad (the lanes that hold one accumulator row).
__device__ __forceinline__ void quad_sum(float& a, float& b) {
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
}

// The keys [first, n_keys) a query with n_keys causal keys attends: all of them, or a sliding
// window's last `window`.
__device__ __forceinline__ int first_key(int n_keys, int window) {
  return window > 0 ? max(0, n_keys - window) : 0;
}

// A score in the log2 domain (score * log2e) soft-capped at cap2 = softcap * log2e (Gemma 2):
// cap2 * tanh(s / cap2) is log2e * softcap * tanh(score / softcap). No-op for cap2 == 0.
__device__ __forceinline__ float soft_cap_log2(float s, float cap2) {
  return cap2 > 0.f ? cap2 * tanhf(s / cap2) : s;
}

// One online-softmax step over a warp's [16, 8 * N] raw score fragments: scale_mask(n, e, s[n][e])
// scales each score to the log2 domain and masks it with -inf (fused with the row max, as the
// kernels always did); then updates the running max (m_a, m_b) and sum (l_a, l_b) of the thread's
// two rows, replaces the scores by exp2(s - max), and returns in corr_a / corr_b the factor by
// which the rows' output accumulators must be rescaled before this tile's P·V is added.
template <int N, typename ScaleMask>
__device__ __forceinline__ void online_softmax_step(float (&s)[N][4], const ScaleMask& scale_mask,
                                                    float& m_a, float& m_b, float& l_a, float& l_b,
                                                    float& corr_a, float& corr_b) {
  float mx_a = m_a, mx_b = m_b;
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = scale_mask(n, e, s[n][e]);
    mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
  }
  // A row whose keys are all masked so far keeps max -inf; use 0 as its base to avoid inf - inf.
  const float base_a = mx_a == -INFINITY ? 0.f : mx_a;
  const float base_b = mx_b == -INFINITY ? 0.f : mx_b;
  corr_a = exp2f(m_a - base_a);
  corr_b = exp2f(m_b - base_b);
  m_a = mx_a;
  m_b = mx_b;
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int n = 0; n < N; ++n) {
    s[n][0] = exp2f(s[n][0] - base_a);
    s[n][1] = exp2f(s[n][1] - base_a);
    s[n][2] = exp2f(s[n][2] - base_b);
    s[n][3] = exp2f(s[n][3] - base_b);
    sum_a += s[n][0] + s[n][1];
    sum_b += s[n][2] + s[n][3];
  }
  l_a = l_a * corr_a + sum_a;
  l_b = l_b * corr_b + sum_b;
}

// Rescales a thread's output accumulators (rows g and g + 8 of each n-tile) by the factors
// online_softmax_step returned, before the tile's P·V is added.
template <int NT>
__device__ __forceinline__ void rescale_rows(float (&o)[NT][4], float corr_a, float corr_b) {
#pragma unroll
  for (int i = 0; i < NT; ++i) {
    o[i][0] *= corr_a;
    o[i][1] *= corr_a;
    o[i][2] *= corr_b;
    o[i][3] *= corr_b;
  }
}

}  // namespace pagellm::cuda::attention
