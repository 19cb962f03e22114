// CPU reference implementations for the CUDA kernel tests. They take fp32 copies of exactly the
// values the device sees (already rounded to the kernel's dtype) and compute in double, except
// where a kernel deliberately rounds an intermediate to the model dtype like transformers does:
// there the reference rounds at the same place through `round_fn`.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace pagellm::cuda::test {

using RoundFn = std::function<float(float)>;  // rounds to the kernel dtype (identity for fp32)

// Paged causal attention, the contract of cuda::run_attention. Layouts as in kernels.h.
struct RefAttention {
  const float* q;                  // [num_tokens, num_heads, head_dim]
  const float* k_cache;            // [num_blocks, block_size, num_kv_heads, head_dim]
  const float* v_cache;            // [num_blocks, block_size, num_kv_heads, head_dim]
  const int32_t* query_start_loc;  // [num_seqs + 1]
  const int32_t* seq_lens;         // [num_seqs]
  const int32_t* block_tables;     // [num_seqs, max_blocks_per_seq]
  int num_seqs, num_tokens, num_heads, num_kv_heads, head_dim, block_size, max_blocks_per_seq;
  float scale;
  int window = 0;       // > 0: keys (pos - window, pos] only
  float softcap = 0.f;  // > 0: scores capped at softcap * tanh(score / softcap)
};
void ref_attention(const RefAttention& a, float* out);  // out: [num_tokens, num_heads, head_dim]

void ref_rms_norm(const float* x, float* residual, const float* weight, float* out, int num_rows,
                  int hidden, float eps, const RoundFn& round_fn);
void ref_rope(float* q, float* k, const int32_t* positions, const float* inv_freq, int num_tokens,
              int num_heads, int num_kv_heads, int head_dim, const RoundFn& round_fn,
              float scale = 1.f);  // cos and sin times scale (RopeParams::cos_sin_scale)
void ref_silu_and_mul(const float* x, float* out, int num_tokens, int inner,
                      const RoundFn& round_fn);
// y[m, n] = x[m, k] · w[n, k]ᵀ (+ y)
void ref_gemm(const float* x, const float* w, float* y, int m, int n, int k, bool accumulate);

// Runs fn(i) for i in [0, n) on all host cores.
void parallel_for(int n, const std::function<void(int)>& fn);

}  // namespace pagellm::cuda::test
