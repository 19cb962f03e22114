// Planning and dispatch of paged attention: tokens of multi-token (prefill) sequences go to the
// tensor-core tile kernel when it serves the dtype and head_dim; every other token goes to the
// split-KV kernel, with the split count chosen to fill the GPU.
#include <algorithm>
#include <atomic>

#include "backends/cuda/attention/attention_internal.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"

namespace pagellm::cuda {

namespace {
std::atomic<bool> g_decode_tensor_cores{true};
}  // namespace

void attention_set_decode_tensor_cores(bool enabled) { g_decode_tensor_cores = enabled; }
bool attention::decode_tensor_cores_enabled() { return g_decode_tensor_cores; }

namespace {

bool valid_shapes(const AttentionParams& p) {
  return attention::kv_dtype_supported(p.dtype, p.kv_dtype) && p.num_seqs >= 0 && p.num_tokens >= 0 && p.num_heads > 0 && p.num_kv_heads > 0 &&
         p.num_heads % p.num_kv_heads == 0 && p.head_dim > 0 && p.block_size > 0 &&
         p.max_blocks_per_seq > 0;
}

bool tile_path(const AttentionParams& p) {
  const size_t elem = element_size(p.dtype);
  const int64_t stride = p.q_token_stride ? p.q_token_stride : int64_t{p.num_heads} * p.head_dim;
  return attention::tile_supported(p.dtype, p.head_dim) && aligned16(p.q) && aligned16(p.k_cache) &&
         aligned16(p.v_cache) && aligned16(p.out) && (stride * elem) % 16 == 0;
}

// The launchers for model type T, picked by the cache's dtype (T itself or FP8).
template <typename T>
cudaError_t launch_tiles(const AttentionParams& p, const AttentionPlan& plan, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    return cudaErrorNotSupported;
  } else {
    if (p.kv_dtype == DType::kF8E4M3)
      return attention::launch_tile<T, __nv_fp8_e4m3>(p, plan, stream);
    if (p.kv_dtype == DType::kF8E5M2)
      return attention::launch_tile<T, __nv_fp8_e5m2>(p, plan, stream);
    return attention::launch_tile<T, T>(p, plan, stream);
  }
}

template <typename T>
cudaError_t launch_splits(const AttentionParams& p, const AttentionPlan& plan, float* partial_out,
                          float* partial_lse, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, float>) {
    if (p.kv_dtype == DType::kF8E4M3)
      return attention::launch_split_kv<T, __nv_fp8_e4m3>(p, plan, partial_out, partial_lse,
                                                          stream);
    if (p.kv_dtype == DType::kF8E5M2)
      return attention::launch_split_kv<T, __nv_fp8_e5m2>(p, plan, partial_out, partial_lse,
                                                          stream);
  }
  return attention::launch_split_kv<T, T>(p, plan, partial_out, partial_lse, stream);
}

}  // namespace

