#include "backends/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/thread_pool.h"

namespace pagellm::cpu {

namespace {

// Work (multiply-adds) below which a chunk is not worth waking another thread for. Waking the pool
// costs tens of microseconds; tiny models decode fastest on one thread.
constexpr int64_t kMinWorkPerChunk = 1 << 16;

size_t min_chunk_for(int64_t work_per_unit) {
  return static_cast<size_t>(
      std::max<int64_t>(1, kMinWorkPerChunk / std::max<int64_t>(1, work_per_unit)));
}

constexpr int kLanes = 8;

// Sums the 8 lanes in one fixed tree order.
inline float reduce_lanes(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

// R weight rows against one activation row. For every output the operations are exactly those of
// dot(): lane k accumulates x[i + k] * w[i + k] over i in steps of 8, lanes reduce in a fixed tree,
// then the tail is added in order. So R = 4 and R = 1 give bit-identical results (with
// -ffp-contract=off there is no fused multiply-add to differ between the two).
template <int R>
[[gnu::always_inline]] inline void dot_rows(const float* x, const float* w, int64_t n, float* out) {
  float acc[R][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < kLanes; ++k) acc[r][k] += x[i + k] * w[r * n + i + k];
  for (int r = 0; r < R; ++r) {
    float s = reduce_lanes(acc[r]);
    for (int64_t j = i; j < n; ++j) s += x[j] * w[r * n + j];
    out[r] = s;
  }
}

}  // namespace

float dot(const float* a, const float* b, int64_t n) {
  float out;
  dot_rows<1>(a, b, n, &out);
  return out;
}

namespace {

struct MatmulArgs {
  const float* x;     // [num_tokens, in]
  const float* w;     // [out_features, in]
  const float* bias;  // [out_features] or null
  float* out;         // [num_tokens, out_features]
  int64_t num_tokens, in, out_features;
};

constexpr int64_t kRows = 4;
// Tokens go in tiles so a long prefill re-reads a tile of x from cache instead of streaming all of
// x once per weight block. Tiling changes only the loop order, never a reduction.
constexpr int64_t kTokenTile = 32;

// Weight-row blocks [begin, end) of kRows rows for every token. A row's block never depends on the
// batch, so neither does the code path that computes it.
[[gnu::always_inline]] inline void matmul_units(const MatmulArgs& a, int64_t begin, int64_t end) {
  float tile[kRows];
  for (int64_t t0 = 0; t0 < a.num_tokens; t0 += kTokenTile) {
    const int64_t t1 = std::min(a.num_tokens, t0 + kTokenTile);
    for (int64_t u = begin; u < end; ++u) {
      const int64_t o0 = u * kRows;
      const int64_t rows = std::min(kRows, a.out_features - o0);
      for (int64_t t = t0; t < t1; ++t) {
        const float* xt = a.x + t * a.in;
        float* ot = a.out + t * a.out_features + o0;
        if (rows == kRows) {
          dot_rows<kRows>(xt, a.w + o0 * a.in, a.in, tile);
          for (int r = 0; r < kRows; ++r) ot[r] = tile[r];
        } else {
          for (int64_t r = 0; r < rows; ++r) dot_rows<1>(xt, a.w + (o0 + r) * a.in, a.in, ot + r);
        }
        if (a.bias != nullptr)
          for (int64_t r = 0; r < rows; ++r) ot[r] += a.bias[o0 + r];
      }
    }
  }
}

void matmul_units_baseline(const MatmulArgs& a, int64_t begin, int64_t end) {
  matmul_units(a, begin, end);
}

#if defined(__x86_64__) && defined(__GNUC__)
// The same loops vectorised 8 wide. Without FMA contraction (-ffp-contract=off) every lane performs
// the same IEEE multiplies and adds in the same order, so results are bit-identical to the
// baseline.
[[gnu::target("avx2")]] void matmul_units_avx2(const MatmulArgs& a, int64_t begin, int64_t end) {
  matmul_units(a, begin, end);
}
using MatmulUnitsFn = void (*)(const MatmulArgs&, int64_t, int64_t);
MatmulUnitsFn pick_matmul_units() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") ? matmul_units_avx2 : matmul_units_baseline;
}
const MatmulUnitsFn kMatmulUnits = pick_matmul_units();
#else
constexpr auto kMatmulUnits = matmul_units_baseline;
#endif

}  // namespace

void matmul(const float* x, const float* w, const float* bias, float* out, int64_t num_tokens,
            int64_t in, int64_t out_features) {
  const MatmulArgs args{x, w, bias, out, num_tokens, in, out_features};
  const int64_t num_units = (out_features + kRows - 1) / kRows;
  ThreadPool::global().parallel_for(
      static_cast<size_t>(num_units),
      [&](size_t begin, size_t end) {
        kMatmulUnits(args, static_cast<int64_t>(begin), static_cast<int64_t>(end));
      },
      min_chunk_for(kRows * in * num_tokens));
}

void rms_norm(const float* x, const float* weight, float* out, int64_t num_rows, int64_t dim,
              float eps) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * dim;
    float* orow = out + r * dim;
    const float mean_sq = dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean_sq + eps);
    for (int64_t i = 0; i < dim; ++i) orow[i] = weight[i] * (xr[i] * inv);
  }
}

void embedding(const int32_t* ids, const float* table, float* out, int64_t num_tokens,
               int64_t dim) {
  for (int64_t t = 0; t < num_tokens; ++t)
    std::copy_n(table + static_cast<int64_t>(ids[t]) * dim, dim, out + t * dim);
}

