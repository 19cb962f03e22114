#include "backends/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/simd.h"

namespace pagellm::cpu {

bool simd::has_avx2_fma() {
#if PAGELLM_CPU_X86
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;
#endif
}

namespace {

// sum x[i]^2 in 8 lanes (lane k takes i = k mod 8, one fma each, zero-padded tail), then one fixed
// tree over the lanes; the AVX2 and portable versions perform the same operations.
float sum_squares_portable(const float* x, int64_t n) {
  float lanes[8] = {};
  for (int64_t i = 0; i < n; ++i) lanes[i % 8] = std::fma(x[i], x[i], lanes[i % 8]);
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
         ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

#if PAGELLM_CPU_X86
PAGELLM_AVX2 void rms_norm_avx2(const float* x, const float* weight, float* out, int64_t num_rows,
                                int64_t dim, float eps) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * dim;
    float* orow = out + r * dim;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < dim; i += 8) {
      const __m256i mask = simd::tail_mask(static_cast<int>(std::min<int64_t>(8, dim - i)));
      const __m256 v = _mm256_maskload_ps(xr + i, mask);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    const float inv = 1.0f / std::sqrt(simd::hsum8(acc) / static_cast<float>(dim) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (int64_t i = 0; i < dim; i += 8) {
      const __m256i mask = simd::tail_mask(static_cast<int>(std::min<int64_t>(8, dim - i)));
      const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(weight + i, mask),
                                     _mm256_mul_ps(_mm256_maskload_ps(xr + i, mask), vinv));
      _mm256_maskstore_ps(orow + i, mask, v);
    }
  }
}
#endif

}  // namespace

void rms_norm(const float* x, const float* weight, float* out, int64_t num_rows, int64_t dim,
              float eps) {
#if PAGELLM_CPU_X86
  if (simd::has_avx2_fma()) return rms_norm_avx2(x, weight, out, num_rows, dim, eps);
#endif
  for (int64_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * dim;
    float* orow = out + r * dim;
    const float inv = 1.0f / std::sqrt(sum_squares_portable(xr, dim) / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) orow[i] = weight[i] * (xr[i] * inv);
  }
}

void embedding(const int32_t* ids, const float* table, float* out, int64_t num_tokens,
               int64_t dim) {
  for (int64_t t = 0; t < num_tokens; ++t)
    std::copy_n(table + static_cast<int64_t>(ids[t]) * dim, dim, out + t * dim);
}

void rope_tables(const int32_t* positions, int64_t num_tokens, int64_t head_dim,
                 const float* inv_freq, float* cos_out, float* sin_out, float scale) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t)
    for (int64_t i = 0; i < half; ++i) {
      // HF forms the angle as a fp32 product, then takes cos/sin of it (then scales them).
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_out[t * half + i] = std::cos(angle) * scale;
      sin_out[t * half + i] = std::sin(angle) * scale;
    }
}

void apply_rope(float* x, int64_t row_stride, const float* cos_t, const float* sin_t,
                int64_t num_tokens, int64_t num_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + t * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void apply_rope(float* x, int64_t row_stride, const int32_t* positions, int64_t num_tokens,
                int64_t num_heads, int64_t head_dim, const float* inv_freq) {
  const size_t size = static_cast<size_t>(num_tokens * (head_dim / 2));
  std::vector<float> cos_t(size), sin_t(size);  // [num_tokens, head_dim / 2]
  rope_tables(positions, num_tokens, head_dim, inv_freq, cos_t.data(), sin_t.data());
  apply_rope(x, row_stride, cos_t.data(), sin_t.data(), num_tokens, num_heads, head_dim);
}

namespace {

#if PAGELLM_CPU_X86
// Every element, the row tails included, goes through the same 8-lane code (masked loads).
PAGELLM_AVX2 void silu_mul_avx2(const float* gate_up, float* out, int64_t num_tokens,
                                int64_t inter) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    for (int64_t i = 0; i < inter; i += 8) {
      const __m256i mask = simd::tail_mask(static_cast<int>(std::min<int64_t>(8, inter - i)));
      const __m256 gv = _mm256_maskload_ps(g + i, mask);
      const __m256 uv = _mm256_maskload_ps(u + i, mask);
      const __m256 e = simd::exp8(_mm256_xor_ps(gv, sign));
      const __m256 r = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), uv);
      _mm256_maskstore_ps(o + i, mask, r);
    }
  }
}
#endif

}  // namespace

void silu_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t inter) {
#if PAGELLM_CPU_X86
  if (simd::has_avx2_fma()) return silu_mul_avx2(gate_up, out, num_tokens, inter);
#endif
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void gelu_tanh_mul(const float* gate_up, float* out, int64_t num_tokens, int64_t inter) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* g = gate_up + t * 2 * inter;
    const float* u = g + inter;
    float* o = out + t * inter;
    for (int64_t i = 0; i < inter; ++i) {
      const float x = g[i];
      o[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * u[i];
    }
  }
}

void moe_route(const float* logits, int64_t num_tokens, int64_t num_experts, int64_t top_k,
               bool renormalize, int32_t* ids, float* weights) {
  std::vector<float> probs(static_cast<size_t>(num_experts));
  std::vector<int32_t> rank(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* x = logits + t * num_experts;
    const float max = *std::max_element(x, x + num_experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < num_experts; ++e) sum += probs[size_t(e)] = std::exp(x[e] - max);
    for (int64_t e = 0; e < num_experts; ++e) probs[size_t(e)] /= sum;
    for (int64_t e = 0; e < num_experts; ++e) rank[size_t(e)] = static_cast<int32_t>(e);
    std::partial_sort(rank.begin(), rank.begin() + top_k, rank.end(), [&](int32_t a, int32_t b) {
      return probs[size_t(a)] > probs[size_t(b)] || (probs[size_t(a)] == probs[size_t(b)] && a < b);
    });
    float kept = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) kept += probs[size_t(rank[size_t(j)])];
    for (int64_t j = 0; j < top_k; ++j) {
      ids[t * top_k + j] = rank[size_t(j)];
      const float p = probs[size_t(rank[size_t(j)])];
      weights[t * top_k + j] = renormalize ? p / kept : p;
    }
  }
}

void add_inplace(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void write_kv(const KvLayerView& cache, const float* k, const float* v, int64_t row_stride,
              const int64_t* slots, int64_t num_tokens) {
  const int64_t width = cache.num_kv_heads * cache.head_dim;  // one slot: [num_kv_heads, head_dim]
  if (!cache.fp8) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      std::copy_n(k + t * row_stride, width, cache.k + slots[t] * width);
      std::copy_n(v + t * row_stride, width, cache.v + slots[t] * width);
    }
    return;
  }
  const Fp8Format f = cache.fp8_format;
  const auto round_trip = [f](float x, float inv_scale, float scale) {
    return fp8_to_f32(f32_to_fp8(x * inv_scale, f), f) * scale;
  };
  const float inv_k = 1.f / cache.k_scale, inv_v = 1.f / cache.v_scale;
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* kc = cache.k + slots[t] * width;
    float* vc = cache.v + slots[t] * width;
    for (int64_t i = 0; i < width; ++i) {
      kc[i] = round_trip(k[t * row_stride + i], inv_k, cache.k_scale);
      vc[i] = round_trip(v[t * row_stride + i], inv_v, cache.v_scale);
    }
  }
}

}  // namespace pagellm::cpu
