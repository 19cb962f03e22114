// Split-KV ("flash-decoding") paged attention on CUDA cores: one query token per block row of work,
// its context split into num_splits ranges that run as separate blocks, then merged by their
// log-sum-exp. Serves decode tokens (and any token whose dtype / head_dim the tile kernel lacks),
// so it must be right for every shape; GQA heads of one KV head share each K/V load. FP8 caches:
// each lane loads its ELEMS codes (8 bytes on the vectorized path) and converts them to floats; the
// per-tensor scales fold into the query (k) and the output (v).
//
// Included once per dtype by split_kv_<dtype>.cu.
#pragma once

#include <cfloat>

#include "backends/cuda/attention/attention_internal.h"
#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"

namespace pagellm::cuda::attention {

constexpr int kSplitKvThreads = 128;
constexpr int kSplitKvWarps = kSplitKvThreads / 32;
constexpr float kLog2e = 1.4426950408889634f;
// The most query heads one block merges (the tensor-core decode kernel's largest GQA group).
constexpr int kMergeMaxHeads = 16;

// The splits of a token with n_keys keys that do work: the plan's count, or fewer so that each
// has at least kMinSplitKeys keys (graphs fix the count for the longest context, and at short
// contexts the blocks past these exit at once; the merge then reads fewer partial rows).
__device__ __forceinline__ int active_splits(int n_keys, int num_splits) {
  return max(1, min(num_splits, (n_keys + kMinSplitKeys - 1) / kMinSplitKeys));
}

// A "key group" of LANES lanes holds one key row: lane l owns ELEMS elements, contiguous at
// l * ELEMS (CONTIG, 16-byte loads, head_dim == LANES * ELEMS) or strided at l + 32 * e (generic:
// LANES == 32, elements past head_dim read as 0).
template <typename T, int LANES, int ELEMS, bool CONTIG>
struct RowAccess {
  static constexpr int kDims = CONTIG ? LANES * ELEMS : 32 * ELEMS;  // dims covered per row
  __device__ static int dim(int lane_in_group, int e) {
    return CONTIG ? lane_in_group * ELEMS + e : lane_in_group + 32 * e;
  }
  // Row elements of type S: T (q, 16-bit caches) or an FP8 code.
  template <typename S>
  __device__ static void load(const S* row, int lane_in_group, int head_dim, float (&out)[ELEMS]) {
    if constexpr (CONTIG && kIsFp8<S>) {
      static_assert(ELEMS == 8, "contiguous FP8 rows use 8-byte accesses");
      const uint2 w = *reinterpret_cast<const uint2*>(row + lane_in_group * ELEMS);
      const uint32_t words[2] = {w.x, w.y};
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const float2 lo = fp8x2_to_float2<kFp8Interp<S>>(words[i] & 0xffffu);
        const float2 hi = fp8x2_to_float2<kFp8Interp<S>>(words[i] >> 16);
        out[4 * i] = lo.x;
        out[4 * i + 1] = lo.y;
        out[4 * i + 2] = hi.x;
        out[4 * i + 3] = hi.y;
      }
    } else if constexpr (CONTIG) {
      static_assert(ELEMS == 16 / sizeof(T), "contiguous rows use 16-byte accesses");
      load16(row + lane_in_group * ELEMS, out);
    } else {
#pragma unroll
      for (int e = 0; e < ELEMS; ++e) {
        const int d = lane_in_group + 32 * e;
        out[e] = d < head_dim ? element(row[d]) : 0.f;
      }
    }
  }
  template <typename S>
  __device__ static float element(S v) {
    if constexpr (kIsFp8<S>) {
      return fp8x2_to_float2<kFp8Interp<S>>(*reinterpret_cast<const uint8_t*>(&v)).x;
    } else {
      return to_float(v);
    }
  }
};