std::vector<float> rope_inv_freq(const io::RopeScaling& scaling, double theta, int64_t head_dim) {
  // HF: inv_freq = 1 / theta ** (arange(0, dim, 2).float() / dim), all in fp32.
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), expo);
  }
  using Type = io::RopeScaling::Type;
  if (scaling.type == Type::kLinear) {
    for (float& f : inv) f /= static_cast<float>(scaling.factor);
  } else if (scaling.type == Type::kLlama3) {
    // transformers' _compute_llama3_parameters: low frequencies are divided by factor, high ones
    // kept, and the band in between interpolated smoothly.
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_wavelen = old_len / scaling.low_freq_factor;
    const double high_wavelen = old_len / scaling.high_freq_factor;
    const float factor = static_cast<float>(scaling.factor);
    for (float& f : inv) {
      const float wavelen = 2.0f * static_cast<float>(std::numbers::pi) / f;
      const float scaled = wavelen > low_wavelen ? f / factor : f;
      if (wavelen < high_wavelen || wavelen > low_wavelen) {
        f = scaled;
      } else {
        const float smooth =
            (static_cast<float>(old_len) / wavelen - static_cast<float>(scaling.low_freq_factor)) /
            static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
    }
  }
  return inv;
}

void apply_rope(float* x, int64_t row_stride, const int32_t* positions, int64_t num_tokens,
                int64_t num_heads, int64_t head_dim, const float* inv_freq) {
  const int64_t half = head_dim / 2;
  std::vector<float> cos_t(static_cast<size_t>(half)), sin_t(static_cast<size_t>(half));  // [half]
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // HF forms the angle as a fp32 product, then takes cos/sin of it.
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + t * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_t[i] - b * sin_t[i];
        v[i + half] = b * cos_t[i] + a * sin_t[i];
      }
    }
  }
}

void silu_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t inter) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void add_inplace(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void write_kv(const KvLayerView& cache, const float* k, const float* v, int64_t row_stride,
              const int64_t* slots, int64_t num_tokens) {
  const int64_t width = cache.num_kv_heads * cache.head_dim;  // one slot: [num_kv_heads, head_dim]
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::copy_n(k + t * row_stride, width, cache.k + slots[t] * width);
    std::copy_n(v + t * row_stride, width, cache.v + slots[t] * width);
  }
}

namespace {

// One (row, kv head) unit: the group of query heads sharing that kv head, over positions [0, pos].
void attend_group(const KvLayerView& c, const float* q, std::span<const int32_t> block_table,
                  int64_t pos, int64_t first_head, int64_t group, float scale, float* out,
                  std::vector<float>& scores) {
  const int64_t hd = c.head_dim;
  const int64_t slot_width = c.num_kv_heads * hd;
  const int64_t kv_head = first_head / group;
  const int64_t ctx = pos + 1;
  scores.resize(static_cast<size_t>(ctx * group));  // [group, ctx]
  for (int64_t j = 0; j < ctx; ++j) {
    const int64_t slot =
        static_cast<int64_t>(block_table[j / c.block_size]) * c.block_size + j % c.block_size;
    const float* kj = c.k + slot * slot_width + kv_head * hd;
    for (int64_t g = 0; g < group; ++g)
      scores[g * ctx + j] = dot(q + (first_head + g) * hd, kj, hd) * scale;
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * ctx;
    const float m = *std::max_element(s, s + ctx);
    float sum = 0.0f;
    for (int64_t j = 0; j < ctx; ++j) {
      s[j] = std::exp(s[j] - m);
      sum += s[j];
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < ctx; ++j) s[j] *= inv;
    std::fill_n(out + (first_head + g) * hd, hd, 0.0f);
  }
  for (int64_t j = 0; j < ctx; ++j) {
    const int64_t slot =
        static_cast<int64_t>(block_table[j / c.block_size]) * c.block_size + j % c.block_size;
    const float* vj = c.v + slot * slot_width + kv_head * hd;
    for (int64_t g = 0; g < group; ++g) {
      const float p = scores[g * ctx + j];
      float* o = out + (first_head + g) * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] += p * vj[d];
    }
  }
}

}  // namespace

void paged_attention(const KvLayerView& cache, const float* q, int64_t q_stride,
                     std::span<const AttentionSeq> seqs, int64_t num_heads, float scale,
                     float* out) {
  const int64_t group = num_heads / cache.num_kv_heads;
  const int64_t out_stride = num_heads * cache.head_dim;
  // Units are (row, kv head); the row -> seq lookup table keeps the threaded loop flat.
  std::vector<int32_t> row_seq;  // [num_tokens]
  for (size_t s = 0; s < seqs.size(); ++s)
    for (int64_t i = 0; i < seqs[s].num_tokens; ++i) row_seq.push_back(static_cast<int32_t>(s));
  const int64_t num_units = static_cast<int64_t>(row_seq.size()) * cache.num_kv_heads;
  int64_t max_ctx = 1;
  for (const auto& s : seqs) max_ctx = std::max(max_ctx, s.num_computed + s.num_tokens);
  auto run = [&](size_t begin, size_t end) {
    std::vector<float> scores;  // [group, ctx]
    for (int64_t u = static_cast<int64_t>(begin); u < static_cast<int64_t>(end); ++u) {
      const int64_t row = u / cache.num_kv_heads;
      const int64_t kv_head = u % cache.num_kv_heads;
      const AttentionSeq& s = seqs[static_cast<size_t>(row_seq[row])];
      const int64_t pos = s.num_computed + (row - s.token_begin);
      attend_group(cache, q + row * q_stride, s.block_table, pos, kv_head * group, group, scale,
                   out + row * out_stride, scores);
    }
  };
  const int64_t work_per_unit = 2 * group * cache.head_dim * max_ctx;
  ThreadPool::global().parallel_for(static_cast<size_t>(num_units), run,
                                    min_chunk_for(work_per_unit));
}

}  // namespace pagellm::cpu
