// Mixture-of-experts kernels (Qwen3-MoE, Mixtral): routing, the experts' projections gathered per
// (token, expert) slot, and the weighted sum of a token's slots. Slot s = t * top_k + j is token
// t's j-th expert. Every kernel is graph-capturable: the routing stays on the device.
//
// The projections read the weights of each slot's expert only, so a decode step of one token reads
// top_k experts per layer (the bytes a mixture of experts needs), not all of them. Each slot reads
// its expert's weights on its own (moe_linear, for fp32 and odd shapes); moe_sort and
// moe_grouped_linear group the slots by expert on the device, so an expert several slots share is
// read once; long prefill steps are sorted on the host (moe_groups.h) for cuBLAS GEMMs per expert.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace pagellm::cuda {

// ids / weights [num_tokens, top_k] from router logits [num_tokens, num_experts] (dtype): the
// top_k largest of softmax(logits) in fp32, in descending order (ties: the lower expert id),
// renormalised to sum 1 when `renormalize`, then rounded to dtype as transformers does.
struct MoeRouteParams {
  DType dtype = DType::kBF16;
  const void* logits = nullptr;
  int num_tokens = 0;
  int num_experts = 0;  // <= kMoeMaxExperts
  int top_k = 0;        // <= kMoeMaxTopK
  bool renormalize = true;
  int32_t* ids = nullptr;
  float* weights = nullptr;
};
constexpr int kMoeMaxExperts = 1024;
constexpr int kMoeMaxTopK = 64;
cudaError_t moe_route(const MoeRouteParams& p, cudaStream_t stream);

// y[s] = w[ids[s]] · x[s / x_row_div] for every slot s: w [num_experts, out_features,
// in_features], x [.., in_features], y [num_slots, out_features], all of dtype. x_row_div = top_k
// reads a token's row for each of its slots (gate/up); 1 reads the slot's own row (down).
// gated: w is [num_experts, 2 * out_features, in_features] (gate rows, then up rows) and y[s] =
// silu(gate · x) * (up · x), each product rounded to dtype as cuda::silu_and_mul rounds it (the
// SiLU-and-mul fused into the gate/up projection).
// FP8 experts (w_scale set): w holds e4m3 codes, weight row j of expert e scaled by
// w_scale[e * rows + j] (rows: out_features, twice that when gated), the scale applied to the fp32
// sum; 16-bit dtypes, in_features a multiple of 16.
struct MoeLinearParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;
  int x_row_div = 1;
  bool gated = false;
  const void* w = nullptr;
  const float* w_scale = nullptr;
  const int32_t* ids = nullptr;
  void* y = nullptr;
  int num_slots = 0;
  int out_features = 0;
  int in_features = 0;
};
cudaError_t moe_linear(const MoeLinearParams& p, cudaStream_t stream);

// out[t] = sum_j weights[t, j] * y[row(t * top_k + j)] in fp32, j in order, rounded to dtype
// once: y [num_tokens * top_k, hidden], out [num_tokens, hidden]; row(s) = y_rows[s], or s.
struct MoeCombineParams {
  DType dtype = DType::kBF16;
  const void* y = nullptr;
  const int32_t* y_rows = nullptr;  // [num_tokens * top_k] (the grouped pass's sorted rows)
  const float* weights = nullptr;
  void* out = nullptr;
  int num_tokens = 0;
  int top_k = 0;
  int hidden = 0;
};
cudaError_t moe_combine(const MoeCombineParams& p, cudaStream_t stream);

// ---- The slots grouped by expert on the device (moe_grouped.cu) --------------------------------
// Graph-capturable, with no host round trip: decode batches and captured steps read each expert
// they use once, for all the rows routed to it.

// The slots sorted by expert: slot_of_row [num_slots] (row r of the sorted order holds slot
// slot_of_row[r]) and row_of_slot its inverse; the rows of one expert in no particular order,
// which changes no result (every row is computed on its own). groups
// [moe_groups_size(num_experts)]: groups[0] = G, the experts in use; groups[1 + i] the i-th of
// them (ascending ids), i < G; groups[1 + E + i] its first row, and groups[1 + E + G] = num_slots.
struct MoeSortParams {
  const int32_t* ids = nullptr;  // [num_slots], each in [0, num_experts)
  int num_slots = 0;
  int num_experts = 0;  // <= kMoeMaxExperts
  int32_t* slot_of_row = nullptr;
  int32_t* row_of_slot = nullptr;
  int32_t* groups = nullptr;
};
constexpr int moe_groups_size(int num_experts) { return 2 * num_experts + 2; }
cudaError_t moe_sort(const MoeSortParams& p, cudaStream_t stream);

// y[r] = w[expert of r] · x[row(r)] for every sorted row r, as moe_linear computes it per slot
// (gated: the SiLU-and-mul fused in, with its roundings): x [.., in_features], y [num_slots,
// out_features] in sorted order; row(r) = slot_of_row[r] / x_row_div (gate/up: a token's row), or
// r when slot_of_row is null (down: the sorted activations). num_rows: the slots sorted;
// max_groups: the grid's bound on the experts in use, min(num_experts, num_rows) (blocks past
// groups[0] exit at once).
struct MoeGroupedLinearParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;
  const int32_t* slot_of_row = nullptr;
  int x_row_div = 1;
  bool gated = false;
  const void* w = nullptr;  // [num_experts, (gated ? 2 : 1) * out_features, in_features]
  const float* w_scale = nullptr;  // FP8 experts, as in MoeLinearParams
  const int32_t* groups = nullptr;
  int num_experts = 0;
  int num_rows = 0;
  int max_groups = 0;
  void* y = nullptr;
  int out_features = 0;
  int in_features = 0;
};
// 16-bit dtypes, in_features a multiple of 8 (16-byte rows; FP8 weights: 16); other shapes take
// moe_linear.
bool moe_grouped_linear_supported(DType dtype, int out_features, int in_features, bool fp8);
cudaError_t moe_grouped_linear(const MoeGroupedLinearParams& p, cudaStream_t stream);

}  // namespace pagellm::cuda
