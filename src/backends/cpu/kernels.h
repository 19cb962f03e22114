// fp32 CPU kernels for the Llama-family forward pass. Every kernel is batch-invariant: each output
// element is reduced in one fixed order that depends only on the sizes of the model, never on how
// many tokens or sequences share the call or how the work is split over threads. Threads come from
// pagellm::ThreadPool::global(); tiny problems stay on the calling thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cpu/rope_frequencies.h"
#include "common/fp8.h"
#include "io/hf_config.h"

namespace pagellm::cpu {

// A weight matrix [out_features, in] repacked for the batched matmul: panels of kPanelWidth output
// columns, each stored k-major ([in, kPanelWidth]) so one vector load gives the same k of 16
// consecutive outputs. The last panel is zero-padded.
constexpr int64_t kPanelWidth = 16;
struct PackedMatrix {
  int64_t in = 0;
  int64_t out_features = 0;
  std::vector<float> data;  // [ceil(out_features / kPanelWidth), in, kPanelWidth]
  int64_t num_panels() const { return (out_features + kPanelWidth - 1) / kPanelWidth; }
};
PackedMatrix pack_matrix(const float* w, int64_t out_features, int64_t in);

// out[t, o] = sum_i x[t, i] * w[o, i] (+ bias[o]).  x [num_tokens, in], bias [out_features] or
// null, out [num_tokens, out_features]. Every output is one fused multiply-add chain over i = 0,
// 1, ..., in - 1 starting from 0 (then + bias), whatever the tile it lands in, so a row's result
// never depends on the batch (see dot()).
void matmul(const float* x, const PackedMatrix& w, const float* bias, float* out,
            int64_t num_tokens);

// The same on an unpacked w [out_features, in] (packs it first; for tests and one-off use).
void matmul(const float* x, const float* w, const float* bias, float* out, int64_t num_tokens,
            int64_t in, int64_t out_features);

// The reference reduction of matmul, exposed for tests: acc = fma(a[i], b[i], acc) for i in order.
float dot(const float* a, const float* b, int64_t n);

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight.  x, out [num_rows, dim] (may alias), weight
// [dim].
void rms_norm(const float* x, const float* weight, float* out, int64_t num_rows, int64_t dim,
              float eps);

// out[t] = table[ids[t]].  table [vocab, dim], out [num_tokens, dim]. ids must be < vocab.
void embedding(const int32_t* ids, const float* table, float* out, int64_t num_tokens, int64_t dim);

// Per-token rotary tables: cos_out / sin_out [num_tokens, head_dim / 2] of positions[t] * inv_freq,
// times `scale` (longrope's attention factor; 1 otherwise).
void rope_tables(const int32_t* positions, int64_t num_tokens, int64_t head_dim,
                 const float* inv_freq, float* cos_out, float* sin_out, float scale = 1.0f);

// Rotates x in place with HF's rotate-half layout: pairs (i, i + head_dim/2) of each head.
// x [num_tokens, row_stride] whose first num_heads * head_dim entries are the heads; cos_t, sin_t
// [num_tokens, head_dim / 2] from rope_tables().
void apply_rope(float* x, int64_t row_stride, const float* cos_t, const float* sin_t,
                int64_t num_tokens, int64_t num_heads, int64_t head_dim);

// The same from positions [num_tokens] (builds the tables first).
void apply_rope(float* x, int64_t row_stride, const int32_t* positions, int64_t num_tokens,
                int64_t num_heads, int64_t head_dim, const float* inv_freq);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i].  gate_up [num_tokens, 2 * inter],
// out [num_tokens, inter].
void silu_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t inter);

// out[t, i] = gelu_tanh(gate_up[t, i]) * gate_up[t, inter + i] (Gemma's MLP; gelu_tanh(x) =
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), transformers' gelu_pytorch_tanh).
void gelu_tanh_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t inter);

// Mixture-of-experts routing as transformers does it: probabilities = softmax of each token's
// router logits [num_tokens, num_experts] (fp32), the top_k largest (ties: the lower expert id
// first) in descending order, renormalised to sum 1 when `renormalize`. ids / weights
// [num_tokens, top_k].
void moe_route(const float* logits, int64_t num_tokens, int64_t num_experts, int64_t top_k,
               bool renormalize, int32_t* ids, float* weights);

// dst[t] += src[t] elementwise over n floats.
void add_inplace(float* dst, const float* src, int64_t n);

// One layer's paged KV cache: k and v each [num_blocks, block_size, num_kv_heads, head_dim].
// An FP8 cache (--kv-cache-dtype fp8) keeps the fp32 layout, but write_kv stores each element as
// the FP8 value it rounds to: fp8(x * (1 / scale)) * scale with the layer's per-tensor scales, the
// numbers the CUDA backend's FP8 cache holds.
struct KvLayerView {
  float* k = nullptr;
  float* v = nullptr;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool fp8 = false;
  Fp8Format fp8_format = Fp8Format::kE4M3;
  float k_scale = 1.f, v_scale = 1.f;
};

// Writes new tokens' K/V into their slots.  k, v [num_tokens, row_stride] (heads first in each
// row), slots [num_tokens] = block * block_size + offset.
void write_kv(const KvLayerView& cache, const float* k, const float* v, int64_t row_stride,
              const int64_t* slots, int64_t num_tokens);

// A sequence's rows in the flattened batch and its KV blocks.
struct AttentionSeq {
  int64_t token_begin = 0;               // first row of the seq in q / out
  int64_t num_tokens = 0;                // rows of the seq this step
  int64_t num_computed = 0;              // position of the first row (cached prefix length)
  std::span<const int32_t> block_table;  // [>= ceil((num_computed + num_tokens) / block_size)]
};

// Causal GQA attention over the paged cache (which already holds this step's K/V): the row at
// position p attends to positions [0, p] of its seq, or with window > 0 to (p - window, p].
// Scores are q·k * scale, then softcap * tanh(score / softcap) when softcap > 0 (Gemma 2).
// q [num_tokens, q_stride] (heads first), out [num_tokens, num_heads * head_dim].
void paged_attention(const KvLayerView& cache, const float* q, int64_t q_stride,
                     std::span<const AttentionSeq> seqs, int64_t num_heads, float scale, float* out,
                     int64_t window = 0, float softcap = 0.0f);

}  // namespace pagellm::cpu
