// Planning and dispatch of paged attention: tokens of multi-token (prefill) sequences go to the
// tensor-core tile kernel when it serves the dtype and head_dim; every other token goes to the
// split-KV kernel, with the split count chosen to fill the GPU.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "backends/cuda/attention/attention_internal.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_convert.cuh"
#include "backends/cuda/tma.h"

namespace pagellm::cuda {

namespace {
std::atomic<bool> g_decode_tensor_cores{true};
// PAGELLM_PREFILL_WGMMA=0 starts a process with the mma.sync prefill kernel (A/B runs, and a way
// around the wgmma kernel should it ever misbehave on some device).
std::atomic<bool> g_prefill_wgmma{[] {
  const char* env = std::getenv("PAGELLM_PREFILL_WGMMA");
  return !(env && std::strcmp(env, "0") == 0);
}()};
std::atomic<bool> g_prefill_pingpong{[] {
  const char* env = std::getenv("PAGELLM_PREFILL_PINGPONG");
  return !(env && std::strcmp(env, "0") == 0);
}()};
std::atomic<DecodeMmaLayout> g_decode_layout{[] {
  const char* env = std::getenv("PAGELLM_DECODE_MMA_LAYOUT");
  if (env && std::strcmp(env, "heads") == 0) return DecodeMmaLayout::kHeadRows;
  if (env && std::strcmp(env, "keys") == 0) return DecodeMmaLayout::kKeyRows;
  return DecodeMmaLayout::kAuto;
}()};
}  // namespace

void attention_set_decode_mma_layout(DecodeMmaLayout layout) { g_decode_layout = layout; }
DecodeMmaLayout attention::decode_mma_layout() { return g_decode_layout; }
bool attention::prefill_pingpong_enabled() { return g_prefill_pingpong; }
void attention_set_decode_tensor_cores(bool enabled) { g_decode_tensor_cores = enabled; }
bool attention::decode_tensor_cores_enabled() { return g_decode_tensor_cores; }
void attention_set_prefill_wgmma(bool enabled) { g_prefill_wgmma = enabled; }
bool attention::prefill_wgmma_enabled() { return g_prefill_wgmma; }

namespace {

bool valid_shapes(const AttentionParams& p) {
  return attention::kv_dtype_supported(p.dtype, p.kv_dtype) && p.num_seqs >= 0 &&
         p.num_tokens >= 0 && p.num_heads > 0 && p.num_kv_heads > 0 &&
         p.num_heads % p.num_kv_heads == 0 && p.head_dim > 0 && p.block_size > 0 &&
         p.max_blocks_per_seq > 0 && p.window >= 0 && p.softcap >= 0.f;
}

bool tile_path(const AttentionParams& p) {
  const size_t elem = dtype_size(p.dtype);
  const int64_t stride = p.q_token_stride ? p.q_token_stride : int64_t{p.num_heads} * p.head_dim;
  return attention::tile_supported(p.dtype, p.head_dim) && aligned16(p.q) && aligned16(p.k_cache) &&
         aligned16(p.v_cache) && aligned16(p.out) && (stride * elem) % 16 == 0;
}

// Whether prefill tiles take the Hopper wgmma kernel: a 16-bit cache of the model's dtype on a
// compute capability 9.0 device, unless switched off. Sliding windows and soft caps (Gemma) are
// in the mma.sync kernel only: a model with them plans with them set (the runner's planning
// params), so every layer's attention runs 64-row tiles.
bool sm90_tiles(const AttentionParams& p) {
  return tile_path(p) && p.head_dim <= 128 && p.kv_dtype == p.dtype && p.window == 0 &&
         p.softcap == 0.f && attention::sm90_tma_fits(p) && attention::prefill_wgmma_enabled() &&
         device_is_sm90() && tma_available();
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

// The tile kernel that the plan's tile_rows names; the wgmma kernel only where the planner would
// have chosen it (a plan made on another device or with other params is refused).
cudaError_t run_tiles(const AttentionParams& p, const AttentionPlan& plan, cudaStream_t stream) {
  if (plan.tile_rows == kSm90TileRows) {
    if (!sm90_tiles(p)) return cudaErrorInvalidValue;
    if (p.dtype == DType::kBF16) return attention::launch_tile_sm90<__nv_bfloat16>(p, plan, stream);
    return attention::launch_tile_sm90<__half>(p, plan, stream);
  }
  if (plan.tile_rows != kAttentionTileRows) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] { return launch_tiles<scalar_t>(p, plan, stream); });
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

// launch_splits' kernel's blocks per SM (attention::split_kv_blocks_per_sm).
template <typename T>
int split_blocks_per_sm_t(const AttentionParams& p) {
  if constexpr (!std::is_same_v<T, float>) {
    if (p.kv_dtype == DType::kF8E4M3) return attention::split_kv_blocks_per_sm<T, __nv_fp8_e4m3>(p);
    if (p.kv_dtype == DType::kF8E5M2) return attention::split_kv_blocks_per_sm<T, __nv_fp8_e5m2>(p);
  }
  return attention::split_kv_blocks_per_sm<T, T>(p);
}

int split_blocks_per_sm(const AttentionParams& p) {
  switch (p.dtype) {
    case DType::kBF16:
      return split_blocks_per_sm_t<__nv_bfloat16>(p);
    case DType::kF16:
      return split_blocks_per_sm_t<__half>(p);
    case DType::kF32:
      return split_blocks_per_sm_t<float>(p);
    default:
      return attention::kSplitKvBlocksPerSm;
  }
}

// Sorts tile items by the keys their last row reads, most first (ties keep their order): blocks
// start roughly in index order, so the longest causal tiles begin in the first wave instead of
// running alone at the end.
void order_tiles_longest_first(const int32_t* qsl, const int32_t* seq_lens,
                               std::vector<int32_t>& items) {
  const size_t n = items.size() / 2;
  if (n < 2) return;
  std::vector<std::pair<int64_t, size_t>> keyed(n);  // (-keys, index)
  for (size_t i = 0; i < n; ++i) {
    const int s = items[2 * i], r = items[2 * i + 1];
    const int q_len = qsl[s + 1] - qsl[s];
    keyed[i] = {-(int64_t{seq_lens[s]} - q_len + r), i};
  }
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int32_t> sorted(items.size());
  for (size_t i = 0; i < n; ++i) {
    sorted[2 * i] = items[2 * keyed[i].second];
    sorted[2 * i + 1] = items[2 * keyed[i].second + 1];
  }
  items.swap(sorted);
}

}  // namespace

bool attention::sm90_tma_fits(const AttentionParams& p) {
  const int64_t stride = p.q_token_stride ? p.q_token_stride : int64_t{p.num_heads} * p.head_dim;
  const int bs = p.block_size;
  return (p.head_dim == 64 || p.head_dim == 128) && dtype_size(p.dtype) == 2 && aligned16(p.q) &&
         aligned16(p.k_cache) && aligned16(p.v_cache) && aligned16(p.out) && stride % 8 == 0 &&
         p.num_slots > 0 && p.num_slots <= INT32_MAX && bs >= 8 && bs <= 128 &&
         (bs & (bs - 1)) == 0;
}

bool attention::make_sm90_maps(const AttentionParams& p, Sm90Maps* maps) {
  const uint64_t d = uint64_t(p.head_dim), row_bytes = d * 2;
  const uint64_t q_stride = uint64_t(p.q_token_stride ? p.q_token_stride : p.num_heads * d) * 2;
  const uint64_t slot_bytes = uint64_t(p.num_kv_heads) * row_bytes;
  const uint64_t q_dims[3] = {d, uint64_t(p.num_heads), uint64_t(p.num_tokens)};
  const uint64_t kv_dims[3] = {d, uint64_t(p.num_kv_heads), uint64_t(p.num_slots)};
  const uint32_t q_box[3] = {64, 1, 64}, kv_box[3] = {64, 1, uint32_t(p.block_size)};
  return encode_tma_3d_u16(&maps->q, p.q, q_dims, {row_bytes, q_stride}, q_box) &&
         encode_tma_3d_u16(&maps->k, p.k_cache, kv_dims, {row_bytes, slot_bytes}, kv_box) &&
         encode_tma_3d_u16(&maps->v, p.v_cache, kv_dims, {row_bytes, slot_bytes}, kv_box);
}

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
  int max_split_ctx = 0, max_tile_q_len = 0;
  std::vector<int> tile_seqs;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int begin = query_start_loc_host[s];
    const int q_len = query_start_loc_host[s + 1] - begin;
    if (q_len < 0 || seq_lens_host[s] < q_len || query_start_loc_host[s + 1] > p.num_tokens ||
        (seq_lens_host[s] + p.block_size - 1) / p.block_size > p.max_blocks_per_seq)
      return cudaErrorInvalidValue;
    if (q_len == 0) continue;
    if (tiles && q_len > 1 && !(split_short_rows && q_len <= attention::kSplitMaxQueryRows)) {
      tile_seqs.push_back(s);
      max_tile_q_len = std::max(max_tile_q_len, q_len);
    } else {
      for (int t = begin; t < begin + q_len; ++t) {
        out->split_items.push_back(t);
        out->split_items.push_back(s);
      }
      max_split_ctx = std::max(max_split_ctx, seq_lens_host[s]);
    }
  }
  // The wgmma kernel's 128-row blocks pay off once some sequence has more rows than one mma.sync
  // tile; short rows only (verification, small chunks) keep the 64-row kernel.
  out->tile_rows =
      max_tile_q_len > kAttentionTileRows && sm90_tiles(p) ? kSm90TileRows : kAttentionTileRows;
  for (int s : tile_seqs) {
    for (int r = 0; r < query_start_loc_host[s + 1] - query_start_loc_host[s];
         r += out->tile_rows) {
      out->tile_items.push_back(s);
      out->tile_items.push_back(r);
    }
  }
  order_tiles_longest_first(query_start_loc_host, seq_lens_host, out->tile_items);
  const int num_items = static_cast<int>(out->split_items.size() / 2);
  int splits = 1;
  if (fixed_num_splits > attention::kCombineMaxSplits) return cudaErrorInvalidValue;
  if (fixed_num_splits > 0) {
    splits = fixed_num_splits;
  } else if (num_items > 0) {
    // At most one wave of the kernel that will run (as many blocks as its occupancy lets the
    // SMs hold: a second, partial wave cost more than fewer, longer splits, and the split merge
    // runs in the last block of each group), but no split shorter than 128 keys.
    const int group = p.num_heads / p.num_kv_heads;
    const bool fast = attention::split_kv_fast_head_dim(p.head_dim);
    const int g_tile = attention::split_kv_head_tile(group, fast);
    const int64_t base = int64_t{num_items} * p.num_kv_heads * ((group + g_tile - 1) / g_tile);
    const int64_t want = int64_t{split_blocks_per_sm(p)} * std::max(num_sms, 1) / base;
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
    const cudaError_t err = run_tiles(p, plan, stream);
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
