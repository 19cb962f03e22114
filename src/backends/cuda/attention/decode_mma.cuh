// Decode attention for GQA on tensor cores (bf16 / f16, head_dim 64 or 128, 2..16 query heads per
// KV head). The split-KV CUDA-core kernel spends 4-8 dot products and their shuffles on every K/V
// element it loads for a GQA group and ends up arithmetic-bound; here the group's query heads form
// the 16 rows of an m16n8k16 tile, so each K/V element costs one tensor-core pass and the kernel
// streams the cache. One block = (token, KV head, KV split); K/V tiles of 64 keys arrive through a
// three-stage cp.async pipeline; warp w owns keys [16w, 16w + 16) of every tile with its own online
// softmax state, and the four warps merge at the end. Partial results use the split-KV layout, so
// the same in-kernel merge joins splits. FP8 caches: raw codes travel through a deeper pipeline
// (five stages: measured faster than three with either two or three blocks per SM), and each warp
// reads its K fragments straight from the raw codes (one 4-byte read per fragment: Q's dims are
// permuted to match, load_q_fragments) and its V fragments by ldmatrix.trans over byte pairs
// (accumulate_pv_raw): no tile is converted in shared memory. See docs/PERF.md.
#pragma once

#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/attention/split_kv.cuh"
#include "backends/cuda/attention/tile.cuh"

