// FlashAttention-2-style paged attention for prefill and chunked prefill on tensor cores
// (mma.sync m16n8k16, bf16 / f16 in, f32 accumulate; sm_80 and later). One block computes 64 query
// rows of one sequence and one query head against the sequence's whole causal context, which may
// start with cached prefix blocks: K/V tiles of 64 keys are gathered from the paged cache row by
// row with cp.async (double-buffered), scores and the online softmax stay in registers, and the
// probabilities feed the P·V product straight from the score accumulators (FA2's register reuse).
//
// FP8 caches (KV = __nv_fp8_e4m3 / __nv_fp8_e5m2): the tiles arrive as raw codes through the same
// cp.async pipeline, and the block converts each tile to T in shared memory before the MMAs; the
// per-tensor scales fold into the score scale (k) and the output (v).
//
// Included once per dtype (and per dtype with FP8 caches) by tile_*.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/attention/attention_internal.h"
#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"

namespace pagellm::cuda::attention {

constexpr int kTileM = kAttentionTileRows;  // query rows per block (16 per warp)
constexpr int kTileN = 64;                  // keys per K/V tile
constexpr int kTileThreads = 128;

// Row r of a tile of raw FP8 codes ([rows, D] bytes, dense) converted into the swizzled T tile
// (chunks of 16 codes -> two 16-byte chunks of T).
template <typename T, typename KV, int D>
__device__ __forceinline__ void convert_fp8_chunk(const unsigned char* raw, T* tile, int r,
                                                  int ch16) {
  const uint4 v = *reinterpret_cast<const uint4*>(raw + r * D + ch16 * 16);
  uint32_t pairs[8];
  fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(v.x, pairs[0], pairs[1]);
  fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(v.y, pairs[2], pairs[3]);
  fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(v.z, pairs[4], pairs[5]);
  fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(v.w, pairs[6], pairs[7]);
  *reinterpret_cast<uint4*>(tile + swz<D>(r, 2 * ch16)) =
      make_uint4(pairs[0], pairs[1], pairs[2], pairs[3]);
  *reinterpret_cast<uint4*>(tile + swz<D>(r, 2 * ch16 + 1)) =
      make_uint4(pairs[4], pairs[5], pairs[6], pairs[7]);
}

// The cache slot of `key`, whose block holds block-table entry `entry`.
__device__ __forceinline__ int64_t slot_of_entry(const AttentionParams& p, int entry, int key) {
  return static_cast<int64_t>(entry) * p.block_size + key % p.block_size;
}

// The cache slot of `key` of the sequence whose block table is `table`, or -1 at or past key_end.
__device__ __forceinline__ int64_t kv_slot(const AttentionParams& p, const int32_t* table, int key,
                                           int key_end) {
  if (key >= key_end) return -1;
  return slot_of_entry(p, table[key / p.block_size], key);
}

// Byte offset of 16-byte chunk ch of row r in a raw FP8 tile ([rows, D] codes) whose chunks are
// XOR-swizzled so that reads of one chunk column by 8 consecutive rows hit 32 distinct banks (the
// decode kernel's K fragments and V ldmatrix): D = 128 rows fill the 32 banks each, so the chunk
// moves with r & 7; D = 64 rows pair up in 128 bytes, so with (r >> 1) & 3.
template <int D>
__device__ __forceinline__ int raw_swz(int r, int ch) {
  static_assert(D == 64 || D == 128, "one or two rows per 128 bytes");
  return r * D + ((ch ^ (D == 128 ? r & 7 : (r >> 1) & 3)) << 4);
}

// Issues the cp.async of 16-byte chunk ch of row r of a K/V tile whose row r starts at element
// row_off of the caches (slot * num_kv_heads * D; -1: zero-filled): FP8 codes into raw ([kTileN,
// D] bytes of K, then of V), 16-bit elements into the swizzled tiles sk / sv. (The decode kernel
// has its own loads: decode_mma.cuh.)
template <typename T, typename KV, int D>
__device__ __forceinline__ void load_kv_chunk_row(const KV* k_base, const KV* v_base,
                                                  int64_t row_off, int r, int ch,
                                                  unsigned char* raw, T* sk, T* sv) {
  const bool valid = row_off >= 0;
  const int64_t off = valid ? row_off + ch * static_cast<int>(16 / sizeof(KV)) : 0;
  if constexpr (kIsFp8<KV>) {
    const int at = r * D + ch * 16;
    cp_async16(raw + at, k_base + off, valid ? 16 : 0);
    cp_async16(raw + kTileN * D + at, v_base + off, valid ? 16 : 0);
  } else {
    cp_async16(sk + swz<D>(r, ch), k_base + off, valid ? 16 : 0);
    cp_async16(sv + swz<D>(r, ch), v_base + off, valid ? 16 : 0);
  }
}

// The same for row r holding `key` of the sequence (zero-filled at or past key_end).
template <typename T, typename KV, int D>
__device__ __forceinline__ void load_kv_chunk(const AttentionParams& p, const int32_t* table,
                                              const KV* k_base, const KV* v_base, int key,
                                              int key_end, int r, int ch, unsigned char* raw, T* sk,
                                              T* sv) {
  const int64_t slot = kv_slot(p, table, key, key_end);
  load_kv_chunk_row<T, KV, D>(k_base, v_base, slot >= 0 ? slot * p.num_kv_heads * D : -1, r, ch,
                              raw, sk, sv);
}

// Shared memory of the tile kernel: Q [kTileM, D] T, then K/V: two stages of [kTileN, D] T each
// (16-bit caches), or two stages of raw [kTileN, D] codes each plus one converted T tile each (FP8).
template <typename T, typename KV, int D>
constexpr int tile_smem_bytes() {
  constexpr int kT = static_cast<int>(sizeof(T));
  if constexpr (kIsFp8<KV>) return kTileM * D * kT + 4 * kTileN * D + 2 * kTileN * D * kT;
  return (kTileM + 4 * kTileN) * D * kT;
}

template <typename T, typename KV, int D>
__global__ void __launch_bounds__(kTileThreads)
    tile_attention_kernel(const __grid_constant__ AttentionParams p,
                          const __grid_constant__ AttentionPlan plan) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr bool kFp8 = kIsFp8<KV>;
  constexpr int kChunks = D / 8;                      // 16-byte chunks per row of T
  constexpr int kKvChunks = D * sizeof(KV) / 16;      // 16-byte chunks per cache row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_q = reinterpret_cast<T*>(smem_raw);  // [kTileM, D]
  T* s_k = s_q + kTileM * D;                // [2, kTileN, D] (FP8: [kTileN, D], converted)
  T* s_v = s_k + (kFp8 ? 1 : 2) * kTileN * D;
  // FP8: raw codes, [2 stages, K / V, kTileN, D] bytes.
  unsigned char* s_raw = reinterpret_cast<unsigned char*>(s_v + (kFp8 ? 1 : 2) * kTileN * D);