cudaError_t plan_attention(const AttentionParams& p, const int32_t* query_start_loc_host,
                           const int32_t* seq_lens_host, int num_sms, int fixed_num_splits,
                           AttentionPlanHost* out) {
  if (!out || !valid_shapes(p) || (p.num_seqs > 0 && (!query_start_loc_host || !seq_lens_host)))
    return cudaErrorInvalidValue;
  if (!attention::split_kv_fast_head_dim(p.head_dim) && p.head_dim > attention::kMaxGenericHeadDim)
    return cudaErrorNotSupported;
  out->split_items.clear();
  out->tile_items.clear();
  const bool tiles = tile_path(p);
  // Short query rows (speculative verification: 1 + k tokens) in a small batch take the split-KV
  // kernels, one item per token, whose splits spread each row's keys over many blocks; the tile
  // kernel would give a row one block per KV head. Decided by the batch size alone, so that a
  // graph shape always gets the same plan.
  const bool split_short_rows = int64_t{p.num_seqs} * p.num_kv_heads < num_sms;
  int max_split_ctx = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int begin = query_start_loc_host[s];
    const int q_len = query_start_loc_host[s + 1] - begin;
    if (q_len < 0 || seq_lens_host[s] < q_len || query_start_loc_host[s + 1] > p.num_tokens ||
        (seq_lens_host[s] + p.block_size - 1) / p.block_size > p.max_blocks_per_seq)
      return cudaErrorInvalidValue;
    if (q_len == 0) continue;
    if (tiles && q_len > 1 && !(split_short_rows && q_len <= attention::kSplitMaxQueryRows)) {
      for (int r = 0; r < q_len; r += kAttentionTileRows) {
        out->tile_items.push_back(s);
        out->tile_items.push_back(r);
      }
    } else {
      for (int t = begin; t < begin + q_len; ++t) {
        out->split_items.push_back(t);
        out->split_items.push_back(s);
      }
      max_split_ctx = std::max(max_split_ctx, seq_lens_host[s]);
    }
  }
  const int num_items = static_cast<int>(out->split_items.size() / 2);
  int splits = 1;
  if (fixed_num_splits > attention::kCombineMaxSplits) return cudaErrorInvalidValue;
  if (fixed_num_splits > 0) {
    splits = fixed_num_splits;
  } else if (num_items > 0) {
    // At most 2 blocks per SM (one wave of the tensor-core decode kernel, whose shared memory
    // allows two: a second, partial wave cost more than fewer, longer splits, and the split merge
    // runs in the last block of each group), but no split shorter than 128 keys.
    const int group = p.num_heads / p.num_kv_heads;
    const bool fast = attention::split_kv_fast_head_dim(p.head_dim);
    const int g_tile = attention::split_kv_head_tile(group, fast);
    const int64_t base = int64_t{num_items} * p.num_kv_heads * ((group + g_tile - 1) / g_tile);
    const int64_t want = 2 * int64_t{std::max(num_sms, 1)} / base;
    const int64_t cap = std::max(1, (max_split_ctx + attention::kMinSplitKeys - 1) /
                                        attention::kMinSplitKeys);
    splits = static_cast<int>(std::clamp<int64_t>(want, 1, std::min<int64_t>(cap, attention::kCombineMaxSplits)));
  }
  out->num_splits = splits;
  out->workspace_bytes =
      splits > 1 ? size_t(num_items) * p.num_heads * splits * (p.head_dim + 1) * sizeof(float) : 0;
  out->split_counters = splits > 1 ? size_t(num_items) * p.num_heads : 0;
  return cudaSuccess;
}

cudaError_t run_attention(const AttentionParams& in, const AttentionPlan& plan, void* workspace,
                          cudaStream_t stream) {
  AttentionParams p = in;
  if (!valid_shapes(p) || plan.num_splits < 1) return cudaErrorInvalidValue;
  if (p.q_token_stride == 0) p.q_token_stride = int64_t{p.num_heads} * p.head_dim;
  if (plan.num_split_items + plan.num_tile_items == 0) return cudaSuccess;
  if (!p.q || !p.k_cache || !p.v_cache || !p.out || !p.query_start_loc || !p.seq_lens ||
      !p.block_tables)
    return cudaErrorInvalidValue;
  if (plan.num_tile_items > 0) {
    if (!plan.tile_items) return cudaErrorInvalidValue;
    const cudaError_t err =
        PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_tiles<scalar_t>(p, plan, stream); });
    if (err != cudaSuccess) return err;
  }
  if (plan.num_split_items > 0) {
    if (!plan.split_items || (plan.num_splits > 1 && (!workspace || !plan.split_counters)))
      return cudaErrorInvalidValue;
    float* partial_out = static_cast<float*>(workspace);  // [items, num_heads, splits, head_dim]
    float* partial_lse =                                  // [items, num_heads, splits]
        partial_out ? partial_out +
                          size_t(plan.num_split_items) * p.num_heads * plan.num_splits * p.head_dim
                    : nullptr;
    return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
      return launch_splits<scalar_t>(p, plan, partial_out, partial_lse, stream);
    });
  }
  return cudaSuccess;
}

}  // namespace pagellm::cuda
