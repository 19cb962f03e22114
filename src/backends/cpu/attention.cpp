// Paged causal GQA attention on the CPU. Work units are (row, kv head): the group of query heads
// sharing one kv head attends over positions [0, pos] of the row's sequence, reading each K/V row
// once for the whole group. Batch invariance: a unit's arithmetic depends only on its own row,
// position and cache contents, never on the other rows of the call or the thread split.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd.h"
#include "common/thread_pool.h"

namespace pagellm::cpu {

namespace {

constexpr int64_t kMinWorkPerChunk = 1 << 15;

// Per-thread scratch of one unit.
struct Scratch {
  std::vector<const float*> k_rows;  // [ctx]: K row of each position for this kv head
  std::vector<const float*> v_rows;  // [ctx]
  std::vector<float> probs;          // [group, ctx rounded up to 8]
};

// Resolves the block table once per unit: position j lives in block table[j / bs], offset j % bs.
void gather_rows(const KvLayerView& c, std::span<const int32_t> table, int64_t ctx, int64_t kv_head,
                 Scratch& s) {
  const int64_t slot_width = c.num_kv_heads * c.head_dim;
  s.k_rows.resize(static_cast<size_t>(ctx));
  s.v_rows.resize(static_cast<size_t>(ctx));
  int64_t j = 0;
  for (int64_t b = 0; j < ctx; ++b) {
    const int64_t base = (static_cast<int64_t>(table[b]) * c.block_size) * slot_width + kv_head * c.head_dim;
    for (int64_t off = 0; off < c.block_size && j < ctx; ++off, ++j) {
      s.k_rows[j] = c.k + base + off * slot_width;
      s.v_rows[j] = c.v + base + off * slot_width;
    }
  }
}

void attend_portable(const KvLayerView& c, const float* q, int64_t ctx, int64_t group, float scale,
                     float* out, Scratch& s) {
  const int64_t hd = c.head_dim;
  s.probs.resize(static_cast<size_t>(group * ctx));
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* p = s.probs.data() + g * ctx;
    float m = -INFINITY;
    for (int64_t j = 0; j < ctx; ++j) {
      p[j] = dot(qg, s.k_rows[j], hd) * scale;
      m = std::max(m, p[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < ctx; ++j) sum += (p[j] = std::exp(p[j] - m));
    const float inv = 1.0f / sum;
    float* o = out + g * hd;
    for (int64_t d = 0; d < hd; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < ctx; ++j) acc = std::fma(p[j], s.v_rows[j][d], acc);
      o[d] = acc * inv;
    }
  }
}

#if PAGELLM_CPU_X86
// Sums of 8 vectors, lane l of the result = fixed-tree sum of v[l]'s lanes.
PAGELLM_AVX2 inline __m256 hsum8x8(const __m256* v) {
  const __m256 a01 = _mm256_hadd_ps(v[0], v[1]);
  const __m256 a23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 a45 = _mm256_hadd_ps(v[4], v[5]);
  const __m256 a67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 b0 = _mm256_hadd_ps(a01, a23);  // [0 1 2 3 | 0 1 2 3] halves of rows 0-3
  const __m256 b1 = _mm256_hadd_ps(a45, a67);  // same for rows 4-7
  const __m256 lo = _mm256_permute2f128_ps(b0, b1, 0x20);
  const __m256 hi = _mm256_permute2f128_ps(b0, b1, 0x31);
  return _mm256_add_ps(lo, hi);
}

// Scores of one head against 8 K rows: per row, the head_dim products are accumulated per lane
// (fma over 8-wide chunks of d, zero-padded), then summed across lanes by hsum8x8's fixed tree.
PAGELLM_AVX2 inline __m256 scores8(const float* q, const float* const* rows, int count,
                                   int64_t hd) {
  __m256 prod[8];
  for (int r = 0; r < 8; ++r) prod[r] = _mm256_setzero_ps();
  for (int64_t d = 0; d < hd; d += 8) {
    const __m256i mask = simd::tail_mask(static_cast<int>(std::min<int64_t>(8, hd - d)));
    const __m256 qv = _mm256_maskload_ps(q + d, mask);
    for (int r = 0; r < count; ++r)
      prod[r] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(rows[r] + d, mask), prod[r]);
  }
  return hsum8x8(prod);
}

PAGELLM_AVX2 void attend_avx2(const KvLayerView& c, const float* q, int64_t ctx, int64_t group,
                              float scale, float* out, Scratch& s) {
  const int64_t hd = c.head_dim;
  const int64_t padded = (ctx + 7) / 8 * 8;
  s.probs.resize(static_cast<size_t>(group * padded));
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* p = s.probs.data() + g * padded;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int64_t j = 0; j < ctx; j += 8) {
      const int count = static_cast<int>(std::min<int64_t>(8, ctx - j));
      __m256 sc = _mm256_mul_ps(scores8(qg, s.k_rows.data() + j, count, hd), vscale);
      const __m256 valid = _mm256_castsi256_ps(simd::tail_mask(count));
      sc = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc, valid);
      _mm256_storeu_ps(p + j, sc);
      vmax = _mm256_max_ps(vmax, sc);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    const __m256 m = _mm256_set1_ps(*std::max_element(lanes, lanes + 8));
    // exp(-inf - m) = 0 for the padding lanes, so they add nothing to the sum or the output.
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t j = 0; j < ctx; j += 8) {
      const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), m));
      _mm256_storeu_ps(p + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / simd::hsum8(vsum));
    // out[d] = sum_j p[j] v[j][d]: four interleaved chains (j mod 4) so the loop is not bound by
    // fma latency; the split depends only on ctx.
    for (int64_t d = 0; d < hd; d += 8) {
      const __m256i mask = simd::tail_mask(static_cast<int>(std::min<int64_t>(8, hd - d)));
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      int64_t j = 0;
      for (; j + 4 <= ctx; j += 4)
        for (int l = 0; l < 4; ++l)
          acc[l] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j + l),
                                   _mm256_maskload_ps(s.v_rows[j + l] + d, mask), acc[l]);
      for (int l = 0; j < ctx; ++j, ++l)
        acc[l] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), _mm256_maskload_ps(s.v_rows[j] + d, mask),
                                 acc[l]);
      const __m256 r = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
      _mm256_maskstore_ps(out + g * hd + d, mask, _mm256_mul_ps(r, inv));
    }
  }
}
#endif

}  // namespace

