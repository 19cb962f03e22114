// Declarations shared by the attention translation units (one per kernel family and dtype, so that
// the CI compile parallelises and each TU holds few instantiations).
#pragma once

#include <cuda.h>  // CUtensorMap
#include <cuda_runtime.h>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda::attention {

// Query heads of one GQA group handled by one split-KV block: 1, 4 or 8 (the generic head-dim path
// always uses 8). Groups larger than the tile are covered by several blocks.
inline int split_kv_head_tile(int group_size, bool fast_path) {
  if (!fast_path) return 8;
  return group_size == 1 ? 1 : group_size <= 4 ? 4 : 8;
}

// Whether the split-KV kernel has its vectorized path for this head_dim (64 or 128).
inline bool split_kv_fast_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }
constexpr int kMaxGenericHeadDim = 256;
// The most splits per sequence the planner makes (the in-kernel merge keeps their weights in shared
// memory).
constexpr int kCombineMaxSplits = 256;
// The longest query row the planner gives the split-KV kernels in small batches (see
// plan_attention): speculative verification rows of up to 7 drafts.
constexpr int kSplitMaxQueryRows = 8;
// The fewest keys a split gets where the context allows (planner and kernels).
constexpr int kMinSplitKeys = 128;

// Whether the CUDA kernels read this cache dtype with this model dtype: the model dtype itself, or
// FP8 (e4m3 / e5m2) with bf16 / f16 models.
inline bool kv_dtype_supported(DType dtype, DType kv_dtype) {
  return kv_dtype == dtype ||
         (is_fp8(kv_dtype) && (dtype == DType::kBF16 || dtype == DType::kF16));
}

// Whether the tensor-core tile kernel serves this dtype / head_dim (256: Gemma 2 / 3; the Hopper
// wgmma tiles take 64 and 128 only, see sm90_tiles).
inline bool tile_supported(DType dtype, int head_dim) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

// Process-wide switch of the tensor-core GQA decode path (benchmarks compare both paths).
bool decode_tensor_cores_enabled();
// The layout attention_set_decode_mma_layout chose.
DecodeMmaLayout decode_mma_layout();

// Process-wide switch of the Hopper (wgmma) prefill kernel; off, Hopper runs the mma.sync tiles.
bool prefill_wgmma_enabled();
// Whether that kernel's two consumer warpgroups take turns at the tensor cores (PAGELLM_PREFILL_
// PINGPONG=0 at start: they do not).
bool prefill_pingpong_enabled();

// Split-KV kernel over plan.split_items; with num_splits > 1 the last block of each split group
// merges the group (merge_splits_if_last, counting in plan.split_counters: one per split item and
// grid row, at most num_heads per item). partial_out: [num_split_items, num_heads, num_splits,
// head_dim] f32, partial_lse: [num_split_items, num_heads, num_splits] f32 (log2 domain); unused
// when num_splits == 1. T: the model's device type; KV: the cache's (T, __nv_fp8_e4m3 or
// __nv_fp8_e5m2).
template <typename T, typename KV>
cudaError_t launch_split_kv(const AttentionParams& p, const AttentionPlan& plan, float* partial_out,
                            float* partial_lse, cudaStream_t stream);

// Blocks per SM of the split-KV kernel launch_split_kv would run for p (its occupancy: the split
// planner fills one wave); kSplitKvBlocksPerSm where it has no better answer.
constexpr int kSplitKvBlocksPerSm = 2;
template <typename T, typename KV>
int split_kv_blocks_per_sm(const AttentionParams& p);

// Tensor-core tile kernel over plan.tile_items (bf16 / f16, head_dim 64 or 128).
template <typename T, typename KV>
cudaError_t launch_tile(const AttentionParams& p, const AttentionPlan& plan, cudaStream_t stream);

// The tensor maps of one Hopper prefill launch: Q as [num_tokens, num_heads, D] (token stride
// q_token_stride) in boxes of 64 rows x 64 columns of one head; the K and V caches as [num_slots,
// num_kv_heads, D] in boxes of one page (block_size slots) x 64 columns of one KV head.
struct Sm90Maps {
  CUtensorMap q, k, v;
};

// Whether p's buffers and shapes fit the Hopper kernel's TMA loads: 16-byte aligned operands and
// strides, a known cache size (num_slots) and block sizes that tile 128 keys in 1024-byte pages.
bool sm90_tma_fits(const AttentionParams& p);

// Encodes the three maps of p (false: the driver refused one).
bool make_sm90_maps(const AttentionParams& p, Sm90Maps* maps);

// Hopper wgmma tile kernel over plan.tile_items of kSm90TileRows rows (bf16 / f16 with a cache of
// the same dtype, head_dim 64 or 128; compute capability 9.0 only).
template <typename T>
cudaError_t launch_tile_sm90(const AttentionParams& p, const AttentionPlan& plan,
                             cudaStream_t stream);

}  // namespace pagellm::cuda::attention
