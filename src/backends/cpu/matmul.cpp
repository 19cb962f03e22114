// The batched matmul: register tiles of up to 6 tokens x 16 output columns (or 1-3 tokens x 32-64
// columns) so every weight vector loaded is reused across the tile's tokens.
//
// Batch invariance: each output is the chain acc = fma(x[t, i], w[o, i], acc) for i = 0 .. in-1
// from acc = 0, then + bias[o], in one vector lane. Tile shapes, leftover tiles and the thread
// split only decide which lane and which moment; they never reorder a chain. The portable path
// runs the same chains with std::fma (correctly rounded, like the instruction), so a process
// gets the same bits for a row whether it is decoded alone or in a batch of any size.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "common/thread_pool.h"

namespace pagellm::cpu {

namespace {

// Multiply-adds below which a chunk is not worth waking another thread for (tens of µs).
constexpr int64_t kMinWorkPerChunk = 1 << 16;
constexpr int64_t kTileTokens = 6;

struct MatmulArgs {
  const float* x;          // [num_tokens, in]
  const PackedMatrix* w;   // packed [out_features, in]
  const float* bias;       // [out_features] or null
  float* out;              // [num_tokens, out_features]
  int64_t num_tokens;
};

// Units are (token tile, panel) pairs, panel-minor: unit u covers tokens [6 * (u / P), ...) and
// output columns [16 * (u % P), ...) with P the number of panels.
void units_portable(const MatmulArgs& a, int64_t begin, int64_t end) {
  const PackedMatrix& w = *a.w;
  const int64_t num_panels = w.num_panels();
  float acc[kPanelWidth];
  for (int64_t u = begin; u < end; ++u) {
    const int64_t p = u % num_panels;
    const int64_t t0 = (u / num_panels) * kTileTokens;
    const int64_t t1 = std::min(a.num_tokens, t0 + kTileTokens);
    const float* panel = w.data.data() + p * w.in * kPanelWidth;  // [in, 16]
    const int64_t cols = std::min(kPanelWidth, w.out_features - p * kPanelWidth);
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = a.x + t * w.in;
      std::fill_n(acc, kPanelWidth, 0.0f);
      for (int64_t i = 0; i < w.in; ++i)
        for (int64_t c = 0; c < kPanelWidth; ++c)
          acc[c] = std::fma(xt[i], panel[i * kPanelWidth + c], acc[c]);
      float* ot = a.out + t * w.out_features + p * kPanelWidth;
      for (int64_t c = 0; c < cols; ++c)
        ot[c] = a.bias != nullptr ? acc[c] + a.bias[p * kPanelWidth + c] : acc[c];
    }
  }
}

#if PAGELLM_CPU_X86
// M tokens x P panels (2 * P vectors of 8 columns): M * 2P accumulators stay in registers.
template <int M, int P>
PAGELLM_AVX2 [[gnu::always_inline]] inline void tile_avx2(const MatmulArgs& a, int64_t t0,
                                                          int64_t p0) {
  const PackedMatrix& w = *a.w;
  const int64_t in = w.in;
  const float* x = a.x + t0 * in;
  const float* panel = w.data.data() + p0 * in * kPanelWidth;
  __m256 acc[M][2 * P];
#pragma GCC unroll 8
  for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < 2 * P; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t i = 0; i < in; ++i) {
    __m256 wv[2 * P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const float* src = panel + p * in * kPanelWidth + i * kPanelWidth;
      wv[2 * p] = _mm256_loadu_ps(src);
      wv[2 * p + 1] = _mm256_loadu_ps(src + 8);
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m256 xb = _mm256_broadcast_ss(x + m * in + i);
#pragma GCC unroll 8
      for (int v = 0; v < 2 * P; ++v) acc[m][v] = _mm256_fmadd_ps(xb, wv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < 2 * P; ++v) {
    const int64_t o = p0 * kPanelWidth + v * 8;
    const int64_t cols = std::min<int64_t>(8, w.out_features - o);
    if (cols <= 0) break;
    const __m256i mask = simd::tail_mask(static_cast<int>(cols));
    const __m256 b = a.bias == nullptr ? _mm256_setzero_ps() : _mm256_maskload_ps(a.bias + o, mask);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      const __m256 r = a.bias == nullptr ? acc[m][v] : _mm256_add_ps(acc[m][v], b);
      float* dst = a.out + (t0 + m) * w.out_features + o;
      if (cols == 8)
        _mm256_storeu_ps(dst, r);
      else
        _mm256_maskstore_ps(dst, mask, r);
    }
  }
}

// Panels [pb, pe) of the M tokens at t0: groups of P panels, then single panels.
template <int M, int P>
PAGELLM_AVX2 void panels_avx2(const MatmulArgs& a, int64_t t0, int64_t pb, int64_t pe) {
  int64_t p = pb;
  for (; p + P <= pe; p += P) tile_avx2<M, P>(a, t0, p);
  if constexpr (P > 1)
    for (; p < pe; ++p) tile_avx2<M, 1>(a, t0, p);
}

PAGELLM_AVX2 void units_avx2(const MatmulArgs& a, int64_t begin, int64_t end) {
  const int64_t num_panels = a.w->num_panels();
  for (int64_t u = begin; u < end;) {
    const int64_t tile = u / num_panels;
    const int64_t pb = u % num_panels;
    const int64_t pe = std::min(num_panels, pb + (end - u));
    const int64_t t0 = tile * kTileTokens;
    switch (std::min(kTileTokens, a.num_tokens - t0)) {
      case 6: panels_avx2<6, 1>(a, t0, pb, pe); break;
      case 5: panels_avx2<5, 1>(a, t0, pb, pe); break;
      case 4: panels_avx2<4, 1>(a, t0, pb, pe); break;
      case 3: panels_avx2<3, 2>(a, t0, pb, pe); break;
      case 2: panels_avx2<2, 3>(a, t0, pb, pe); break;
      default: panels_avx2<1, 4>(a, t0, pb, pe); break;
    }
    u += pe - pb;
  }
}
#endif

}  // namespace

