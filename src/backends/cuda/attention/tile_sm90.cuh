// Paged prefill attention on Hopper's warpgroup MMAs (wgmma, sm_90a), for 16-bit caches: the
// FlashAttention-3 arithmetic (S = Q·Kᵀ and O += P·V as asynchronous warpgroup MMAs reading K and V
// straight from 128-byte-swizzled shared memory; P fed from the score registers as the A operand)
// inside the pipeline of the mma.sync tile kernel (tile.cuh), whose paged gather it keeps.
//
// One block = two warpgroups = 128 query rows of one sequence and one query head (64 rows per
// warpgroup, 16 per warp; each thread holds rows g and g + 8 of its warp's 16, as in mma.sync).
// K/V tiles of 128 keys are gathered from the paged cache with cp.async into three stages, so tile
// j + 1 loads while tile j's scores and tile j - 1's P·V are multiplied; both warpgroups read each
// tile, halving the K/V traffic per query row of a 64-row block. A warpgroup skips the tiles that lie wholly past its last row
// (the causal diagonal) but keeps the block's barriers.
//
// Included once per dtype by tile_sm90_*.cu. Code built for sm_80 gets an empty body; the planner
// picks this kernel only on compute capability 9.0 (attention.cu: sm90_tiles).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/attention/attention_internal.h"
#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/attention/wgmma.cuh"
#include "backends/cuda/common.cuh"

namespace pagellm::cuda::attention {

constexpr int kSm90Keys = 128;     // keys per K/V tile
constexpr int kSm90Stages = 3;     // K/V tiles in shared memory at once
constexpr int kSm90Threads = 256;  // two warpgroups
static_assert(kSm90TileRows == 2 * 64, "one warpgroup per 64 query rows");

// Shared memory: Q [kSm90TileRows, D], then kSm90Stages K tiles [kSm90Keys, D] and as many V
// tiles, all 16-bit and 1024-byte aligned (the swizzle atoms); 1024 bytes of slack to align the
// base. 225 KB at D = 128, within the 227 KB a block may have.
template <int D>
constexpr int sm90_smem_bytes() {
  return (kSm90TileRows + 2 * kSm90Stages * kSm90Keys) * D * 2 + 1024;
}

#if PAGELLM_WGMMA_AVAILABLE
// Pieces of the kernel below, per warpgroup: S = Q·Kᵀ over one K tile (K is the K-major B
// operand; step kk takes 16 of D, 32 bytes into a 128-byte row), issued and committed, not waited.
template <typename T, int D>
__device__ __forceinline__ void issue_scores(float (&s)[kSm90Keys / 8][4],
                                             const uint32_t (&qf)[D / 16][4], uint64_t k_desc) {
#pragma unroll
  for (int n = 0; n < kSm90Keys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t offset = (kk >> 2) * (kSm90Keys * 128) + (kk & 3) * 32;
    wgmma::mma_m64k16<T, 0>(s, qf[kk], k_desc + (offset >> 4), 1);
  }
  wgmma::commit();
}

// O += P·V over one V tile (V is the MN-major B operand, D contiguous; step kk takes 16 keys = 2
// groups of 8 rows, 2048 bytes), issued and committed, not waited: pf must stay untouched until a
// wait covers it.
template <typename T, int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4],
                                         const uint32_t (&pf)[kSm90Keys / 16][4], uint64_t v_desc) {
  wgmma::fence_operands(o);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kSm90Keys / 16; ++kk)
    wgmma::mma_m64k16<T, 1>(o, pf[kk], v_desc + kk * (2048 >> 4), 1);
  wgmma::commit();
}

