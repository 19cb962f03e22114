// The per-warp arithmetic of the tensor-core GQA decode kernel (decode_mma.cuh), in two layouts of
// the m16n8k16 MMA. A warp owns 16 keys of every 64-key tile and keeps its own online-softmax
// state for the group's query heads; the kernel around it loads the tiles and merges the warps.
//
// HeadRowsWarp: the group's heads are the MMA's 16 rows (S = Q Kᵀ, O = P V). Groups of up to 16;
// a group of 4 leaves three quarters of every MMA and every exp2 idle.
// KeyRowsWarp: the warp's 16 keys are the rows and the heads the 8 columns (Sᵀ = K Qᵀ,
// Oᵀ = Vᵀ Pᵀ). Groups of up to 8: half the MMAs, exp2s and accumulator registers of HeadRowsWarp
// for a group of 4 or 8. Pᵀ reaches the second MMA's B operand by movmatrix.trans, and the
// softmax's base moves lazily (only when a score passes it by 2^8), so most tiles skip the
// accumulators' rescale.
//
// FP8 caches: fragments come straight from the raw codes of tiles laid out by raw_swz (one 4-byte
// read and a conversion per K fragment; ldmatrix.trans over byte pairs for V), so no tile is ever
// converted in shared memory; the dims then sit in a permuted order that load_q and the merge
// (out_dim) follow. KeyRowsWarp converts codes 0, 2 and 1, 3 of a word into its pairs
// (fp8x4_to_pairs_02_13: no byte permutes). See docs/PERF.md.
#pragma once

#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/attention/tile.cuh"

namespace pagellm::cuda::attention {

// An 8×8 matrix of 16-bit pairs (the m8n8 fragment: lane holds row lane / 4, columns 2 (lane % 4)
// and + 1) transposed across the warp.
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The raw FP8 codes of one 16-dim chunk column of a warp's 16 V rows by ldmatrix.trans over byte
// pairs (chunks 2 cc and 2 cc + 1): lane (g, t4) gets keys 2 t4, 2 t4 + 1 (and + 8, + 9) of dims
// 16 c + 2 g (even[]) and 16 c + 2 g + 1 (odd[]) as T pairs. Matrices: keys 0-7 / 8-15 of chunk
// 2 cc, then of chunk 2 cc + 1.
template <typename T, typename KV, int D>
__device__ __forceinline__ void raw_v_pairs(const unsigned char* raw_v, int row0, int lane, int cc,
                                            uint32_t (&even)[4], uint32_t (&odd)[4]) {
  uint32_t r[4];
  ldmatrix_x4_trans(
      r, raw_v + raw_swz<D>(row0 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * cc + (lane >> 4)));
  // r[m]'s bytes: (key 2 t4: dim 2 g, 2 g + 1), (key 2 t4 + 1: the same dims).
#pragma unroll
  for (int m = 0; m < 4; ++m) fp8x4_to_pairs_02_13<T, kFp8Interp<KV>>(r[m], even[m], odd[m]);
}

// Where a warp's tile is: the raw codes (FP8) or the 16-bit K and V tiles, the warp's first
// row, its first key and the keys' end.
template <typename T>
struct WarpTile {
  const unsigned char* raw;  // FP8: [2, kTileN, D] codes (K then V), raw_swz layout
  const T* sk;               // 16-bit caches: [kTileN, D] swizzled (swz)
  const T* sv;
  int row0, key0, k_end;
};

// Query heads on the MMA rows (groups of 2..16).
template <typename T, typename KV, int D>
struct HeadRowsWarp {
  static constexpr bool kFp8 = kIsFp8<KV>;
  static constexpr int kMaxGroup = 16;
  static constexpr int kStages = 3;
  // Five stages of raw codes: measured faster than three with either two or three blocks per SM.
  static constexpr int kFp8Stages = 5;
  uint32_t qf[D / 16][4];
  float o[D / 8][4];
  float m_a, m_b, l_a, l_b;

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    m_a = m_b = -INFINITY;
    l_a = l_b = 0.f;
  }