void paged_attention(const KvLayerView& cache, const float* q, int64_t q_stride,
                     std::span<const AttentionSeq> seqs, int64_t num_heads, float scale,
                     float* out) {
  const int64_t group = num_heads / cache.num_kv_heads;
  const int64_t hd = cache.head_dim;
  const int64_t out_stride = num_heads * hd;
  // Units are (row, kv head); the row -> seq lookup table keeps the threaded loop flat.
  std::vector<int32_t> row_seq;  // [num_tokens]
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int64_t i = 0; i < seqs[s].num_tokens; ++i) row_seq.push_back(static_cast<int32_t>(s));
  const int64_t num_units = static_cast<int64_t>(row_seq.size()) * cache.num_kv_heads;
  int64_t max_ctx = 1;
  for (const auto& s : seqs) max_ctx = std::max(max_ctx, s.num_computed + s.num_tokens);
#if PAGELLM_CPU_X86
  const bool vec = simd::has_avx2_fma();
#else
  const bool vec = false;
#endif
  auto run = [&](size_t begin, size_t end) {
    Scratch scratch;
    for (int64_t u = static_cast<int64_t>(begin); u < static_cast<int64_t>(end); ++u) {
      const int64_t row = u / cache.num_kv_heads;
      const int64_t kv_head = u % cache.num_kv_heads;
      const AttentionSeq& s = seqs[static_cast<size_t>(row_seq[row])];
      const int64_t ctx = s.num_computed + (row - s.token_begin) + 1;
      gather_rows(cache, s.block_table, ctx, kv_head, scratch);
      const float* qu = q + row * q_stride + kv_head * group * hd;
      float* ou = out + row * out_stride + kv_head * group * hd;
#if PAGELLM_CPU_X86
      if (vec) {
        attend_avx2(cache, qu, ctx, group, scale, ou, scratch);
        continue;
      }
#endif
      attend_portable(cache, qu, ctx, group, scale, ou, scratch);
    }
  };
  (void)vec;
  const int64_t work_per_unit = 2 * group * hd * (max_ctx / 2 + 1);
  ThreadPool::global().parallel_for(static_cast<size_t>(num_units), run,
                                    static_cast<size_t>(std::max<int64_t>(1, kMinWorkPerChunk / work_per_unit)));
}

}  // namespace pagellm::cpu