// The split merge, run by the block that finishes last among the `splits` active blocks of one
// (item, head group): a separate combine kernel cost a launch and, at batch 1, a chain of dependent
// loads per layer. Every active block calls this after writing its partial rows; after a barrier,
// thread 0 fences (release: the rows the barrier ordered before it become visible first) and adds
// one to the group's counter; the block that sees splits - 1 fences again (acquire), merges heads
// [head0, head0 + num_g) into p.out and puts the counter back to 0 for the next launch (every other
// block of the group has counted by then). The partial rows are read with __ldcg: written by other
// blocks of this launch, they must not come from this SM's L1. s_w: shared scratch of at least
// num_g * splits floats, free once the block's own rows are written. Sums run in split order.
template <typename T>
__device__ void merge_splits_if_last(const AttentionParams& p, const AttentionPlan& plan, int item,
                                     int token, int head0, int num_g, int splits,
                                     const float* __restrict__ partial_out,
                                     const float* __restrict__ partial_lse, unsigned* counter,
                                     float* s_w) {
  __shared__ bool s_last;
  __shared__ float s_sum[kMergeMaxHeads];
  __syncthreads();
  const int num_splits = plan.num_splits;  // the partial rows' stride
  if (threadIdx.x == 0) {
    __threadfence();
    s_last = atomicAdd(counter, 1u) == unsigned(splits - 1);
    if (s_last) {
      __threadfence();
      *counter = 0u;
    }
  }
  __syncthreads();
  if (!s_last) return;
  const int64_t row0 = (static_cast<int64_t>(item) * p.num_heads + head0) * num_splits;
  // One warp per head: the max of the split lse, then the split weights and their sum.
  const int lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  for (int g = threadIdx.x >> 5; g < num_g; g += nwarps) {
    const float* lse = partial_lse + row0 + int64_t{g} * num_splits;
    float mx = -INFINITY;
    for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, __ldcg(lse + s));
    mx = warp_max(mx);
    float sum = 0.f;
    for (int s = lane; s < splits; s += 32) {
      const float v = __ldcg(lse + s);
      const float w = mx == -INFINITY || v == -INFINITY ? 0.f : exp2f(v - mx);
      s_w[g * splits + s] = w;
      sum += w;
    }
    sum = warp_sum(sum);
    if (lane == 0) s_sum[g] = sum;
  }
  __syncthreads();
  // Outputs four dimensions per thread where head_dim allows (16-byte partial loads).
  const int vec = p.head_dim % 4 == 0 ? 4 : 1;
  const int per_head = p.head_dim / vec;
  for (int i = threadIdx.x; i < num_g * per_head; i += blockDim.x) {
    const int g = i / per_head, d = (i % per_head) * vec;
    const float* part = partial_out + (row0 + int64_t{g} * num_splits) * p.head_dim + d;
    const float* w = s_w + g * splits;
    float o[4] = {0.f, 0.f, 0.f, 0.f};
    if (vec == 4) {
#pragma unroll 8
      for (int s = 0; s < splits; ++s) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(part + int64_t{s} * p.head_dim));
        if (w[s] != 0.f) {
          o[0] += w[s] * v.x, o[1] += w[s] * v.y;
          o[2] += w[s] * v.z, o[3] += w[s] * v.w;
        }
      }
    } else {
#pragma unroll 8
      for (int s = 0; s < splits; ++s) {
        const float v = __ldcg(part + int64_t{s} * p.head_dim);
        if (w[s] != 0.f) o[0] += w[s] * v;
      }
    }
    const float sum = s_sum[g];
    T* out = static_cast<T*>(p.out) +
             (static_cast<int64_t>(token) * p.num_heads + head0 + g) * p.head_dim + d;
#pragma unroll
    for (int e = 0; e < 4; ++e)  // a constant bound keeps o in registers (no stack frame)
      if (e < vec) out[e] = from_float<T>(sum > 0.f ? o[e] / sum : 0.f);
  }
}

