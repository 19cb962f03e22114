#include "cli/throughput_bound.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pagellm::cli {
namespace {

// Weights of one layer's projections a token passes through (a MoE layer: the router and top_k
// experts). A decode step reads at least these: every dense weight, top_k of a MoE layer's experts.
double layer_weights_per_token(const io::ModelConfig& c, int64_t layer) {
  const double h = double(c.hidden_size), d = double(c.head_dim);
  const double attn = h * double(c.num_attention_heads + 2 * c.num_key_value_heads) * d +
                      double(c.num_attention_heads) * d * h;
  if (!c.moe_layer(layer)) return attn + 3.0 * h * double(c.intermediate_size);
  const double expert = 3.0 * h * double(c.moe.intermediate_size);
  return attn + h * double(c.moe.num_experts) + double(c.moe.top_k) * expert;
}

// Sum over positions p = first .. last (1-based counts of keys attended) of min(p, window).
double keys_attended(int64_t first, int64_t last, int64_t window) {
  if (last < first) return 0;
  auto full = [](double a, double b) { return (a + b) * (b - a + 1) / 2; };  // sum a..b
  if (window <= 0 || last <= window) return full(double(first), double(last));
  if (first > window) return double(window) * double(last - first + 1);
  return full(double(first), double(window)) + double(window) * double(last - window);
}

}  // namespace

ThroughputBound throughput_bound(const io::ModelConfig& c, const BoundInputs& in,
                                 const runner::DeviceCeilings& ceilings) {
  ThroughputBound b;
  double per_token = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) per_token += layer_weights_per_token(c, l);
  const double lm_head = double(c.vocab_size) * double(c.hidden_size);
  const double projection_bytes = in.fp8_projections ? 1.0 : in.weight_bytes;
  b.step_bytes = per_token * projection_bytes + lm_head * in.weight_bytes;
  const double kv_row = 2.0 * double(c.num_key_value_heads) * double(c.head_dim);  // K and V
  double generated_after_first = 0, longest_after_first = 0;
  for (const auto& [prompt, output] : in.requests) {
    const double projection_flop = 2.0 * per_token * double(prompt);
    b.prefill_flop += projection_flop + 2.0 * lm_head;
    if (in.fp8_projections) b.prefill_fp8_flop += projection_flop;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const int64_t window = c.layer_window(l);
      // Q·Kᵀ and P·V: 2 FLOP per multiply-add, each over head_dim per key per query head.
      b.prefill_flop += 4.0 * double(c.num_attention_heads) * double(c.head_dim) *
                        keys_attended(1, prompt, window);
      // Generated token t (t = 1 .. output - 1 after the prefill's) attends prompt + t keys.
      b.kv_read_bytes +=
          kv_row * in.kv_bytes * keys_attended(prompt + 1, prompt + output - 1, window);
    }
    generated_after_first += double(std::max<int64_t>(0, output - 1));
    longest_after_first = std::max(longest_after_first, double(output - 1));
  }
  // A step carries at most max_num_seqs tokens, and one of each request at most: a request's
  // tokens take a step each.
  b.decode_steps = std::max(std::ceil(generated_after_first / double(std::max(1, in.max_num_seqs))),
                            longest_after_first);
  b.prefill_seconds = (b.prefill_flop - b.prefill_fp8_flop) / (ceilings.gemm_tflops * 1e12);
  if (b.prefill_fp8_flop > 0)
    b.prefill_seconds += b.prefill_fp8_flop / (ceilings.fp8_gemm_tflops * 1e12);
  b.decode_seconds = (b.decode_steps * b.step_bytes + b.kv_read_bytes) / (ceilings.copy_gbps * 1e9);
  return b;
}

std::string describe_bound(const ThroughputBound& b, const runner::DeviceCeilings& ceilings,
                           double elapsed_seconds) {
  char fp8[128] = "";
  if (b.prefill_fp8_flop > 0)
    std::snprintf(fp8, sizeof fp8, "%.2f TFLOP of FP8 projections at %.1f TFLOP/s + ",
                  b.prefill_fp8_flop / 1e12, ceilings.fp8_gemm_tflops);
  char line[640];
  std::snprintf(line, sizeof line,
                "Lower bound: %.3f s = prefill %.3f s (%s%.2f TFLOP at %.1f TFLOP/s) + decode %.3f "
                "s (%.0f steps x %.3f GB of weights + %.3f GB of K/V at %.1f GB/s); this run took "
                "%.2fx the bound",
                b.seconds(), b.prefill_seconds, fp8, (b.prefill_flop - b.prefill_fp8_flop) / 1e12,
                ceilings.gemm_tflops, b.decode_seconds, b.decode_steps, b.step_bytes / 1e9,
                b.kv_read_bytes / 1e9, ceilings.copy_gbps, elapsed_seconds / b.seconds());
  return line;
}

}  // namespace pagellm::cli
