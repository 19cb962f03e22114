// Mixture-of-experts kernels (Qwen3-MoE, Mixtral): routing, the experts' projections gathered per
// (token, expert) slot, and the weighted sum of a token's slots. Slot s = t * top_k + j is token
// t's j-th expert. Every kernel is graph-capturable: the routing stays on the device.
//
// The projections read the weights of each slot's expert only, so a decode step of one token reads
// top_k experts per layer (the bytes a mixture of experts needs), not all of them. Each slot reads
// its expert's weights on its own: right for decode, where slots rarely share an expert; a prefill
// of many tokens would re-read an expert once per slot routed to it, so the runner sorts those
// slots by expert (moe_groups.h) and runs one GEMM per expert instead.
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
struct MoeLinearParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;
  int x_row_div = 1;
  bool gated = false;
  const void* w = nullptr;
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

}  // namespace pagellm::cuda