  // The Q fragments of every k-step (rows g and g + 8). 16-bit caches: the mma's layout, by
  // ldmatrix. FP8 caches: k-step kk's logical columns 2 t4, 2 t4 + 1 (and + 8, + 9) are dims
  // 16 kk + 4 t4 .. + 3, so that a K fragment is one 4-byte read of the raw codes.
  __device__ __forceinline__ void load_q(const T* s_q, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (kFp8) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint2 v = *reinterpret_cast<const uint2*>(
              s_q + swz<D>(g + 8 * h, 2 * kk + (t4 >> 1)) + (t4 & 1) * 4);
          qf[kk][h] = v.x;
          qf[kk][2 + h] = v.y;
        }
      } else {
        ldmatrix_x4(qf[kk], s_q + swz<D>((lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)));
      }
    }
  }

  __device__ __forceinline__ void scores(const WarpTile<T>& w, int lane, float (&s)[2][4]) const {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (kFp8) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint32_t four = *reinterpret_cast<const uint32_t*>(
              w.raw + raw_swz<D>(w.row0 + n * 8 + g, kk) + 4 * t4);
          uint32_t b0, b1;
          fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(four, b0, b1);
          mma16816<T>(s[n], qf[kk], b0, b1);
        }
      } else {
        uint32_t b[4];
        ldmatrix_x4(
            b, w.sk + swz<D>(w.row0 + (lane >> 4) * 8 + (lane & 7), 2 * kk + ((lane >> 3) & 1)));
        mma16816<T>(s[0], qf[kk], b[0], b[1]);
        mma16816<T>(s[1], qf[kk], b[2], b[3]);
      }
    }
  }

  // P·V; FP8: each chunk's even and odd dims in n-tiles of their own (out_dim).
  __device__ __forceinline__ void accumulate_pv(const WarpTile<T>& w, int lane,
                                                const uint32_t (&a)[4]) {
    if constexpr (kFp8) {
#pragma unroll
      for (int cc = 0; cc < D / 32; ++cc) {
        uint32_t even[4], odd[4];
        raw_v_pairs<T, KV, D>(w.raw + kTileN * D, w.row0, lane, cc, even, odd);
        mma16816<T>(o[4 * cc], a, even[0], even[1]);
        mma16816<T>(o[4 * cc + 1], a, odd[0], odd[1]);
        mma16816<T>(o[4 * cc + 2], a, even[2], even[3]);
        mma16816<T>(o[4 * cc + 3], a, odd[2], odd[3]);
      }
    } else {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            b, w.sv + swz<D>(w.row0 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4)));
        mma16816<T>(o[2 * dp], a, b[0], b[1]);
        mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
  }

  // One tile: scores, the online softmax (scaled to the log2 domain by qscale, soft-capped at
  // cap2, keys at or past k_end masked), P·V.
  __device__ __forceinline__ void tile(const WarpTile<T>& w, int lane, float qscale, float cap2) {
    const int t4 = lane & 3;
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    scores(w, lane, s);
    const auto scale_mask = [&](int n, int e, float raw) {
      const int key = w.key0 + n * 8 + 2 * t4 + (e & 1);
      return key < w.k_end ? soft_cap_log2(raw * qscale, cap2) : -INFINITY;
    };
    float corr_a, corr_b;
    online_softmax_step(s, scale_mask, m_a, m_b, l_a, l_b, corr_a, corr_b);
    const uint32_t a[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]),
                           pack2<T>(s[1][0], s[1][1]), pack2<T>(s[1][2], s[1][3])};
    rescale_rows(o, corr_a, corr_b);
    accumulate_pv(w, lane, a);
  }

  // The head dim of accumulator o[i][e]: the mma's order, or accumulate_pv's for FP8 (n-tile
  // i = 2 c + parity, column 2 t4 (+ 1) stands for dim 16 c + 4 t4 + 2 (e & 1) + parity).
  __device__ __forceinline__ static int out_dim(int i, int t4, int e) {
    if constexpr (kFp8) return 16 * (i >> 1) + 4 * t4 + 2 * (e & 1) + (i & 1);
    return 8 * i + 2 * t4 + (e & 1);
  }

  // This warp's rows of the merge area: s_o [16 heads, D], s_m / s_l [16].
  __device__ __forceinline__ void stage(float* s_o, float* s_m, float* s_l, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
    quad_sum(l_a, l_b);
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int d0 = out_dim(i, t4, 0), d1 = out_dim(i, t4, 1);
      s_o[g * D + d0] = o[i][0];
      s_o[g * D + d1] = o[i][1];
      s_o[(g + 8) * D + d0] = o[i][2];
      s_o[(g + 8) * D + d1] = o[i][3];
    }
    if (t4 == 0) {
      s_m[g] = m_a;
      s_m[g + 8] = m_b;
      s_l[g] = l_a;
      s_l[g + 8] = l_b;
    }
  }
};