template <typename T>
__device__ __forceinline__ void pack_probabilities(const float (&s)[kSm90Keys / 8][4],
                                                   uint32_t (&pf)[kSm90Keys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kSm90Keys / 16; ++kk) {
    pf[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    pf[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    pf[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pf[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// 2^x on the SFU alone: no denormal fix-up (a probability under 2^-126 of the row's largest is 0 in
// 16 bits anyway); exp2(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One online-softmax step over a warpgroup's raw score tile (the thread's rows a and b): kMask
// applies the causal mask (key > the row's position; lim_* = position - key0 - 2 * t4, so that the
// test against the compile-time column is one compare). m_* are running maxima of the scaled
// (log2-domain) scores, l_* running sums; the scores become exp2(s * qscale - m), one FFMA and one
// SFU op each, and corr_* the factors the rows' O accumulators take.
template <bool kMask>
__device__ __forceinline__ void softmax_step(float (&s)[kSm90Keys / 8][4], float qscale, int lim_a,
                                             int lim_b, float& m_a, float& m_b, float& l_a,
                                             float& l_b, float& corr_a, float& corr_b) {
  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int n = 0; n < kSm90Keys / 8; ++n) {
    if constexpr (kMask) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (n * 8 + (e & 1) > (e < 2 ? lim_a : lim_b)) s[n][e] = -INFINITY;
    }
    mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
  }
  const float new_a = fmaxf(m_a, mx_a * qscale), new_b = fmaxf(m_b, mx_b * qscale);
  // A row whose keys are all masked so far keeps max -inf; 0 as its base avoids inf - inf.
  const float base_a = new_a == -INFINITY ? 0.f : new_a;
  const float base_b = new_b == -INFINITY ? 0.f : new_b;
  corr_a = exp2_ftz(m_a - base_a);
  corr_b = exp2_ftz(m_b - base_b);
  m_a = new_a;
  m_b = new_b;
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int n = 0; n < kSm90Keys / 8; ++n) {
    s[n][0] = exp2_ftz(fmaf(s[n][0], qscale, -base_a));
    s[n][1] = exp2_ftz(fmaf(s[n][1], qscale, -base_a));
    s[n][2] = exp2_ftz(fmaf(s[n][2], qscale, -base_b));
    s[n][3] = exp2_ftz(fmaf(s[n][3], qscale, -base_b));
    sum_a += s[n][0] + s[n][1];
    sum_b += s[n][2] + s[n][3];
  }
  l_a = l_a * corr_a + sum_a;
  l_b = l_b * corr_b + sum_b;
}
#endif  // PAGELLM_WGMMA_AVAILABLE

// The loop follows FlashAttention-3's in-warpgroup overlap: iteration j issues S_j = Q·K_jᵀ and
// O += P_{j-1}·V_{j-1} back to back, waits for S_j only, and runs S_j's softmax while the tensor
// cores finish P·V; O takes S_j's correction after that wait. K/V tiles rotate over three stages:
// tile j + 1 loads during iteration j, into the stage that held tile j - 2, whose V every
// warpgroup had finished with before iteration j's barrier.
template <typename T, int D>
__global__ void __launch_bounds__(kSm90Threads, 1)
    tile_attention_sm90_kernel(const __grid_constant__ AttentionParams p,
                               const __grid_constant__ AttentionPlan plan) {
#if PAGELLM_WGMMA_AVAILABLE
  pdl_launch_dependents();
  pdl_wait();
  constexpr int kChunks = D / 8;                        // 16-byte chunks per row
  constexpr int kRowsPerPass = kSm90Threads / kChunks;  // K/V rows one pass of the block loads
  constexpr int kKvTileBytes = kSm90Keys * D * 2;
  static_assert(kRowsPerPass % 8 == 0, "a thread's K/V rows share one swizzled column");
  extern __shared__ unsigned char smem_raw[];
  unsigned char* s_q = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});  // [kSm90TileRows, D]
  unsigned char* s_k = s_q + kSm90TileRows * D * 2;       // [kSm90Stages][kSm90Keys, D]
  unsigned char* s_v = s_k + kSm90Stages * kKvTileBytes;  // [kSm90Stages][kSm90Keys, D]

  const TileSpan t = tile_span(p, plan, kSm90TileRows);
  const int row0 = t.row0, q_begin = t.q_begin, q_len = t.q_len, pos0 = t.pos0, n_keys = t.n_keys;
  const int n_tiles = (n_keys + kSm90Keys - 1) / kSm90Keys;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int32_t* table = p.block_tables + static_cast<int64_t>(t.seq) * p.max_blocks_per_seq;
  const T* q_base = static_cast<const T*>(p.q) + static_cast<int64_t>(t.head) * D;
  const T* k_base = static_cast<const T*>(p.k_cache) + static_cast<int64_t>(t.kv_head) * D;
  const T* v_base = static_cast<const T*>(p.v_cache) + static_cast<int64_t>(t.kv_head) * D;

  for (int c = tid; c < kSm90TileRows * kChunks; c += kSm90Threads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool valid = row0 + r < q_len;
    const T* src =
        valid ? q_base + static_cast<int64_t>(q_begin + row0 + r) * p.q_token_stride + ch * 8
              : q_base;
    cp_async16(s_q + wgmma::sw128_offset<kSm90TileRows>(r, ch), src, valid ? 16 : 0);
  }
  // Each thread copies one 16-byte column (ch) of every kRowsPerPass-th row. Keys at or past n_keys
  // are zero-filled: no garbage (possibly NaN) reaches the MMAs, and the causal mask removes their
  // scores. Power-of-two block sizes (all of pagellm's) avoid an integer division per row.
  const int ch = tid % kChunks;
  const int bs = p.block_size;
  const bool bs_pow2 = (bs & (bs - 1)) == 0;
  const int bs_shift = __ffs(bs) - 1;
  const int64_t slot_stride = int64_t{p.num_kv_heads} * D;
  // A thread's rows r0 + i * kRowsPerPass share r0 & 7, hence one swizzled column: its
  // destinations are dst0 + i * kRowsPerPass * 128.
  const int r0 = tid / kChunks;
  const int dst0 = wgmma::sw128_offset<kSm90Keys>(r0, ch);
  const auto load_kv = [&](int tile, int stage) {
#pragma unroll
    for (int i = 0; i < kSm90Keys / kRowsPerPass; ++i) {
      const int key = tile * kSm90Keys + r0 + i * kRowsPerPass;
      const bool valid = key < n_keys;
      int64_t off = 0;
      if (valid) {
        const int blk = bs_pow2 ? key >> bs_shift : key / bs;
        off = (static_cast<int64_t>(table[blk]) * bs + (key - blk * bs)) * slot_stride + ch * 8;
      }
      const int dst = stage * kKvTileBytes + dst0 + i * kRowsPerPass * 128;
      cp_async16(s_k + dst, k_base + off, valid ? 16 : 0);
      cp_async16(s_v + dst, v_base + off, valid ? 16 : 0);
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  const int g = lane >> 2;  // accumulator row within the warp's 16 (and g + 8)
  const int t4 = lane & 3;  // accumulator column pair
  const float qscale = p.scale * 1.4426950408889634f;  // softmax in the log2 domain
  const int wrow = warp * 16;                          // this warp's first row in the block
  const int wg_row = (warp >> 2) * 64;                 // this warpgroup's first row
  const bool wg_active = row0 + wg_row < q_len;  // warpgroup-uniform, like everything wgmma uses
  const int wg_pos = pos0 + row0 + wg_row;       // position of the warpgroup's first row
  // Tiles this warpgroup multiplies: those holding keys up to its last row's position.
  const int wg_tiles =
      wg_active ? min(n_tiles, (pos0 + min(row0 + wg_row + 63, q_len - 1)) / kSm90Keys + 1) : 0;
  const int pos_a = pos0 + row0 + wrow + g;  // positions of this thread's two rows
  const int pos_b = pos_a + 8;
  // Descriptors of stage 0's tiles; a tile or step further on adds its byte offset / 16 to the
  // start-address field (shared addresses stay below 2^18, so the field never carries over).
  const uint64_t k_desc = wgmma::sw128_desc(smem_addr(s_k), 16, 1024);
  const uint64_t v_desc = wgmma::sw128_desc(smem_addr(s_v), kSm90Keys * 128, 1024);

  uint32_t qf[D / 16][4];
  uint32_t pf[kSm90Keys / 16][4];  // P of the previous tile, the A operand of its P·V
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<0>();
    wgmma::fence_proxy_async();  // this thread's cp.async data, visible to the MMAs' reads
    __syncthreads();             // ... and everyone's; every warpgroup is done with tile j - 2
    if (j + 1 < n_tiles) load_kv(j + 1, (j + 1) % kSm90Stages);
    cp_async_commit();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ldmatrix_x4(qf[kk], s_q + wgmma::sw128_offset<kSm90TileRows>(wrow + (lane & 15),
                                                                     2 * kk + (lane >> 4)));
    }
    const uint32_t stage = (j % kSm90Stages) * (kKvTileBytes >> 4);
    const uint32_t prev_stage = ((j + kSm90Stages - 1) % kSm90Stages) * (kKvTileBytes >> 4);
    if (j < wg_tiles) {
      float s[kSm90Keys / 8][4];
      issue_scores<T, D>(s, qf, k_desc + stage);
      if (j > 0) {
        issue_pv<T, D>(o, pf, v_desc + prev_stage);
        wgmma::wait<1>();
      } else {
        wgmma::wait<0>();
      }
      wgmma::fence_operands(s);
      // Causal mask only on tiles reaching past the warpgroup's first row.
      const int key0 = j * kSm90Keys;
      float corr_a, corr_b;
      if (key0 + kSm90Keys - 1 > wg_pos)
        softmax_step<true>(s, qscale, pos_a - key0 - 2 * t4, pos_b - key0 - 2 * t4, m_a, m_b, l_a,
                           l_b, corr_a, corr_b);
      else
        softmax_step<false>(s, qscale, 0, 0, m_a, m_b, l_a, l_b, corr_a, corr_b);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        o[i][0] *= corr_a;
        o[i][1] *= corr_a;
        o[i][2] *= corr_b;
        o[i][3] *= corr_b;
      }
      pack_probabilities<T>(s, pf);
    } else if (j == wg_tiles && wg_tiles > 0) {  // the warpgroup's last P·V, past its diagonal
      issue_pv<T, D>(o, pf, v_desc + prev_stage);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
    }
  }
  if (wg_tiles > 0 && wg_tiles == n_tiles) {
    issue_pv<T, D>(o, pf, v_desc + ((n_tiles - 1) % kSm90Stages) * (kKvTileBytes >> 4));
    wgmma::wait<0>();
    wgmma::fence_operands(o);
  }

  quad_sum(l_a, l_b);
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f;
  const float inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
  store_tile_rows<T, D>(p, t, o, row0 + wrow + g, t4, inv_a, inv_b);
#endif  // PAGELLM_WGMMA_AVAILABLE
}