// grid: (num_split_items, num_kv_heads * head chunks, num_splits); block: 128 threads. SPLIT:
// num_splits > 1 (partial rows and the in-kernel merge), compiled apart so that the unsplit kernel
// carries no merge code (it slowed the tensor-core decode kernel by 9%, docs/PERF.md).
// Keys are dealt round-robin to the block's key groups, U keys per group per iteration so that 2U
// 16-byte loads are in flight per lane before the first use.
template <typename T, typename KV, int LANES, int ELEMS, bool CONTIG, int G_TILE, bool SPLIT>
__global__ void __launch_bounds__(kSplitKvThreads)
    split_kv_kernel(const __grid_constant__ AttentionParams p,
                    const __grid_constant__ AttentionPlan plan, float* __restrict__ partial_out,
                    float* __restrict__ partial_lse, unsigned* __restrict__ counters) {
  pdl_launch_dependents();
  pdl_wait();
  using Row = RowAccess<T, LANES, ELEMS, CONTIG>;
  constexpr int kGroupsPerWarp = 32 / LANES;
  constexpr int kGroups = kSplitKvWarps * kGroupsPerWarp;
  constexpr int U = G_TILE >= 8 ? 2 : 4;
  constexpr int kDims = Row::kDims;
  __shared__ float s_m[kSplitKvWarps][G_TILE];
  __shared__ float s_l[kSplitKvWarps][G_TILE];
  // The warps' accumulators, then the split weights of merge_splits_if_last.
  constexpr int kAccFloats = kSplitKvWarps * G_TILE * kDims;
  constexpr int kMergeFloats = SPLIT ? G_TILE * kCombineMaxSplits : 0;
  __shared__ float s_acc_raw[kAccFloats > kMergeFloats ? kAccFloats : kMergeFloats];
  auto s_acc = reinterpret_cast<float(*)[G_TILE][kDims]>(s_acc_raw);

  const int item = blockIdx.x;
  const int token = plan.split_items[2 * item];
  const int seq = plan.split_items[2 * item + 1];
  const int group_size = p.num_heads / p.num_kv_heads;
  const int num_chunks = (group_size + G_TILE - 1) / G_TILE;
  const int kv_head = blockIdx.y / num_chunks;
  const int head0 = kv_head * group_size + (blockIdx.y % num_chunks) * G_TILE;
  const int num_g = min(G_TILE, kv_head * group_size + group_size - head0);

  // Causal (or windowed) range of this token, then this block's share of it.
  const int n_keys = p.seq_lens[seq] - (p.query_start_loc[seq + 1] - token) + 1;
  const int k_first = first_key(n_keys, p.window);
  const int splits = SPLIT ? active_splits(n_keys - k_first, plan.num_splits) : 1;
  if (blockIdx.z >= splits) return;  // the whole block
  const int per_split = (n_keys - k_first + splits - 1) / splits;
  const int k_begin = k_first + blockIdx.z * per_split;
  const int k_end = min(n_keys, k_begin + per_split);
  const float cap2 = p.softcap * kLog2e;

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int lig = lane % LANES;  // lane in key group
  const int group = warp * kGroupsPerWarp + lane / LANES;

  // Query rows, pre-scaled so that scores come out in the log2 domain.
  const float qscale = p.scale * kLog2e * kv_scale<KV>(p.k_scale);
  const float vscale = kv_scale<KV>(p.v_scale);
  float q[G_TILE][ELEMS];
#pragma unroll
  for (int g = 0; g < G_TILE; ++g) {
    if (g < num_g) {
      const T* qrow = static_cast<const T*>(p.q) + static_cast<int64_t>(token) * p.q_token_stride +
                      static_cast<int64_t>(head0 + g) * p.head_dim;  // [head_dim]
      Row::load(qrow, lig, p.head_dim, q[g]);
#pragma unroll
      for (int e = 0; e < ELEMS; ++e) q[g][e] *= qscale;
    } else {
#pragma unroll
      for (int e = 0; e < ELEMS; ++e) q[g][e] = 0.f;
    }
  }

  float m[G_TILE], l[G_TILE], acc[G_TILE][ELEMS];
#pragma unroll
  for (int g = 0; g < G_TILE; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < ELEMS; ++e) acc[g][e] = 0.f;
  }

  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const int64_t slot_stride = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const KV* k_base = static_cast<const KV*>(p.k_cache) + static_cast<int64_t>(kv_head) * p.head_dim;
  const KV* v_base = static_cast<const KV*>(p.v_cache) + static_cast<int64_t>(kv_head) * p.head_dim;

  // The loop bound is block-uniform: lanes of one warp take different keys but must all reach the
  // shuffles of the dot-product reduction together.
  for (int base = k_begin; base < k_end; base += kGroups * U) {
    float kr[U][ELEMS], vr[U][ELEMS];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = base + u * kGroups + group;
      valid[u] = key < k_end;
      if (valid[u]) {
        const int64_t slot =
            static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size;
        Row::load(k_base + slot * slot_stride, lig, p.head_dim, kr[u]);
        Row::load(v_base + slot * slot_stride, lig, p.head_dim, vr[u]);
      } else {
#pragma unroll
        for (int e = 0; e < ELEMS; ++e) kr[u][e] = vr[u][e] = 0.f;
      }
    }