namespace pagellm::cuda::attention {

constexpr int kDecodeMmaStages = 3;
constexpr int kDecodeMmaFp8Stages = 5;
constexpr int kDecodeMmaMaxGroup = 16;

template <typename KV, int D>
constexpr int decode_mma_kv_bytes() {
  // Q [16, D] + stages × (K, V) [64, D], 2-byte elements; FP8: stages of raw (K, V) codes. The
  // final merge reuses the area after Q.
  if constexpr (kIsFp8<KV>) return 16 * D * 2 + kDecodeMmaFp8Stages * 2 * kTileN * D;
  return (16 + kDecodeMmaStages * 2 * kTileN) * D * 2;
}

template <typename KV, int D>
constexpr int decode_mma_smem_bytes() {
  // Then the cache slots of each stage's keys.
  constexpr int stages = kIsFp8<KV> ? kDecodeMmaFp8Stages : kDecodeMmaStages;
  return decode_mma_kv_bytes<KV, D>() + stages * kTileN * 8;
}

// The Q fragments of every k-step (rows g and g + 8 of the group's heads). 16-bit caches: the
// mma's layout, by ldmatrix. FP8 caches: k-step kk's logical columns 2 t4, 2 t4 + 1 (and + 8, + 9)
// are the dims 16 kk + 4 t4 .. + 3 of the row, in that order, so that a lane's K fragment is one
// 4-byte read of the raw codes (the sum over dims does not depend on their order).
template <typename T, int D, bool kFp8>
__device__ __forceinline__ void load_q_fragments(const T* s_q, int lane,
                                                 uint32_t (&qf)[D / 16][4]) {
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

// P·V for FP8 caches, from the raw V codes of this warp's 16 keys (rows row0 .. row0 + 15 of the
// tile, chunks laid out by raw_swz): ldmatrix.trans over byte pairs hands lane (g, t4) keys 2 t4,
// 2 t4 + 1 of dims 16 c + 2 g and + 1, which split into the B fragments of two n-tiles, one for
// the even dims of the chunk and one for the odd (pv_out_dim says which dims an accumulator
// holds). The V tile is never converted in shared memory.
template <typename T, typename KV, int D>
__device__ __forceinline__ void accumulate_pv_raw(const unsigned char* raw_v, int row0, int lane,
                                                  const uint32_t (&a)[4], float (&o)[D / 8][4]) {
#pragma unroll
  for (int cc = 0; cc < D / 32; ++cc) {
    // Matrices: keys 0-7 / 8-15 of chunk 2 cc, then of chunk 2 cc + 1.
    uint32_t r[4];
    ldmatrix_x4_trans(
        r, raw_v + raw_swz<D>(row0 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * cc + (lane >> 4)));
    uint32_t even[4], odd[4];  // (key 2 t4, key 2 t4 + 1) pairs at dim 2 g, at dim 2 g + 1
#pragma unroll
    for (int m = 0; m < 4; ++m)
      fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(__byte_perm(r[m], 0, 0x3120), even[m], odd[m]);
    mma16816<T>(o[4 * cc], a, even[0], even[1]);
    mma16816<T>(o[4 * cc + 1], a, odd[0], odd[1]);
    mma16816<T>(o[4 * cc + 2], a, even[2], even[3]);
    mma16816<T>(o[4 * cc + 3], a, odd[2], odd[3]);
  }
}

// The head dim of P·V accumulator o[i][e] (e odd: the second column) for lane quad position t4:
// 16-bit caches, the mma's own order; FP8 caches, accumulate_pv_raw's (n-tile i = 2 c + parity,
// column n = 2 t4 (+ 1) stands for dim 16 c + 2 n + parity).
template <bool kFp8>
__device__ __forceinline__ int pv_out_dim(int i, int t4, int e) {
  if constexpr (kFp8) return 16 * (i >> 1) + 4 * t4 + 2 * (e & 1) + (i & 1);
  return 8 * i + 2 * t4 + (e & 1);
}

// SPLIT: num_splits > 1 (partial rows and the in-kernel merge). A compile-time choice: the merge
// code in the unsplit kernel cost it 9% at batch 64 (ncu, docs/PERF.md).
template <typename T, typename KV, int D, bool SPLIT>
__global__ void __launch_bounds__(kTileThreads)
    decode_mma_kernel(const __grid_constant__ AttentionParams p,
                      const __grid_constant__ AttentionPlan plan, float* __restrict__ partial_out,
                      float* __restrict__ partial_lse, unsigned* __restrict__ counters) {
  constexpr bool kFp8 = kIsFp8<KV>;
  constexpr int kChunks = D / 8;
  constexpr int kKvChunks = D * sizeof(KV) / 16;  // 16-byte chunks per cache row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_q = reinterpret_cast<T*>(smem_raw);  // [16, D]
  constexpr int kStages = kFp8 ? kDecodeMmaFp8Stages : kDecodeMmaStages;
  T* s_kv = s_q + 16 * D;  // [stages, 2, kTileN, D] (16-bit caches); the merge's area
  unsigned char* s_raw = reinterpret_cast<unsigned char*>(s_kv);  // FP8: [stages, 2, kTileN, D]
  // [stages, kTileN]: the cache slot of each key of the tile in that stage (-1 past k_end), looked
  // up once per key instead of by each of the 16 threads that load a row's chunks.
  int64_t* s_slot = reinterpret_cast<int64_t*>(smem_raw + decode_mma_kv_bytes<KV, D>());

  const int item = blockIdx.x;
  const int token = plan.split_items[2 * item];
  const int seq = plan.split_items[2 * item + 1];
  const int group = p.num_heads / p.num_kv_heads;
  const int kv_head = blockIdx.y;
  const int head0 = kv_head * group;
  const int n_keys = p.seq_lens[seq] - (p.query_start_loc[seq + 1] - token) + 1;
  const int k_first = first_key(n_keys, p.window);
  const int splits = SPLIT ? active_splits(n_keys - k_first, plan.num_splits) : 1;
  if (blockIdx.z >= splits) return;  // the whole block
  const int per_split = (n_keys - k_first + splits - 1) / splits;
  const int k_begin = k_first + blockIdx.z * per_split;
  const int k_end = min(n_keys, k_begin + per_split);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + kTileN - 1) / kTileN : 0;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const KV* k_base = static_cast<const KV*>(p.k_cache) + static_cast<int64_t>(kv_head) * D;
  const KV* v_base = static_cast<const KV*>(p.v_cache) + static_cast<int64_t>(kv_head) * D;

  // The slots of tile `tile`'s keys into its stage's row of s_slot (threads < kTileN; visible
  // after the next barrier).
  auto find_slots = [&](int tile) {
    if (tid < kTileN)
      s_slot[(tile % kStages) * kTileN + tid] =
          kv_slot(p, table, k_begin + tile * kTileN + tid, k_end);
  };
  auto load_tile = [&](int tile) {
    const int stage = tile % kStages;
    T* sk = s_kv + stage * 2 * kTileN * D;  // 16-bit caches only
    for (int c = tid; c < kTileN * kKvChunks; c += kTileThreads)
      load_kv_chunk_at<T, KV, D, true>(p, k_base, v_base, s_slot[stage * kTileN + c / kKvChunks],
                                       c / kKvChunks, c % kKvChunks, s_raw + stage * 2 * kTileN * D,
                                       sk, sk + kTileN * D);
  };
  // The block tables come from the host: every stage's slots are found before the wait.
#pragma unroll
  for (int t = 0; t < kStages; ++t) find_slots(t);
  __syncthreads();
  // Before waiting for the kernel before (common.cuh: programmatic dependent launch): the step's
  // metadata above came from the host, and so do the cache rows of keys before this step's own,
  // which the RoPE + KV-write kernel before writes. First tiles holding only such keys are loaded
  // now, under that kernel; Q and the rest after the wait.
  const int step_keys = p.seq_lens[seq] - (p.query_start_loc[seq + 1] - p.query_start_loc[seq]);
  bool early[kStages - 1];
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    early[t] = t < n_tiles && min(k_end, k_begin + (t + 1) * kTileN) <= step_keys;
    if (early[t]) load_tile(t);
  }
  pdl_wait();
  // Q rows: the group's heads; rows past the group are zero.
  const T* q_row0 = static_cast<const T*>(p.q) + static_cast<int64_t>(token) * p.q_token_stride +
                    static_cast<int64_t>(head0) * D;
  for (int c = tid; c < 16 * kChunks; c += kTileThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool valid = r < group;
    cp_async16(s_q + swz<D>(r, ch), valid ? q_row0 + r * D + ch * 8 : q_row0, valid ? 16 : 0);
  }
  // Group 0 holds Q, tile 0 and the early tiles; one group per later tile (possibly empty).
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < n_tiles && !early[t]) load_tile(t);
    cp_async_commit();
  }

  const int g = lane >> 2, t4 = lane & 3;
  const float qscale = p.scale * kLog2e * kv_scale<KV>(p.k_scale);
  const float cap2 = p.softcap * kLog2e;
  uint32_t qf[D / 16][4];
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;

  const int row0 = warp * 16;  // this warp's first key row of the tile
  for (int j = 0; j < n_tiles; ++j) {
    if (j + kStages - 1 < n_tiles) load_tile(j + kStages - 1);
    // Tile j's slots are spent (it was issued kStages - 1 iterations ago): its row takes tile
    // j + kStages's, for the next iteration's load (after this one's closing barrier).
    if (j + kStages < n_tiles) find_slots(j + kStages);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    if (j == 0) load_q_fragments<T, D, kFp8>(s_q, lane, qf);
    const unsigned char* raw = s_raw + (j % kStages) * 2 * kTileN * D;  // FP8 only
    const T* sk = s_kv + (j % kStages) * 2 * kTileN * D;                // 16-bit caches
    const T* sv = sk + kTileN * D;
    // S = Q Kᵀ over this warp's 16 keys (two n-tiles of 8).
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      if constexpr (kFp8) {
        // K fragments straight from the raw codes: key 8 n + g, its dims 16 kk + 4 t4 .. + 3 (the
        // k order of load_q_fragments), one 4-byte read and a conversion per n-tile.
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const uint32_t four =
              *reinterpret_cast<const uint32_t*>(raw + raw_swz<D>(row0 + n * 8 + g, kk) + 4 * t4);
          uint32_t b0, b1;
          fp8x4_to_pairs_fast<T, kFp8Interp<KV>>(four, b0, b1);
          mma16816<T>(s[n], qf[kk], b0, b1);
        }
      } else {
        uint32_t b[4];
        ldmatrix_x4(b,
                    sk + swz<D>(row0 + (lane >> 4) * 8 + (lane & 7), 2 * kk + ((lane >> 3) & 1)));
        mma16816<T>(s[0], qf[kk], b[0], b[1]);
        mma16816<T>(s[1], qf[kk], b[2], b[3]);
      }
    }
    const int key0 = k_begin + j * kTileN + warp * 16;
    // A warp whose keys of this tile are all past k_end keeps max -inf (handled by the step).
    const auto scale_mask = [&](int n, int e, float raw) {
      const int key = key0 + n * 8 + 2 * t4 + (e & 1);
      return key < k_end ? soft_cap_log2(raw * qscale, cap2) : -INFINITY;
    };
    float corr_a, corr_b;
    online_softmax_step(s, scale_mask, m_a, m_b, l_a, l_b, corr_a, corr_b);
    uint32_t a[4] = {pack2<T>(s[0][0], s[0][1]), pack2<T>(s[0][2], s[0][3]),
                     pack2<T>(s[1][0], s[1][1]), pack2<T>(s[1][2], s[1][3])};
    rescale_rows(o, corr_a, corr_b);
    if constexpr (kFp8) {
      accumulate_pv_raw<T, KV, D>(raw + kTileN * D, row0, lane, a, o);
    } else {
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            b, sv + swz<D>(row0 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4)));
        mma16816<T>(o[2 * dp], a, b[0], b[1]);
        mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage just read is refilled kStages - 1 iterations later
  }
  cp_async_wait<0>();
  // The cache is read: the next kernel (the o projection) may start its weight stream while the
  // warps and splits merge (common.cuh: launch the dependents late).
  pdl_launch_dependents();
  __syncthreads();

  // Merge the four warps' states (rows g and g + 8 of each) through the K/V area.
  quad_sum(l_a, l_b);
  float* s_o = reinterpret_cast<float*>(s_kv);  // [4 warps, 16 rows, D]
  float* s_m = s_o + 4 * 16 * D;                // [4, 16]
  float* s_l = s_m + 4 * 16;                    // [4, 16]
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    const int d0 = pv_out_dim<kFp8>(i, t4, 0), d1 = pv_out_dim<kFp8>(i, t4, 1);
    s_o[(warp * 16 + g) * D + d0] = o[i][0];
    s_o[(warp * 16 + g) * D + d1] = o[i][1];
    s_o[(warp * 16 + g + 8) * D + d0] = o[i][2];
    s_o[(warp * 16 + g + 8) * D + d1] = o[i][3];
  }
  if (t4 == 0) {
    s_m[warp * 16 + g] = m_a;
    s_m[warp * 16 + g + 8] = m_b;
    s_l[warp * 16 + g] = l_a;
    s_l[warp * 16 + g + 8] = l_b;
  }
  __syncthreads();
  for (int i = tid; i < group * D; i += kTileThreads) {
    const int r = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) mx = fmaxf(mx, s_m[w * 16 + r]);
    float sum_l = 0.f, sum_o = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float c = exp2f(s_m[w * 16 + r] - mx);
        sum_l += s_l[w * 16 + r] * c;
        sum_o += s_o[(w * 16 + r) * D + d] * c;
      }
    }
    const float out_v = sum_l > 0.f ? sum_o * kv_scale<KV>(p.v_scale) / sum_l : 0.f;
    const int head = head0 + r;
    if constexpr (!SPLIT) {
      static_cast<T*>(p.out)[(static_cast<int64_t>(token) * p.num_heads + head) * D + d] =
          from_float<T>(out_v);
    } else {
      const int64_t row =
          (static_cast<int64_t>(item) * p.num_heads + head) * plan.num_splits + blockIdx.z;
      partial_out[row * D + d] = out_v;
      if (d == 0) partial_lse[row] = sum_l > 0.f ? mx + log2f(sum_l) : -INFINITY;
    }
  }
  if constexpr (SPLIT)  // the split weights go where the K/V stages were
    merge_splits_if_last<T>(p, plan, item, token, head0, group, splits, partial_out, partial_lse,
                            counters + int64_t{item} * gridDim.y + blockIdx.y,
                            reinterpret_cast<float*>(s_kv));
}