template <typename T, int D>
cudaError_t launch_tile_sm90_config(const AttentionParams& p, const AttentionPlan& plan,
                                    cudaStream_t stream) {
  constexpr int kSmem = sm90_smem_bytes<D>();
  const cudaError_t attr = allow_dynamic_smem<tile_attention_sm90_kernel<T, D>>(kSmem);
  if (attr != cudaSuccess) return attr;
  if (p.num_heads > 65535) return cudaErrorInvalidValue;
  dim3 grid(plan.num_tile_items, p.num_heads);
  return launch_kernel(tile_attention_sm90_kernel<T, D>, grid, kSm90Threads, kSmem, stream, p,
                       plan);
}

template <typename T>
cudaError_t launch_tile_sm90(const AttentionParams& p, const AttentionPlan& plan,
                             cudaStream_t stream) {
  if (!aligned16(p.q) || !aligned16(p.k_cache) || !aligned16(p.v_cache) || !aligned16(p.out) ||
      (p.q_token_stride * sizeof(T)) % 16 != 0)
    return cudaErrorInvalidValue;
  if (p.head_dim == 64) return launch_tile_sm90_config<T, 64>(p, plan, stream);
  if (p.head_dim == 128) return launch_tile_sm90_config<T, 128>(p, plan, stream);
  return cudaErrorNotSupported;
}

}  // namespace pagellm::cuda::attention
