// One paged-attention case of the device kernel tests (kernel_tests.cpp runs it against the float64
// reference of kernel_reference.cpp), shared by the test files that add cases.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace pagellm::cuda::test {

struct AttnCase {
  DType dtype;
  int num_heads, num_kv_heads, head_dim, block_size;
  std::vector<int> q_lens, ctx_lens;  // per seq; ctx includes the q_len new tokens
  int fixed_splits = 0;
  std::string label;
  DType kv_dtype = DType::kF32;  // kF8E4M3 / kF8E5M2: an FP8 cache; anything else: dtype
  int window = 0;                // sliding window (AttentionParams::window)
  float softcap = 0.f;           // score soft cap (AttentionParams::softcap)
};

// Runs the case through plan_attention / run_attention and checks it (and, with splits, a second
// call on the same counters).
void test_attention(const AttnCase& c);
// n values drawn from choices (the tests' fixed seed).
std::vector<int> pick(std::initializer_list<int> choices, int n);
// Sliding windows and soft caps (attention_window_tests.cpp).
void window_cases();

}  // namespace pagellm::cuda::test
