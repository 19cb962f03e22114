// Paged causal GQA attention on the CPU. Work units are rows: every head of the row attends over
// positions [0, pos] of the row's sequence (a sliding-window layer: the last `window` of them),
// reading each K/V slot once. Batch invariance: a unit's arithmetic depends only on its own row,
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
// Positions ahead whose K/V slots are prefetched: the pool is far larger than the caches, and a
// slot costs ~20 ns of compute, so ~0.5 µs of lead hides DRAM latency under load.
constexpr int64_t kPrefetchAhead = 24;

// Per-thread scratch of one unit.
struct Scratch {
  std::vector<float> probs;          // [ctx, 8 heads] (AVX2) or [group, ctx] (portable)
  std::vector<int64_t> offsets;      // [ctx]: float offset of each position's slot in K / V
};

// Resolves the block table once per row for positions [first, end): position j lives in block
// table[j / bs], offset j % bs; offsets[j - first] is its slot.
void slot_offsets(const KvLayerView& c, std::span<const int32_t> table, int64_t first, int64_t end,
                  Scratch& s) {
  const int64_t slot_width = c.num_kv_heads * c.head_dim;
  s.offsets.resize(static_cast<size_t>(end - first));
  for (int64_t j = first; j < end;) {
    const int64_t b = j / c.block_size;
    const int64_t base = static_cast<int64_t>(table[b]) * c.block_size * slot_width;
    for (int64_t off = j % c.block_size; off < c.block_size && j < end; ++off, ++j)
      s.offsets[j - first] = base + off * slot_width;
  }
}

// Gemma 2's score cap: cap * tanh(score / cap) (no-op for cap 0).
inline float soft_cap(float score, float cap) {
  return cap > 0.0f ? cap * std::tanh(score / cap) : score;
}

// One kv head's group of query heads over positions [0, ctx), in plain scalar code.
void attend_portable(const KvLayerView& c, const float* q, int64_t ctx, int64_t kv_head,
                     int64_t group, float scale, float softcap, float* out, Scratch& s) {
  const int64_t hd = c.head_dim;
  const int64_t* offs = s.offsets.data();
  s.probs.resize(static_cast<size_t>(group * ctx));
  for (int64_t g = 0; g < group; ++g) {
    const float* qg = q + g * hd;
    float* p = s.probs.data() + g * ctx;
    float m = -INFINITY;
    for (int64_t j = 0; j < ctx; ++j) {
      p[j] = soft_cap(dot(qg, c.k + offs[j] + kv_head * hd, hd) * scale, softcap);
      m = std::max(m, p[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < ctx; ++j) sum += (p[j] = std::exp(p[j] - m));
    const float inv = 1.0f / sum;
    float* o = out + g * hd;
    for (int64_t d = 0; d < hd; ++d) {
      float acc = 0.0f;
      for (int64_t j = 0; j < ctx; ++j) acc = std::fma(p[j], c.v[offs[j] + kv_head * hd + d], acc);
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

// 8 lanes of row + d: a plain load for a whole chunk, a masked one for a head_dim tail.
PAGELLM_AVX2 inline __m256 load_chunk(const float* row, int64_t d, int64_t hd) {
  if (d + 8 <= hd) return _mm256_loadu_ps(row + d);
  return _mm256_maskload_ps(row + d, simd::tail_mask(static_cast<int>(hd - d)));
}

// One row, all heads, vectorised across 8 query heads at a time: for each position the K slot
// (all kv heads, contiguous) is read once, the 8 heads' dot products are summed across lanes by
// hsum8x8 into one vector of 8 scores, and softmax and the weighted V sum then run lane-per-head
// with no horizontal work. Per (head, position) the arithmetic is fixed by head_dim and ctx alone.
// kHd > 0 fixes head_dim at compile time and kFull that every group has 8 heads (stories260K's
// shape); the generic instance runs exactly the same operations with runtime bounds.
template <int kHd, bool kFull>
PAGELLM_AVX2 void attend_row_avx2(const KvLayerView& c, const float* q, int64_t ctx,
                                  int64_t num_heads, float scale, float softcap, float* out,
                                  Scratch& s) {
  const int64_t hd = kHd > 0 ? kHd : c.head_dim;
  const int64_t slot_width = c.num_kv_heads * hd;
  const int64_t group = num_heads / c.num_kv_heads;
  const int64_t* offs = s.offsets.data();
  s.probs.resize(static_cast<size_t>(ctx * 8));
  float* p = s.probs.data();  // [ctx, 8 heads]
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int64_t h0 = 0; h0 < num_heads; h0 += 8) {
    const int64_t nh = kFull ? 8 : std::min<int64_t>(8, num_heads - h0);
    int64_t kv_off[8];  // offset of head h0 + h's kv head inside a slot
    for (int h = 0; h < 8; ++h) kv_off[h] = (h < nh ? (h0 + h) / group : 0) * hd;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int64_t j = 0; j < ctx; ++j) {
      const float* kslot = c.k + offs[j];
      if (h0 == 0 && j + kPrefetchAhead < ctx) {
        // Slots are scattered over the pool (one block per 16 positions): fetch ahead, V too.
        for (int64_t w = 0; w < slot_width; w += 16) {
          _mm_prefetch(reinterpret_cast<const char*>(c.k + offs[j + kPrefetchAhead] + w),
                       _MM_HINT_T0);
          _mm_prefetch(reinterpret_cast<const char*>(c.v + offs[j + kPrefetchAhead] + w),
                       _MM_HINT_T0);
        }
      }
      __m256 prod[8];
#pragma GCC unroll 8
      for (int h = 0; h < 8; ++h) {
        prod[h] = _mm256_setzero_ps();
        if (kFull || h < nh)
          for (int64_t d = 0; d < hd; d += 8)
            prod[h] = _mm256_fmadd_ps(load_chunk(q + (h0 + h) * hd, d, hd),
                                      load_chunk(kslot + kv_off[h], d, hd), prod[h]);
      }
      const __m256 sc = _mm256_mul_ps(hsum8x8(prod), vscale);
      _mm256_storeu_ps(p + j * 8, sc);
      vmax = _mm256_max_ps(vmax, sc);
    }
    if (softcap > 0.0f) {  // scalar: Gemma 2 only
      alignas(32) float mx[8];
      std::fill_n(mx, 8, -INFINITY);
      for (int64_t i = 0; i < ctx * 8; ++i)
        mx[i % 8] = std::max(mx[i % 8], p[i] = soft_cap(p[i], softcap));
      vmax = _mm256_load_ps(mx);
    }
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t j = 0; j < ctx; ++j) {
      const __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j * 8), vmax));
      _mm256_storeu_ps(p + j * 8, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    alignas(32) float inv[8];
    _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), vsum));
    // out[h][d] = sum_j p[j][h] v[j][d]: one fma chain per (head, d) in position order.
    for (int64_t d = 0; d < hd; d += 8) {
      __m256 acc[8];
#pragma GCC unroll 8
      for (int h = 0; h < 8; ++h) acc[h] = _mm256_setzero_ps();
      for (int64_t j = 0; j < ctx; ++j) {
        const float* vslot = c.v + offs[j];
#pragma GCC unroll 8
        for (int h = 0; h < 8; ++h)
          if (kFull || h < nh)
            acc[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j * 8 + h),
                                     load_chunk(vslot + kv_off[h], d, hd), acc[h]);
      }