#pragma unroll
    for (int g = 0; g < G_TILE; ++g) {
      float s[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < ELEMS; ++e) dot += q[g][e] * kr[u][e];
#pragma unroll
        for (int o = LANES / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        s[u] = valid[u] ? soft_cap_log2(dot, cap2) : -INFINITY;
      }
      float mx = m[g];
#pragma unroll
      for (int u = 0; u < U; ++u) mx = fmaxf(mx, s[u]);
      if (mx == -INFINITY) continue;  // this group has seen no key yet
      const float corr = exp2f(m[g] - mx);
      m[g] = mx;
      l[g] *= corr;
#pragma unroll
      for (int e = 0; e < ELEMS; ++e) acc[g][e] *= corr;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float pr = exp2f(s[u] - mx);  // 0 for invalid keys
        l[g] += pr;
#pragma unroll
        for (int e = 0; e < ELEMS; ++e) acc[g][e] += pr * vr[u][e];
      }
    }
  }

  // Merge the key groups of each warp (lanes lig, lig + LANES, ...), then the warps via shared
  // memory.
#pragma unroll
  for (int g = 0; g < G_TILE; ++g) {
#pragma unroll
    for (int o = LANES; o < 32; o <<= 1) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float mx = fmaxf(m[g], m_o);
      const float c_self = mx == -INFINITY ? 0.f : exp2f(m[g] - mx);
      const float c_other = mx == -INFINITY ? 0.f : exp2f(m_o - mx);
      l[g] = l[g] * c_self + l_o * c_other;
#pragma unroll
      for (int e = 0; e < ELEMS; ++e) {
        const float a_o = __shfl_xor_sync(0xffffffffu, acc[g][e], o);
        acc[g][e] = acc[g][e] * c_self + a_o * c_other;
      }
      m[g] = mx;
    }
  }
  if (lane < LANES) {
#pragma unroll
    for (int g = 0; g < G_TILE; ++g) {
      if (lane == 0) {
        s_m[warp][g] = m[g];
        s_l[warp][g] = l[g];
      }
#pragma unroll
      for (int e = 0; e < ELEMS; ++e) s_acc[warp][g][Row::dim(lane, e)] = acc[g][e];
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < G_TILE * kDims; i += kSplitKvThreads) {
    const int g = i / kDims;
    const int d = i % kDims;
    if (g >= num_g || d >= p.head_dim) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kSplitKvWarps; ++w) mx = fmaxf(mx, s_m[w][g]);
    float sum_l = 0.f, sum_a = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kSplitKvWarps; ++w) {
        const float c = exp2f(s_m[w][g] - mx);
        sum_l += s_l[w][g] * c;
        sum_a += s_acc[w][g][d] * c;
      }
    }
    const float o = sum_l > 0.f ? sum_a * vscale / sum_l : 0.f;
    const int head = head0 + g;
    if constexpr (!SPLIT) {
      T* out =
          static_cast<T*>(p.out) + (static_cast<int64_t>(token) * p.num_heads + head) * p.head_dim;
      out[d] = from_float<T>(o);
    } else {
      const int64_t row =
          (static_cast<int64_t>(item) * p.num_heads + head) * plan.num_splits + blockIdx.z;
      partial_out[row * p.head_dim + d] = o;
      if (d == 0) partial_lse[row] = sum_l > 0.f ? mx + log2f(sum_l) : -INFINITY;
    }
  }
  if constexpr (SPLIT)
    merge_splits_if_last<T>(p, plan, item, token, head0, num_g, splits, partial_out, partial_lse,
                            counters + int64_t{item} * gridDim.y + blockIdx.y, s_acc_raw);
}

