// Sliding-window and soft-capped attention (Gemma, Mistral) through every kernel path, against
// the float64 reference with the same window and cap (kernel_reference.cpp).
#include "attention_case.h"
#include "backends/cuda/kernels.h"

namespace pagellm::cuda::test {

// Sliding windows and soft caps (Gemma, Mistral): decode through both decode kernels (splits over
// the window only), prefill, chunked prefill and verification rows through the 64-row tiles (the
// planner keeps windows off the wgmma kernel), f32, head_dim 256, an FP8 cache, fixed splits.
void window_cases() {
  const DType f32 = DType::kF32, e4m3 = DType::kF8E4M3;
  for (bool tensor_cores : {true, false}) {
    attention_set_decode_tensor_cores(tensor_cores);
    for (DType t : {DType::kBF16, DType::kF16}) {
      for (int d : {64, 128}) {
        AttnCase c{
            t, 32,       8,   d,  16, std::vector<int>(8, 1), pick({1, 100, 129, 1000, 4000}, 8),
            0, "decode", f32, 128};
        test_attention(c);
        c.softcap = 5.f;
        test_attention(c);
        test_attention({t,
                        16,
                        4,
                        d,
                        16,
                        {300, 64, 5, 1},
                        {300, 1000, 700, 2000},
                        0,
                        "prefill+chunked+verify+decode",
                        f32,
                        100,
                        30.f});
      }
    }
  }
  attention_set_decode_tensor_cores(true);
  test_attention({f32, 8, 2, 64, 16, {40, 1}, {40, 300}, 0, "prefill+decode", f32, 16, 5.f});
  test_attention({DType::kBF16, 8, 4, 256, 16, {100, 1}, {300, 1000}, 0, "generic", f32, 64, 50.f});
  // head_dim 256 (Gemma 2 / 3) prefill through the 64-row tiles: full attention and windowed,
  // bf16 / f16, an e4m3 cache, chunks over cached prefixes, rows past one tile.
  for (DType t : {DType::kBF16, DType::kF16}) {
    test_attention(
        {t, 16, 8, 256, 16, {300, 64, 5, 1}, {300, 1000, 700, 2000}, 0, "d256 prefill", f32});
    test_attention(
        {t, 16, 8, 256, 16, {300, 130, 1}, {1000, 130, 4000}, 0, "d256 window", f32, 100, 50.f});
    test_attention({t, 16, 8, 256, 16, {200, 1}, {1000, 3000}, 0, "d256 fp8", e4m3, 256});
  }
  test_attention(
      {DType::kBF16, 32, 8, 128, 16, {200, 1}, {1000, 3000}, 0, "chunk+decode", e4m3, 256, 20.f});
  test_attention(
      {DType::kBF16, 16, 4, 128, 16, {1, 1, 1}, {8191, 17, 300}, 16, "decode", f32, 500});
}

}  // namespace pagellm::cuda::test
