// Decode attention for GQA on tensor cores (bf16 / f16, head_dim 64 or 128, 2..16 query heads per
// KV head). The split-KV CUDA-core kernel spends 4-8 dot products and their shuffles on every K/V
// element it loads for a GQA group and ends up arithmetic-bound; here each K/V element costs one
// tensor-core pass (m16n8k16) and the kernel streams the cache. One block = (token, KV head, KV
// split); K/V tiles of 64 keys arrive through a cp.async pipeline; warp w owns keys
// [16w, 16w + 16) of every tile with its own online softmax state, and the four warps merge at the
// end. Each warp's arithmetic is a policy of decode_warps.cuh: the group's heads or the warp's keys
// on the MMA rows. Partial results use the split-KV layout, so the same in-kernel merge joins
// splits. FP8 caches: raw codes travel through a pipeline as deep as the layout's registers and
// shared memory suit, and the warps read their fragments straight from them. See docs/PERF.md.
#pragma once

#include <atomic>
#include <type_traits>

#include "backends/cuda/attention/decode_warps.cuh"
#include "backends/cuda/attention/split_kv.cuh"

namespace pagellm::cuda::attention {

constexpr int kDecodeMmaMaxGroup = 16;

// Pipeline stages: the warp layout's own counts (decode_warps.cuh), for 16-bit and FP8 caches.
template <typename KV, typename Warp>
constexpr int decode_mma_stages() {
  return kIsFp8<KV> ? Warp::kFp8Stages : Warp::kStages;
}

template <typename KV, int D, typename Warp>
constexpr int decode_mma_kv_bytes() {
  // Q [16, D] + stages × (K, V) [64, D], 2-byte elements; FP8: stages of raw (K, V) codes. The
  // final merge reuses the area after Q.
  return 16 * D * 2 + decode_mma_stages<KV, Warp>() * 2 * kTileN * D * sizeof(KV);
}

template <typename KV, int D, typename Warp>
constexpr int decode_mma_smem_bytes() {
  // Then the cache slots of each stage's keys.
  return decode_mma_kv_bytes<KV, D, Warp>() + decode_mma_stages<KV, Warp>() * kTileN * 8;
}

// SPLIT: num_splits > 1 (partial rows and the in-kernel merge). A compile-time choice: the merge
// code in the unsplit kernel cost it 9% at batch 64 (ncu, docs/PERF.md). Warp: HeadRowsWarp or
// KeyRowsWarp (decode_warps.cuh), the MMA layout of each warp's arithmetic.
template <typename T, typename KV, int D, bool SPLIT, typename Warp>
__global__ void __launch_bounds__(kTileThreads)
    decode_mma_kernel(const __grid_constant__ AttentionParams p,
                      const __grid_constant__ AttentionPlan plan, float* __restrict__ partial_out,
                      float* __restrict__ partial_lse, unsigned* __restrict__ counters) {
  constexpr int kChunks = D / 8;
  constexpr int kKvChunks = D * sizeof(KV) / 16;  // 16-byte chunks per cache row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* s_q = reinterpret_cast<T*>(smem_raw);  // [16, D]
  constexpr int kStages = decode_mma_stages<KV, Warp>();
  T* s_kv = s_q + 16 * D;  // [stages, 2, kTileN, D] (16-bit caches); the merge's area
  unsigned char* s_raw = reinterpret_cast<unsigned char*>(s_kv);  // FP8: [stages, 2, kTileN, D]
  // [stages, kTileN]: where the cache row of each key of the tile in that stage starts (slot *
  // num_kv_heads * D; -1 past k_end), found once per key instead of by each of the threads that
  // load a row's chunks.
  int64_t* s_slot = reinterpret_cast<int64_t*>(smem_raw + decode_mma_kv_bytes<KV, D, Warp>());

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

  // Threads < kTileN: the block-table entry of key tid of tile `tile` (-1 at or past k_end), and
  // from it the key's cache row in the tile's stage row of s_slot (visible after the next
  // barrier). In the loop the entry is read an iteration before it is stored: stored at once,
  // its global load's latency stalled warps 0-1, and the barrier all warps, every tile (ncu at
  // batch 16: the loop's largest stall).
  auto table_entry = [&](int tile) {
    const int key = k_begin + tile * kTileN + tid;
    return tid < kTileN && key < k_end ? table[key / p.block_size] : -1;
  };
  auto store_slots = [&](int tile, int entry) {
    if (tid < kTileN) {
      const int key = k_begin + tile * kTileN + tid;
      s_slot[(tile % kStages) * kTileN + tid] =
          entry >= 0 ? slot_of_entry(p, entry, key) * p.num_kv_heads * D : -1;
    }
  };
  // Eight threads to a row (fewer where a row has fewer chunks): thread tid copies 16-byte
  // chunks tid % kRowThreads + 8 c of rows tid / kRowThreads + i * kRowStep of each tile, so a
  // warp's copy fills whole 128-byte lines, and at 256-byte rows (16-bit, D = 128) a thread's
  // slot read and address serve both halves of its row. Both swizzles move a chunk by row & 7
  // (D = 64 FP8: (row >> 1) & 3) within its 128 bytes, the same for all of a thread's rows, so
  // its destinations are one offset plus whole rows and half rows.
  constexpr int kRowThreads = kKvChunks < 8 ? kKvChunks : 8;
  constexpr int kRowChunks = kKvChunks / kRowThreads;  // 16-byte chunks a thread copies per row
  constexpr int kRowStep = kTileThreads / kRowThreads;
  static_assert(kTileThreads % kRowThreads == 0 && kRowStep % 8 == 0 && kTileN % kRowStep == 0,
                "a thread's rows share their swizzle");
  using Dst = std::conditional_t<kIsFp8<KV>, unsigned char, T>;  // raw codes or 16-bit rows
  Dst* const s_dst = reinterpret_cast<Dst*>(s_kv);               // FP8: s_raw, the same bytes
  const int dst0 = kIsFp8<KV> ? raw_swz<D>(tid / kRowThreads, tid % kRowThreads)
                              : swz<D>(tid / kRowThreads, tid % kRowThreads);
  constexpr int kChunkElems = 16 / sizeof(KV);  // elements (or codes) of a 16-byte chunk
  const int src0 = (tid % kRowThreads) * kChunkElems;
  auto load_tile = [&](int tile) {
    const int stage = tile % kStages;
    const int64_t* rows = s_slot + stage * kTileN + tid / kRowThreads;
    Dst* dst = s_dst + stage * 2 * kTileN * D + dst0;  // K; V follows at kTileN * D
#pragma unroll
    for (int i = 0; i < kTileN / kRowStep; ++i) {
      const int64_t row = rows[i * kRowStep];
      const int64_t src = row >= 0 ? row + src0 : 0;
      const int bytes = row >= 0 ? 16 : 0;  // zero-filled past k_end
#pragma unroll
      for (int c = 0; c < kRowChunks; ++c) {
        const int half = c * 8 * kChunkElems;  // chunk + 8 c: the row's next 128 bytes
        const int at = i * kRowStep * D + half;
        cp_async16(dst + at, k_base + src + half, bytes);
        cp_async16(dst + kTileN * D + at, v_base + src + half, bytes);
      }
    }
  };
  // The block tables come from the host: every stage's slots, and the entries of the tile after
  // them, are read before the wait.
#pragma unroll
  for (int t = 0; t < kStages; ++t) store_slots(t, table_entry(t));
  int next_entry = table_entry(kStages);
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

  const float qscale = p.scale * kLog2e * kv_scale<KV>(p.k_scale);
  const float cap2 = p.softcap * kLog2e;
  Warp w;
  w.init();
  for (int j = 0; j < n_tiles; ++j) {
    if (j + kStages - 1 < n_tiles) load_tile(j + kStages - 1);
    cp_async_commit();
    cp_async_wait<kStages - 1>();
    __syncthreads();
    // Tile j's slots are spent: every thread issued its loads (an iteration ago or in the
    // prologue) before the barrier above. Its row takes tile j + kStages's, for the next
    // iteration's load (after this one's closing barrier), from the entries read an iteration
    // ago; then the next tile's entries are read.
    if (j + kStages < n_tiles) {
      store_slots(j + kStages, next_entry);
      next_entry = table_entry(j + kStages + 1);
    }
    if (j == 0) w.load_q(s_q, lane);
    const T* sk = s_kv + (j % kStages) * 2 * kTileN * D;  // 16-bit caches
    // A warp whose keys of this tile are all past k_end keeps max -inf (handled by the step).
    const WarpTile<T> wt{s_raw + (j % kStages) * 2 * kTileN * D, sk,   sk + kTileN * D, warp * 16,
                         k_begin + j * kTileN + warp * 16,       k_end};
    w.tile(wt, lane, qscale, cap2);
    __syncthreads();  // the stage just read is refilled kStages - 1 iterations later
  }
  cp_async_wait<0>();
  // The cache is read: the next kernel (the o projection) may start its weight stream while the
  // warps and splits merge (common.cuh: launch the dependents late).
  pdl_launch_dependents();
  __syncthreads();

  // Merge the four warps' states (16 head rows each) through the K/V area.
  float* s_o = reinterpret_cast<float*>(s_kv);  // [4 warps, 16 rows, D]
  float* s_m = s_o + 4 * 16 * D;                // [4, 16]
  float* s_l = s_m + 4 * 16;                    // [4, 16]
  w.stage(s_o + warp * 16 * D, s_m + warp * 16, s_l + warp * 16, lane);
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

template <typename T, typename KV, int D, typename Warp>
cudaError_t launch_decode_mma_config(const AttentionParams& p, const AttentionPlan& plan,
                                     float* partial_out, float* partial_lse, cudaStream_t stream) {
  constexpr int kSmem = decode_mma_smem_bytes<KV, D, Warp>();
  constexpr int kArea = decode_mma_kv_bytes<KV, D, Warp>();  // Q and the K/V stages
  static_assert(16 * D * 2 + 4 * 16 * D * 4 + 2 * 4 * 16 * 4 <= kArea, "merge area fits");
  static_assert(16 * D * 2 + kDecodeMmaMaxGroup * kCombineMaxSplits * 4 <= kArea,
                "split weights fit");
  static_assert(kDecodeMmaMaxGroup <= kMergeMaxHeads, "merge_splits_if_last takes the group");
  const bool split = plan.num_splits > 1;
  auto* kernel =
      split ? decode_mma_kernel<T, KV, D, true, Warp> : decode_mma_kernel<T, KV, D, false, Warp>;
  const cudaError_t attr =
      split ? allow_dynamic_smem<decode_mma_kernel<T, KV, D, true, Warp>>(kSmem)
            : allow_dynamic_smem<decode_mma_kernel<T, KV, D, false, Warp>>(kSmem);
  if (attr != cudaSuccess) return attr;
  if (plan.num_splits > 65535 || p.num_kv_heads > 65535) return cudaErrorInvalidValue;
  dim3 grid(plan.num_split_items, p.num_kv_heads, plan.num_splits);
  return launch_kernel(kernel, grid, kTileThreads, kSmem, stream, p, plan, partial_out, partial_lse,
                       plan.split_counters);
}

// Whether launch_decode_mma serves this call (else the CUDA-core split-KV kernel does).
inline bool decode_mma_applies(const AttentionParams& p) {
  const int group = p.num_heads / p.num_kv_heads;
  return (p.dtype == DType::kBF16 || p.dtype == DType::kF16) &&
         (p.head_dim == 64 || p.head_dim == 128) && group >= 2 && group <= kDecodeMmaMaxGroup &&
         aligned16(p.q) && aligned16(p.k_cache) && aligned16(p.v_cache) &&
         (p.q_token_stride * 2) % 16 == 0;
}

// Whether this call's warps put keys on the MMA rows (KeyRowsWarp): groups of up to 8, unless
// switched off (docs/PERF.md: the layouts measured side by side).
template <typename KV>
bool decode_key_rows(const AttentionParams& p) {
  if (p.num_heads / p.num_kv_heads > KeyRowsWarp<__nv_bfloat16, KV, 64>::kMaxGroup) return false;
  switch (decode_mma_layout()) {
    case DecodeMmaLayout::kHeadRows:
      return false;
    case DecodeMmaLayout::kKeyRows:
      return true;
    case DecodeMmaLayout::kAuto:
      break;
  }
  return true;
}

template <typename T, typename KV, int D>
cudaError_t launch_decode_mma_d(const AttentionParams& p, const AttentionPlan& plan,
                                float* partial_out, float* partial_lse, cudaStream_t stream) {
  if (decode_key_rows<KV>(p))
    return launch_decode_mma_config<T, KV, D, KeyRowsWarp<T, KV, D>>(p, plan, partial_out,
                                                                     partial_lse, stream);
  return launch_decode_mma_config<T, KV, D, HeadRowsWarp<T, KV, D>>(p, plan, partial_out,
                                                                    partial_lse, stream);
}

template <typename T, typename KV>
cudaError_t launch_decode_mma(const AttentionParams& p, const AttentionPlan& plan,
                              float* partial_out, float* partial_lse, cudaStream_t stream) {
  if (p.head_dim == 64)
    return launch_decode_mma_d<T, KV, 64>(p, plan, partial_out, partial_lse, stream);
  return launch_decode_mma_d<T, KV, 128>(p, plan, partial_out, partial_lse, stream);
}

// Blocks of one tensor-core decode kernel (the split variant) an SM holds at once (its registers
// and shared memory), asked once per process.
template <typename T, typename KV, int D, typename Warp>
int decode_mma_blocks_per_sm() {
  static std::atomic<int> known{0};
  int n = known.load(std::memory_order_relaxed);
  if (n > 0) return n;
  constexpr int kSmem = decode_mma_smem_bytes<KV, D, Warp>();
  if (allow_dynamic_smem<decode_mma_kernel<T, KV, D, true, Warp>>(kSmem) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, decode_mma_kernel<T, KV, D, true, Warp>,
                                                    kTileThreads, kSmem) != cudaSuccess ||
      n < 1)
    return kSplitKvBlocksPerSm;
  known.store(n, std::memory_order_relaxed);
  return n;
}

template <typename T, typename KV>
int split_kv_blocks_per_sm(const AttentionParams& p) {
  if constexpr (!std::is_same_v<T, float>) {
    if (decode_tensor_cores_enabled() && decode_mma_applies(p)) {
      const bool keys = decode_key_rows<KV>(p);
      if (p.head_dim == 64)
        return keys ? decode_mma_blocks_per_sm<T, KV, 64, KeyRowsWarp<T, KV, 64>>()
                    : decode_mma_blocks_per_sm<T, KV, 64, HeadRowsWarp<T, KV, 64>>();
      return keys ? decode_mma_blocks_per_sm<T, KV, 128, KeyRowsWarp<T, KV, 128>>()
                  : decode_mma_blocks_per_sm<T, KV, 128, HeadRowsWarp<T, KV, 128>>();
    }
  }
  return kSplitKvBlocksPerSm;
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