template <typename T, typename KV, int LANES, int ELEMS, bool CONTIG, int G_TILE>
cudaError_t launch_split_kv_config(const AttentionParams& p, const AttentionPlan& plan,
                                   float* partial_out, float* partial_lse, cudaStream_t stream) {
  const int group_size = p.num_heads / p.num_kv_heads;
  const int num_chunks = (group_size + G_TILE - 1) / G_TILE;
  if (plan.num_splits > 65535 || p.num_kv_heads * num_chunks > 65535) return cudaErrorInvalidValue;
  dim3 grid(plan.num_split_items, p.num_kv_heads * num_chunks, plan.num_splits);
  auto* kernel = plan.num_splits > 1 ? split_kv_kernel<T, KV, LANES, ELEMS, CONTIG, G_TILE, true>
                                     : split_kv_kernel<T, KV, LANES, ELEMS, CONTIG, G_TILE, false>;
  return launch_kernel(kernel, grid, kSplitKvThreads, 0, stream, p, plan, partial_out, partial_lse,
                       plan.split_counters);
}

template <typename T, typename KV>
cudaError_t launch_split_kv_cuda_cores(const AttentionParams& p, const AttentionPlan& plan,
                                       float* partial_out, float* partial_lse,
                                       cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int group_size = p.num_heads / p.num_kv_heads;
  const bool aligned = aligned16(p.q) && aligned16(p.k_cache) && aligned16(p.v_cache) &&
                       (p.q_token_stride * sizeof(T)) % 16 == 0;
  const bool fast = aligned && split_kv_fast_head_dim(p.head_dim);
  const int g_tile = split_kv_head_tile(group_size, fast);
  if (fast) {
    if (p.head_dim == 64) {
      constexpr int kLanes = 64 / kVec;
      if (g_tile == 1)
        return launch_split_kv_config<T, KV, kLanes, kVec, true, 1>(p, plan, partial_out, partial_lse,
                                                                stream);
      if (g_tile == 4)
        return launch_split_kv_config<T, KV, kLanes, kVec, true, 4>(p, plan, partial_out, partial_lse,
                                                                stream);
      return launch_split_kv_config<T, KV, kLanes, kVec, true, 8>(p, plan, partial_out, partial_lse,
                                                              stream);
    }
    constexpr int kLanes = 128 / kVec;
    if (g_tile == 1)
      return launch_split_kv_config<T, KV, kLanes, kVec, true, 1>(p, plan, partial_out, partial_lse,
                                                              stream);
    if (g_tile == 4)
      return launch_split_kv_config<T, KV, kLanes, kVec, true, 4>(p, plan, partial_out, partial_lse,
                                                              stream);
    return launch_split_kv_config<T, KV, kLanes, kVec, true, 8>(p, plan, partial_out, partial_lse,
                                                            stream);
  }
  if (p.head_dim <= 32)
    return launch_split_kv_config<T, KV, 32, 1, false, 8>(p, plan, partial_out, partial_lse, stream);
  if (p.head_dim <= 128)
    return launch_split_kv_config<T, KV, 32, 4, false, 8>(p, plan, partial_out, partial_lse, stream);
  if (p.head_dim <= kMaxGenericHeadDim)
    return launch_split_kv_config<T, KV, 32, 8, false, 8>(p, plan, partial_out, partial_lse, stream);
  return cudaErrorNotSupported;
}

}  // namespace pagellm::cuda::attention