  const TileSpan t = tile_span(p, plan, kTileM);
  const int row0 = t.row0, q_begin = t.q_begin, q_len = t.q_len, pos0 = t.pos0, n_keys = t.n_keys;
  const int n_tiles = (n_keys + kTileN - 1) / kTileN;
  // A sliding window: the block's first row attends from key pos0 + row0 - window + 1, so the
  // tiles before that one hold no key any row attends.
  const int j_first = p.window > 0 ? max(0, pos0 + row0 - p.window + 1) / kTileN : 0;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int32_t* table = p.block_tables + static_cast<int64_t>(t.seq) * p.max_blocks_per_seq;
  const T* q_base = static_cast<const T*>(p.q) + static_cast<int64_t>(t.head) * D;
  const KV* k_base = static_cast<const KV*>(p.k_cache) + static_cast<int64_t>(t.kv_head) * D;
  const KV* v_base = static_cast<const KV*>(p.v_cache) + static_cast<int64_t>(t.kv_head) * D;

  for (int c = tid; c < kTileM * kChunks; c += kTileThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool valid = row0 + r < q_len;
    const T* src =
        valid ? q_base + static_cast<int64_t>(q_begin + row0 + r) * p.q_token_stride + ch * 8
              : q_base;
    cp_async16(s_q + swz<D>(r, ch), src, valid ? 16 : 0);
  }
  auto load_kv = [&](int tile, int stage) {
    for (int c = tid; c < kTileN * kKvChunks; c += kTileThreads)
      load_kv_chunk<T, KV, D>(p, table, k_base, v_base, tile * kTileN + c / kKvChunks, n_keys,
                              c / kKvChunks, c % kKvChunks, s_raw + stage * 2 * kTileN * D,
                              s_k + stage * kTileN * D, s_v + stage * kTileN * D);
  };
  load_kv(j_first, j_first & 1);
  cp_async_commit();

  const int g = lane >> 2;  // accumulator row within the warp's 16 (and g + 8)
  const int t4 = lane & 3;  // accumulator column pair
  const float qscale = p.scale * 1.4426950408889634f * kv_scale<KV>(p.k_scale);
  const float cap2 = p.softcap * 1.4426950408889634f;
  const int wrow = warp * 16;
  const int pos_a = pos0 + row0 + wrow + g;  // positions of this thread's two rows
  const int pos_b = pos_a + 8;

  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