template <typename T, typename KV, int D>
cudaError_t launch_decode_mma_config(const AttentionParams& p, const AttentionPlan& plan,
                                     float* partial_out, float* partial_lse, cudaStream_t stream) {
  constexpr int kSmem = decode_mma_smem_bytes<KV, D>();
  constexpr int kArea = decode_mma_kv_bytes<KV, D>();  // Q and the K/V stages
  static_assert(16 * D * 2 + 4 * 16 * D * 4 + 2 * 4 * 16 * 4 <= kArea, "merge area fits");
  static_assert(16 * D * 2 + kDecodeMmaMaxGroup * kCombineMaxSplits * 4 <= kArea,
                "split weights fit");
  static_assert(kDecodeMmaMaxGroup <= kMergeMaxHeads, "merge_splits_if_last takes the group");
  const bool split = plan.num_splits > 1;
  auto* kernel = split ? decode_mma_kernel<T, KV, D, true> : decode_mma_kernel<T, KV, D, false>;
  const cudaError_t attr = split ? allow_dynamic_smem<decode_mma_kernel<T, KV, D, true>>(kSmem)
                                 : allow_dynamic_smem<decode_mma_kernel<T, KV, D, false>>(kSmem);
  if (attr != cudaSuccess) return attr;
  if (plan.num_splits > 65535 || p.num_kv_heads > 65535) return cudaErrorInvalidValue;
  dim3 grid(plan.num_split_items, p.num_kv_heads, plan.num_splits);
  return launch_kernel(kernel, grid, kTileThreads, kSmem, stream, p, plan, partial_out,
                       partial_lse, plan.split_counters);
}