// Keys on the MMA rows, the group's heads (up to 8) as its columns.
template <typename T, typename KV, int D>
struct KeyRowsWarp {
  static constexpr bool kFp8 = kIsFp8<KV>;
  static constexpr int kMaxGroup = 8;
  static constexpr int kStages = 3;
  // Three stages: with ~100 registers a thread, four blocks share an SM (five stages, two blocks:
  // 23 % slower at 64 × 4096).
  static constexpr int kFp8Stages = 3;
  uint32_t qf[D / 16][2];  // Qᵀ as B fragments: head g, k-step kk
  float o[D / 16][4];      // Oᵀ: m-tile i holds 16 dims (out_dim) × heads 2 t4, 2 t4 + 1
  float m[2], l[2];        // heads 2 t4, 2 t4 + 1; l is this lane's share (keys g, g + 8)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < D / 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.f;
  }

  // B fragments of Qᵀ: head g, k rows 2 t4, 2 t4 + 1 (b0) and + 8, + 9 (b1). FP8: those logical
  // rows stand for dims 16 kk + 4 t4 + {0, 2} and {1, 3} (the K fragments' order below).
  __device__ __forceinline__ void load_q(const T* s_q, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (kFp8) {
        const uint2 v =
            *reinterpret_cast<const uint2*>(s_q + swz<D>(g, 2 * kk + (t4 >> 1)) + (t4 & 1) * 4);
        qf[kk][0] = __byte_perm(v.x, v.y, 0x5410);
        qf[kk][1] = __byte_perm(v.x, v.y, 0x7632);
      } else {
        qf[kk][0] = *reinterpret_cast<const uint32_t*>(s_q + swz<D>(g, 2 * kk) + 2 * t4);
        qf[kk][1] = *reinterpret_cast<const uint32_t*>(s_q + swz<D>(g, 2 * kk + 1) + 2 * t4);
      }
    }
  }

  // Sᵀ for this warp's keys: s[0], s[1] key g, heads 2 t4, 2 t4 + 1; s[2], s[3] key g + 8. (Two
  // accumulator chains, even and odd k-steps, measured no faster.)
  __device__ __forceinline__ void scores(const WarpTile<T>& w, int lane, float (&s)[4]) const {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if constexpr (kFp8) {
        const uint32_t lo =
            *reinterpret_cast<const uint32_t*>(w.raw + raw_swz<D>(w.row0 + g, kk) + 4 * t4);
        const uint32_t hi =
            *reinterpret_cast<const uint32_t*>(w.raw + raw_swz<D>(w.row0 + g + 8, kk) + 4 * t4);
        fp8x4_to_pairs_02_13<T, kFp8Interp<KV>>(lo, a[0], a[2]);
        fp8x4_to_pairs_02_13<T, kFp8Interp<KV>>(hi, a[1], a[3]);
      } else {
        ldmatrix_x4(
            a, w.sk + swz<D>(w.row0 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)));
      }
      mma16816<T>(s, a, qf[kk][0], qf[kk][1]);
    }
  }

  // Oᵀ += Vᵀ Pᵀ over the warp's 16 keys (b0, b1: Pᵀ's B fragments). FP8: m-tile c holds chunk c's
  // even dims as rows 0-7 and its odd dims as rows 8-15.
  __device__ __forceinline__ void accumulate_pv(const WarpTile<T>& w, int lane, uint32_t b0,
                                                uint32_t b1) {
    if constexpr (kFp8) {
#pragma unroll
      for (int cc = 0; cc < D / 32; ++cc) {
        uint32_t even[4], odd[4];
        raw_v_pairs<T, KV, D>(w.raw + kTileN * D, w.row0, lane, cc, even, odd);
        const uint32_t a0[4] = {even[0], odd[0], even[1], odd[1]};
        const uint32_t a1[4] = {even[2], odd[2], even[3], odd[3]};
        mma16816<T>(o[2 * cc], a0, b0, b1);
        mma16816<T>(o[2 * cc + 1], a1, b0, b1);
      }
    } else {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t a[4];
        ldmatrix_x4_trans(
            a, w.sv + swz<D>(w.row0 + (lane & 7) + (lane >> 4) * 8, 2 * dp + ((lane >> 3) & 1)));
        mma16816<T>(o[dp], a, b0, b1);
      }
    }
  }

  __device__ __forceinline__ void tile(const WarpTile<T>& w, int lane, float qscale, float cap2) {
    const int g = lane >> 2;
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    scores(w, lane, s);
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = w.key0 + g + 8 * (e >> 1);
      s[e] = key < w.k_end ? soft_cap_log2(s[e] * qscale, cap2) : -INFINITY;
      mx[e & 1] = fmaxf(mx[e & 1], s[e]);
    }
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      mx[0] = fmaxf(mx[0], __shfl_xor_sync(0xffffffffu, mx[0], off));
      mx[1] = fmaxf(mx[1], __shfl_xor_sync(0xffffffffu, mx[1], off));
    }
    // The base of the exponentials (m) moves only when some head's scores pass it by more than
    // kLazyLog2: until then P and the sums grow at most 2^kLazyLog2 against a stale base and the
    // accumulators skip their rescale; the merge divides by sums over the same base.
    constexpr float kLazyLog2 = 8.f;
    if (__any_sync(0xffffffffu, mx[0] > m[0] + kLazyLog2 || mx[1] > m[1] + kLazyLog2)) {
      float corr[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // A head whose keys are all masked so far keeps max -inf; 0 as its base avoids inf - inf.
        corr[h] = exp2f(m[h] - (mx[h] == -INFINITY ? 0.f : mx[h]));
        m[h] = mx[h];
        l[h] *= corr[h];
      }
#pragma unroll
      for (int i = 0; i < D / 16; ++i) {
        o[i][0] *= corr[0];
        o[i][1] *= corr[1];
        o[i][2] *= corr[0];
        o[i][3] *= corr[1];
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float base = m[h] == -INFINITY ? 0.f : m[h];
      s[h] = exp2f(s[h] - base);
      s[h + 2] = exp2f(s[h + 2] - base);
      l[h] += s[h] + s[h + 2];
    }
    // Pᵀ's B fragments (keys 2 t4, 2 t4 + 1 (+ 8) of head g): P's rows of keys g / g + 8,
    // transposed.
    accumulate_pv(w, lane, movmatrix_trans(pack2<T>(s[0], s[1])),
                  movmatrix_trans(pack2<T>(s[2], s[3])));
  }

  // The head dim of accumulator o[i][e] (head 2 t4 + (e & 1)).
  __device__ __forceinline__ static int out_dim(int i, int g, int e) {
    if constexpr (kFp8) return 16 * i + 2 * g + (e >> 1);
    return 16 * i + g + 8 * (e >> 1);
  }

  __device__ __forceinline__ void stage(float* s_o, float* s_m, float* s_l, int lane) {
    const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      l[0] += __shfl_xor_sync(0xffffffffu, l[0], off);
      l[1] += __shfl_xor_sync(0xffffffffu, l[1], off);
    }
#pragma unroll
    for (int i = 0; i < D / 16; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s_o[(2 * t4 + (e & 1)) * D + out_dim(i, g, e)] = o[i][e];
    if (g == 0) {
      s_m[2 * t4] = m[0];
      s_m[2 * t4 + 1] = m[1];
      s_l[2 * t4] = l[0];
      s_l[2 * t4 + 1] = l[1];
    }
  }
};

}  // namespace pagellm::cuda::attention
