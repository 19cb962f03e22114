// CPU kernels against naive double-precision references, plus the batch-invariance property: a
// row's result is bit-identical whatever else shares the call.
#include <cmath>
#include <numbers>
#include <random>

#include <gtest/gtest.h>

#include "backends/cpu/kernels.h"

namespace pagellm::cpu {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "index " << i;
}

TEST(CpuKernels, MatmulMatchesNaiveForOddShapes) {
  for (auto [tokens, in, out] :
       {std::tuple{1, 1, 1}, {3, 7, 5}, {5, 64, 130}, {2, 173, 9}, {17, 40, 300}}) {
    const auto x = random_vec(static_cast<size_t>(tokens * in), 1);
    const auto w = random_vec(static_cast<size_t>(out * in), 2);
    const auto bias = random_vec(static_cast<size_t>(out), 3);
    std::vector<float> got(static_cast<size_t>(tokens * out));
    matmul(x.data(), w.data(), bias.data(), got.data(), tokens, in, out);
    std::vector<double> want(got.size());
    for (int t = 0; t < tokens; ++t)
      for (int o = 0; o < out; ++o) {
        double s = bias[o];
        for (int i = 0; i < in; ++i) s += static_cast<double>(x[t * in + i]) * w[o * in + i];
        want[t * out + o] = s;
      }
    expect_close(got, want, 1e-5);
  }
}

TEST(CpuKernels, MatmulIsBatchInvariant) {
  // Large enough that the pool splits the work; every row must equal the solo computation exactly.
  const int64_t in = 256, out = 1030, tokens = 9;
  const auto x = random_vec(static_cast<size_t>(tokens * in), 4);
  const auto w = random_vec(static_cast<size_t>(out * in), 5);
  std::vector<float> batched(static_cast<size_t>(tokens * out));
  matmul(x.data(), w.data(), nullptr, batched.data(), tokens, in, out);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<float> solo(static_cast<size_t>(out));
    matmul(x.data() + t * in, w.data(), nullptr, solo.data(), 1, in, out);
    for (int64_t o = 0; o < out; ++o) ASSERT_EQ(solo[o], batched[t * out + o]) << t << "," << o;
    // The same reduction as the exposed reference dot product, bit for bit.
    ASSERT_EQ(solo[out - 1], dot(x.data() + t * in, w.data() + (out - 1) * in, in));
  }
}

// A row's output is bit-identical whether computed alone or inside batches whose sizes leave
// every kind of leftover tile (1, 3, 7, 64 tokens), for the packed matmul with bias and padding
// columns, rms_norm and silu_mul.
TEST(CpuKernels, RowsAreBitIdenticalAcrossBatchSizes) {
  const int64_t in = 172, out = 344, max_tokens = 64;
  const auto x = random_vec(static_cast<size_t>(max_tokens * in), 21);
  const auto w = random_vec(static_cast<size_t>(out * in), 22);
  const auto bias = random_vec(static_cast<size_t>(out), 23);
  const PackedMatrix packed = pack_matrix(w.data(), out, in);
  std::vector<float> solo(static_cast<size_t>(max_tokens * out));  // [max_tokens, out]
  for (int64_t t = 0; t < max_tokens; ++t)
    matmul(x.data() + t * in, packed, bias.data(), solo.data() + t * out, 1);
  for (int64_t t = 0; t < max_tokens; t += 9)
    for (int64_t o = 0; o < out; o += 37)
      ASSERT_EQ(solo[t * out + o], dot(x.data() + t * in, w.data() + o * in, in) + bias[o]);
  const auto gu = random_vec(static_cast<size_t>(max_tokens * 2 * in), 24, 6.0f);
  std::vector<float> silu_solo(static_cast<size_t>(max_tokens * in)), norm_solo(silu_solo.size());
  for (int64_t t = 0; t < max_tokens; ++t) {
    silu_mul(gu.data() + t * 2 * in, silu_solo.data() + t * in, 1, in);
    rms_norm(x.data() + t * in, w.data(), norm_solo.data() + t * in, 1, in, 1e-5f);
  }
  for (int64_t batch : {1, 3, 7, 64}) {
    for (int64_t first : {int64_t{0}, max_tokens - batch}) {
      std::vector<float> got(static_cast<size_t>(batch * out));
      matmul(x.data() + first * in, packed, bias.data(), got.data(), batch);
      for (int64_t i = 0; i < batch * out; ++i)
        ASSERT_EQ(got[i], solo[first * out + i]) << "batch " << batch << " index " << i;
      std::vector<float> silu(static_cast<size_t>(batch * in)), norm(silu.size());
      silu_mul(gu.data() + first * 2 * in, silu.data(), batch, in);
      rms_norm(x.data() + first * in, w.data(), norm.data(), batch, in, 1e-5f);
      for (int64_t i = 0; i < batch * in; ++i) {
        ASSERT_EQ(silu[i], silu_solo[first * in + i]) << "batch " << batch;
        ASSERT_EQ(norm[i], norm_solo[first * in + i]) << "batch " << batch;
      }
    }
  }
}