#pragma GCC unroll 8
      for (int h = 0; h < 8; ++h) {
        if (!kFull && h >= nh) break;
        const __m256 r = _mm256_mul_ps(acc[h], _mm256_set1_ps(inv[h]));
        float* dst = out + (h0 + h) * hd + d;
        if (d + 8 <= hd)
          _mm256_storeu_ps(dst, r);
        else
          _mm256_maskstore_ps(dst, simd::tail_mask(static_cast<int>(hd - d)), r);
      }
    }
  }
}
#endif

}  // namespace

void paged_attention(const KvLayerView& cache, const float* q, int64_t q_stride,
                     std::span<const AttentionSeq> seqs, int64_t num_heads, float scale, float* out,
                     int64_t window, float softcap) {
  const int64_t group = num_heads / cache.num_kv_heads;
  const int64_t hd = cache.head_dim;
  const int64_t out_stride = num_heads * hd;
  // Units are (row, kv head); the row -> seq lookup table keeps the threaded loop flat.
  std::vector<int32_t> row_seq;  // [num_tokens]
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int64_t i = 0; i < seqs[s].num_tokens; ++i) row_seq.push_back(static_cast<int32_t>(s));
  const int64_t num_rows = static_cast<int64_t>(row_seq.size());
  int64_t max_ctx = 1;
  for (const auto& s : seqs) max_ctx = std::max(max_ctx, s.num_computed + s.num_tokens);
  if (window > 0) max_ctx = std::min(max_ctx, window);
#if PAGELLM_CPU_X86
  const bool vec = simd::has_avx2_fma();
#else
  const bool vec = false;
#endif
  auto run = [&](size_t begin, size_t end) {
    Scratch scratch;
    for (int64_t row = static_cast<int64_t>(begin); row < static_cast<int64_t>(end); ++row) {
      const AttentionSeq& s = seqs[static_cast<size_t>(row_seq[row])];
      const int64_t end = s.num_computed + (row - s.token_begin) + 1;
      const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;
      const int64_t ctx = end - first;  // the positions attended
      slot_offsets(cache, s.block_table, first, end, scratch);
#if PAGELLM_CPU_X86
      if (vec) {
        const bool stories_shape = hd == 8 && num_heads % 8 == 0;
        (stories_shape ? attend_row_avx2<8, true>
                       : attend_row_avx2<0, false>)(cache, q + row * q_stride, ctx, num_heads,
                                                    scale, softcap, out + row * out_stride,
                                                    scratch);
        continue;
      }
#endif
      for (int64_t kv_head = 0; kv_head < cache.num_kv_heads; ++kv_head)
        attend_portable(cache, q + row * q_stride + kv_head * group * hd, ctx, kv_head, group,
                        scale, softcap, out + row * out_stride + kv_head * group * hd, scratch);
    }
  };
  (void)vec;
  const int64_t work_per_unit = 2 * num_heads * hd * (max_ctx / 2 + 1);
  ThreadPool::global().parallel_for(static_cast<size_t>(num_rows), run,
                                    static_cast<size_t>(std::max<int64_t>(1, kMinWorkPerChunk / work_per_unit)));
}

}  // namespace pagellm::cpu