// Whether launch_decode_mma serves this call (else the CUDA-core split-KV kernel does).
inline bool decode_mma_applies(const AttentionParams& p) {
  const int group = p.num_heads / p.num_kv_heads;
  return (p.dtype == DType::kBF16 || p.dtype == DType::kF16) &&
         (p.head_dim == 64 || p.head_dim == 128) && group >= 2 && group <= kDecodeMmaMaxGroup &&
         aligned16(p.q) && aligned16(p.k_cache) && aligned16(p.v_cache) &&
         (p.q_token_stride * 2) % 16 == 0;
}

template <typename T, typename KV>
cudaError_t launch_decode_mma(const AttentionParams& p, const AttentionPlan& plan,
                              float* partial_out, float* partial_lse, cudaStream_t stream) {
  if (p.head_dim == 64)
    return launch_decode_mma_config<T, KV, 64>(p, plan, partial_out, partial_lse, stream);
  return launch_decode_mma_config<T, KV, 128>(p, plan, partial_out, partial_lse, stream);
}

template <typename T, typename KV>
cudaError_t launch_split_kv(const AttentionParams& p, const AttentionPlan& plan, float* partial_out,
                            float* partial_lse, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (decode_tensor_cores_enabled() && decode_mma_applies(p))
      return launch_decode_mma<T, KV>(p, plan, partial_out, partial_lse, stream);
  }
  return launch_split_kv_cuda_cores<T, KV>(p, plan, partial_out, partial_lse, stream);
}

}  // namespace pagellm::cuda::attention