TEST(CpuKernels, RmsNormMatchesNaive) {
  const int64_t rows = 3, dim = 37;
  const auto x = random_vec(static_cast<size_t>(rows * dim), 6, 3.0f);
  const auto w = random_vec(static_cast<size_t>(dim), 7);
  std::vector<float> got(x.size());
  rms_norm(x.data(), w.data(), got.data(), rows, dim, 1e-5f);
  std::vector<double> want(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < dim; ++i) ms += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ms / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) want[r * dim + i] = w[i] * x[r * dim + i] * inv;
  }
  expect_close(got, want, 1e-5);
  rms_norm(got.data(), w.data(), got.data(), 0, dim, 1e-5f);  // zero rows: no-op
}

TEST(CpuKernels, RopeInvFreqFollowsHuggingFace) {
  io::RopeScaling none;
  const auto base = rope_inv_freq(none, 10000.0, 8);
  ASSERT_EQ(base.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(base[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
  io::RopeScaling linear;
  linear.type = io::RopeScaling::Type::kLinear;
  linear.factor = 4.0;
  EXPECT_FLOAT_EQ(rope_inv_freq(linear, 10000.0, 8)[1], base[1] / 4.0f);
  // llama3 with theta 5e5, head_dim 16: wavelengths 2*pi*5e5^(i/8) fall in all three bands of
  // original_max 8192 / factors 1 and 4: i <= 3 kept, i = 4 smoothed, i >= 5 divided by factor.
  io::RopeScaling l3;
  l3.type = io::RopeScaling::Type::kLlama3;
  l3.factor = 8.0;
  const auto plain = rope_inv_freq(none, 500000.0, 16);
  const auto scaled = rope_inv_freq(l3, 500000.0, 16);
  for (int i = 0; i <= 3; ++i) EXPECT_EQ(scaled[i], plain[i]);
  for (int i = 5; i < 8; ++i) EXPECT_FLOAT_EQ(scaled[i], plain[i] / 8.0f);
  const double wavelen = 2 * std::numbers::pi / plain[4];
  const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
  EXPECT_NEAR(scaled[4], (1 - smooth) * plain[4] / 8.0 + smooth * plain[4], 1e-6 * plain[4]);
}

TEST(CpuKernels, RopeRotatesHalves) {
  const int64_t heads = 2, hd = 6, stride = 15;  // row stride wider than the heads, like fused qkv
  auto x = random_vec(static_cast<size_t>(2 * stride), 8);
  const auto orig = x;
  const std::vector<int32_t> positions = {0, 5};
  const std::vector<float> inv = {1.0f, 0.1f, 0.01f};
  apply_rope(x.data(), stride, positions.data(), 2, heads, hd, inv.data());
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < 3; ++i) {
        const double a = orig[t * stride + h * hd + i], b = orig[t * stride + h * hd + i + 3];
        const double ang = positions[t] * static_cast<double>(inv[i]);
        EXPECT_NEAR(x[t * stride + h * hd + i], a * std::cos(ang) - b * std::sin(ang), 1e-5);
        EXPECT_NEAR(x[t * stride + h * hd + i + 3], b * std::cos(ang) + a * std::sin(ang), 1e-5);
      }
  for (int t = 0; t < 2; ++t)
    for (int64_t i = heads * hd; i < stride; ++i)
      EXPECT_EQ(x[t * stride + i], orig[t * stride + i]);
}

TEST(CpuKernels, SiluMulAndEmbedding) {
  const auto gu = random_vec(2 * 2 * 5, 9, 4.0f);
  std::vector<float> got(10);
  silu_mul(gu.data(), got.data(), 2, 5);
  for (int t = 0; t < 2; ++t)
    for (int i = 0; i < 5; ++i) {
      const double g = gu[t * 10 + i], u = gu[t * 10 + 5 + i];
      EXPECT_NEAR(got[t * 5 + i], g / (1 + std::exp(-g)) * u, 1e-5);
    }
  const auto table = random_vec(4 * 3, 10);
  const std::vector<int32_t> ids = {3, 0, 3};
  std::vector<float> emb(9);
  embedding(ids.data(), table.data(), emb.data(), 3, 3);
  EXPECT_EQ(std::vector<float>(emb.begin(), emb.begin() + 3),
            std::vector<float>(table.begin() + 9, table.end()));
  EXPECT_EQ(emb[3], table[0]);
}

// Paged attention against a naive causal GQA over contiguous K/V, with a scrambled block table.
struct AttentionCase {
  int64_t heads, kv_heads, hd, bs, blocks, prefix, n;
  std::vector<int32_t> table;  // scrambled, long enough for prefix + n
};

void check_attention_against_reference(const AttentionCase& c) {
  const int64_t heads = c.heads, kv_heads = c.kv_heads, hd = c.hd, bs = c.bs, blocks = c.blocks,
                prefix = c.prefix, n = c.n;
  const int64_t ctx = prefix + n;
  const std::vector<int32_t>& table = c.table;
  std::vector<float> k_cache(static_cast<size_t>(blocks * bs * kv_heads * hd)),
      v_cache(k_cache.size());
  const KvLayerView view{k_cache.data(), v_cache.data(), bs, kv_heads, hd};
  const auto k_all =
      random_vec(static_cast<size_t>(ctx * kv_heads * hd), 11);  // [ctx, kv_heads, hd]
  const auto v_all = random_vec(k_all.size(), 12);
  std::vector<int64_t> slots;
  for (int64_t p = 0; p < ctx; ++p) slots.push_back(table[p / bs] * bs + p % bs);
  write_kv(view, k_all.data(), v_all.data(), kv_heads * hd, slots.data(), ctx);
  const auto q = random_vec(static_cast<size_t>(n * heads * hd), 13);  // [n, heads, hd]
  const AttentionSeq seq{0, n, prefix, table};
  std::vector<float> got(q.size());
  paged_attention(view, q.data(), heads * hd, std::span<const AttentionSeq>(&seq, 1), heads, 0.35f,
                  got.data());
  std::vector<double> want(q.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kv_heads), pos = prefix + t;
      std::vector<double> s(static_cast<size_t>(pos + 1));
      double m = -1e30, sum = 0;
      for (int64_t j = 0; j <= pos; ++j) {
        double d = 0;
        for (int64_t i = 0; i < hd; ++i)
          d +=
              q[(t * heads + h) * hd + i] * static_cast<double>(k_all[(j * kv_heads + g) * hd + i]);
        s[j] = d * 0.35;
        m = std::max(m, s[j]);
      }
      for (double& e : s) sum += (e = std::exp(e - m));
      for (int64_t i = 0; i < hd; ++i) {
        double o = 0;
        for (int64_t j = 0; j <= pos; ++j) o += s[j] / sum * v_all[(j * kv_heads + g) * hd + i];
        want[(t * heads + h) * hd + i] = o;
      }
    }
  expect_close(got, want, 1e-5);
}

TEST(CpuKernels, PagedAttentionMatchesContiguousReference) {
  check_attention_against_reference({4, 2, 8, 4, 8, 6, 5, {5, 2, 7}});
  // head_dim with a tail chunk, blocks not a multiple of 8, contexts spanning several chunks.
  check_attention_against_reference({6, 2, 12, 5, 12, 31, 9, {9, 3, 11, 0, 7, 1, 10, 4}});
  check_attention_against_reference({2, 2, 32, 16, 4, 40, 3, {2, 0, 3}});
}

// A sequence's attention output is bit-identical alone and next to other sequences.
TEST(CpuKernels, PagedAttentionIsBatchInvariant) {
  const int64_t heads = 8, kv_heads = 4, hd = 8, bs = 16, blocks = 8;
  std::vector<float> k_cache(static_cast<size_t>(blocks * bs * kv_heads * hd));
  std::vector<float> v_cache(k_cache.size());
  k_cache = random_vec(k_cache.size(), 31);
  v_cache = random_vec(v_cache.size(), 32);
  const KvLayerView view{k_cache.data(), v_cache.data(), bs, kv_heads, hd};
  const std::vector<int32_t> table_a = {3, 6, 1}, table_b = {0, 7, 2, 5};
  const std::vector<AttentionSeq> seqs = {{0, 4, 20, table_a}, {4, 1, 57, table_b},
                                          {5, 3, 0, table_b}};
  const int64_t rows = 8, width = heads * hd;
  const auto q = random_vec(static_cast<size_t>(rows * width), 33);  // [rows, heads, hd]
  std::vector<float> batched(q.size());
  paged_attention(view, q.data(), width, seqs, heads, 0.3f, batched.data());
  for (const AttentionSeq& s : seqs) {
    AttentionSeq alone = s;
    alone.token_begin = 0;
    std::vector<float> got(static_cast<size_t>(s.num_tokens * width));
    paged_attention(view, q.data() + s.token_begin * width, width,
                    std::span<const AttentionSeq>(&alone, 1), heads, 0.3f, got.data());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], batched[static_cast<size_t>(s.token_begin * width) + i]) << i;
  }
}

}  // namespace
}  // namespace pagellm::cpu