PackedMatrix pack_matrix(const float* w, int64_t out_features, int64_t in) {
  PackedMatrix p;
  p.in = in;
  p.out_features = out_features;
  p.data.assign(static_cast<size_t>(p.num_panels() * in * kPanelWidth), 0.0f);
  for (int64_t o = 0; o < out_features; ++o)
    for (int64_t i = 0; i < in; ++i)
      p.data[static_cast<size_t>(((o / kPanelWidth) * in + i) * kPanelWidth + o % kPanelWidth)] =
          w[o * in + i];
  return p;
}

float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = std::fma(a[i], b[i], acc);
  return acc;
}

void matmul(const float* x, const PackedMatrix& w, const float* bias, float* out,
            int64_t num_tokens) {
  if (num_tokens <= 0 || w.out_features <= 0) return;
  const MatmulArgs args{x, &w, bias, out, num_tokens};
  const int64_t num_tiles = (num_tokens + kTileTokens - 1) / kTileTokens;
  const int64_t num_units = num_tiles * w.num_panels();
  const int64_t work_per_unit = std::max<int64_t>(1, kTileTokens * kPanelWidth * w.in);
  const size_t min_chunk = static_cast<size_t>(std::max<int64_t>(1, kMinWorkPerChunk / work_per_unit));
#if PAGELLM_CPU_X86
  const bool vec = simd::has_avx2_fma();
#else
  const bool vec = false;
#endif
  ThreadPool::global().parallel_for(
      static_cast<size_t>(num_units),
      [&](size_t begin, size_t end) {
#if PAGELLM_CPU_X86
        if (vec) return units_avx2(args, static_cast<int64_t>(begin), static_cast<int64_t>(end));
#endif
        units_portable(args, static_cast<int64_t>(begin), static_cast<int64_t>(end));
      },
      min_chunk);
  (void)vec;
}

void matmul(const float* x, const float* w, const float* bias, float* out, int64_t num_tokens,
            int64_t in, int64_t out_features) {
  matmul(x, pack_matrix(w, out_features, in), bias, out, num_tokens);
}

}  // namespace pagellm::cpu