  for (int j = j_first; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) load_kv(j + 1, (j + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if (j == j_first) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int r = wrow + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(qf[kk], s_q + swz<D>(r, 2 * kk + (lane >> 4)));
      }
    }
    if constexpr (kFp8) {
      const unsigned char* raw = s_raw + (j & 1) * 2 * kTileN * D;
      for (int c = tid; c < kTileN * (D / 16); c += kTileThreads) {
        convert_fp8_chunk<T, KV, D>(raw, s_k, c / (D / 16), c % (D / 16));
        convert_fp8_chunk<T, KV, D>(raw + kTileN * D, s_v, c / (D / 16), c % (D / 16));
      }
      __syncthreads();
    }
    const T* sk = s_k + (kFp8 ? 0 : (j & 1) * kTileN * D);
    const T* sv = s_v + (kFp8 ? 0 : (j & 1) * kTileN * D);

    // S = Q Kᵀ for this warp's 16 rows × 64 keys.
    float s[kTileN / 8][4];
#pragma unroll
    for (int n = 0; n < kTileN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < kTileN / 16; ++np) {
        uint32_t b[4];
        const int r = np * 16 + (lane >> 4) * 8 + (lane & 7);
        ldmatrix_x4(b, sk + swz<D>(r, 2 * kk + ((lane >> 3) & 1)));
        mma16816<T>(s[2 * np], qf[kk], b[0], b[1]);
        mma16816<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    // Scale, soft cap, causal mask (only tiles that reach past the first row's position need
    // it) and the window's lower edge (only tiles that start at or before the last row's
    // position - window), online softmax.
    const int key0 = j * kTileN;
    const bool need_mask = key0 + kTileN - 1 > pos0 + row0 ||
                           (p.window > 0 && key0 <= pos0 + row0 + kTileM - 1 - p.window);
    const auto scale_mask = [&](int n, int e, float raw) {
      const int key = key0 + n * 8 + 2 * t4 + (e & 1);
      const int pos = e < 2 ? pos_a : pos_b;
      float v = soft_cap_log2(raw * qscale, cap2);
      if (need_mask && (key > pos || (p.window > 0 && key <= pos - p.window))) v = -INFINITY;
      return v;
    };
    float corr_a, corr_b;
    online_softmax_step(s, scale_mask, m_a, m_b, l_a, l_b, corr_a, corr_b);
    rescale_rows(o, corr_a, corr_b);

    // O += P V, P taken from the score accumulators as the A operand.
#pragma unroll
    for (int kk = 0; kk < kTileN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(b, sv + swz<D>(r, 2 * dp + (lane >> 4)));
        mma16816<T>(o[2 * dp], a, b[0], b[1]);
        mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites the stage just read
  }

  quad_sum(l_a, l_b);
  const float vs = kv_scale<KV>(p.v_scale);
  const float inv_a = l_a > 0.f ? vs / l_a : 0.f;
  const float inv_b = l_b > 0.f ? vs / l_b : 0.f;
  store_tile_rows<T, D>(p, t, o, row0 + wrow + g, t4, inv_a, inv_b);
}

template <typename T, typename KV, int D>
cudaError_t launch_tile_config(const AttentionParams& p, const AttentionPlan& plan,
                               cudaStream_t stream) {
  constexpr int kSmem = tile_smem_bytes<T, KV, D>();
  // Raising the dynamic shared-memory limit is a host-side attribute, safe during graph capture.
  const cudaError_t attr = allow_dynamic_smem<tile_attention_kernel<T, KV, D>>(kSmem);
  if (attr != cudaSuccess) return attr;
  if (p.num_heads > 65535) return cudaErrorInvalidValue;
  dim3 grid(plan.num_tile_items, p.num_heads);
  return launch_kernel(tile_attention_kernel<T, KV, D>, grid, kTileThreads, kSmem, stream, p, plan);
}

template <typename T, typename KV>
cudaError_t launch_tile(const AttentionParams& p, const AttentionPlan& plan, cudaStream_t stream) {
  if (!aligned16(p.q) || !aligned16(p.k_cache) || !aligned16(p.v_cache) || !aligned16(p.out) ||
      (p.q_token_stride * sizeof(T)) % 16 != 0)
    return cudaErrorInvalidValue;
  if (p.head_dim == 64) return launch_tile_config<T, KV, 64>(p, plan, stream);
  if (p.head_dim == 128) return launch_tile_config<T, KV, 128>(p, plan, stream);
  if (p.head_dim == 256) return launch_tile_config<T, KV, 256>(p, plan, stream);
  return cudaErrorNotSupported;
}

}  // namespace pagellm::cuda::attention
