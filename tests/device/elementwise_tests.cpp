// Device tests of the elementwise kernels (embedding, RMSNorm, RoPE, SiLU-and-mul, the KV-cache
// write) and the 16-bit GEMMs against kernel_reference.cpp; part of cuda_kernel_tests.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/rope_frequencies.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"
#include "kernel_test_helpers.h"

namespace pagellm::cuda::test {
namespace {

void test_embedding(DType t, int num_tokens, int hidden, int vocab) {
  char name[128];
  std::snprintf(name, sizeof name, "embedding %s tokens=%d hidden=%d", dname(t), num_tokens,
                hidden);
  if (!selected(name)) return;
  std::vector<float> table = random_vec(t, size_t(vocab) * hidden);
  std::vector<int32_t> ids(num_tokens);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  for (auto& i : ids) i = d(g_rng);
  ids[0] = vocab;  // out of range: zero row
  DevBuf tb(table.size() * dsize(t)), ib(ids.size() * 4),
      ob(size_t(num_tokens) * hidden * dsize(t));
  upload(tb, t, table);
  upload_raw(ib, ids);
  ob.poison();
  EmbeddingParams p{t, static_cast<int32_t*>(ib.ptr), tb.ptr, ob.ptr, num_tokens, hidden, vocab, 0};
  CK(embedding(p, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> ref(size_t(num_tokens) * hidden, 0.f);
  for (int i = 1; i < num_tokens; ++i)
    std::copy_n(&table[size_t(ids[i]) * hidden], hidden, &ref[size_t(i) * hidden]);
  check(name, download(ob, t, ref.size()), ref, {0, 0});
}

void test_rms_norm(DType t, int rows, int hidden, bool with_residual) {
  char name[128];
  std::snprintf(name, sizeof name, "rms_norm %s rows=%d hidden=%d%s", dname(t), rows, hidden,
                with_residual ? " +residual" : "");
  if (!selected(name)) return;
  std::vector<float> x = random_vec(t, size_t(rows) * hidden, 2.f),
                     res = random_vec(t, x.size(), 2.f), w = random_vec(t, hidden);
  DevBuf xb(x.size() * dsize(t)), rb(x.size() * dsize(t)), wb(w.size() * dsize(t)),
      ob(x.size() * dsize(t));
  upload(xb, t, x);
  upload(rb, t, res);
  upload(wb, t, w);
  ob.poison();
  RmsNormParams p{t, xb.ptr, with_residual ? rb.ptr : nullptr, wb.ptr, ob.ptr, rows, hidden, 1e-5f};
  CK(rms_norm(p, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> ref(x.size());
  ref_rms_norm(x.data(), with_residual ? res.data() : nullptr, w.data(), ref.data(), rows, hidden,
               1e-5f, rounder(t));
  check(name, download(ob, t, x.size()), ref, tol_for(t, false));
  if (with_residual)
    check(std::string(name) + " (residual out)", download(rb, t, x.size()), res, {0, 0});
}

// Qwen3's per-head q and k norms as the runner launches them: one launch over each token's q heads
// (weight) and k heads (second_weight) inside the fused qkv row, in place; v untouched.
void test_rms_norm_qk(DType t, int tokens, int heads, int kv_heads, int d) {
  char name[128];
  std::snprintf(name, sizeof name, "rms_norm q/k heads %s tokens=%d H=%d/%d D=%d", dname(t), tokens,
                heads, kv_heads, d);
  if (!selected(name)) return;
  const int width = (heads + 2 * kv_heads) * d;
  std::vector<float> x = random_vec(t, size_t(tokens) * width, 2.f), wq = random_vec(t, d),
                     wk = random_vec(t, d);
  DevBuf xb(x.size() * dsize(t)), qb(wq.size() * dsize(t)), kb(wk.size() * dsize(t));
  upload(xb, t, x);
  upload(qb, t, wq);
  upload(kb, t, wk);
  RmsNormParams p{t, xb.ptr, nullptr,          qb.ptr, xb.ptr, tokens * (heads + kv_heads),
                  d, 1e-6f,  heads + kv_heads, width};
  p.second_weight = kb.ptr, p.second_rows_from = heads;
  CK(rms_norm(p, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> ref = x;
  for (int tok = 0; tok < tokens; ++tok)
    for (int h = 0; h < heads + kv_heads; ++h) {
      float* row = &ref[size_t(tok) * width + size_t(h) * d];
      ref_rms_norm(row, nullptr, (h < heads ? wq : wk).data(), row, 1, d, 1e-6f, rounder(t));
    }
  check(name, download(xb, t, x.size()), ref, tol_for(t, false));
}

void test_rope(DType t, int tokens, int heads, int kv_heads, int d, const io::RopeScaling& sc,
               const char* label, float scale = 1.f) {
  char name[128];
  std::snprintf(name, sizeof name, "rope %s tokens=%d H=%d/%d D=%d %s", dname(t), tokens, heads,
                kv_heads, d, label);
  if (!selected(name)) return;
  std::vector<float> q = random_vec(t, size_t(tokens) * heads * d),
                     k = random_vec(t, size_t(tokens) * kv_heads * d);
  std::vector<int32_t> pos(tokens);
  std::uniform_int_distribution<int> dp(0, 131071);
  for (auto& x : pos) x = dp(g_rng);
  pos[0] = 0;
  const std::vector<float> inv = cpu::rope_inv_freq(sc, 500000.0, d);
  DevBuf qb(q.size() * dsize(t)), kb(k.size() * dsize(t)), pb(pos.size() * 4), fb(inv.size() * 4);
  upload(qb, t, q);
  upload(kb, t, k);
  upload_raw(pb, pos);
  upload_raw(fb, inv);
  RopeParams p;
  p.dtype = t;
  p.q = qb.ptr;
  p.k = kb.ptr;
  p.positions = static_cast<int32_t*>(pb.ptr);
  p.inv_freq = static_cast<float*>(fb.ptr);
  p.num_tokens = tokens;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = d;
  p.cos_sin_scale = scale;
  CK(rope(p, nullptr));
  CK(cudaDeviceSynchronize());
  const std::vector<float> q_dev = download(qb, t, q.size()), k_dev = download(kb, t, k.size());
  // The cos/sin table (the runner's path) gives the same bits; positions past its rows (half of
  // them here) are computed as before.
  upload(qb, t, q);
  upload(kb, t, k);
  const int cache_rows = 65536;
  DevBuf cache(size_t(cache_rows) * d * dsize(t));
  CK(rope_cos_sin_cache(t, p.inv_freq, d, cache_rows, cache.ptr, nullptr, scale));
  p.cos_sin = cache.ptr;
  p.cache_rows = cache_rows;
  CK(rope(p, nullptr));
  CK(cudaDeviceSynchronize());
  check(std::string(name) + " q (cos/sin cache)", download(qb, t, q.size()), q_dev, {0, 0});
  check(std::string(name) + " k (cos/sin cache)", download(kb, t, k.size()), k_dev, {0, 0});
  ref_rope(q.data(), k.data(), pos.data(), inv.data(), tokens, heads, kv_heads, d, rounder(t),
           scale);
  // Device cosf/sinf may differ from the double reference by an ulp at large angles.
  Tol tol = t == DType::kF32 ? Tol{1e-5, 1e-4} : tol_for(t, false);
  check(std::string(name) + " q", q_dev, q, tol);
  check(std::string(name) + " k", k_dev, k, tol);
}

void test_silu(DType t, int tokens, int inner) {
  char name[128];
  std::snprintf(name, sizeof name, "silu_and_mul %s tokens=%d inner=%d", dname(t), tokens, inner);
  if (!selected(name)) return;
  std::vector<float> x = random_vec(t, size_t(tokens) * 2 * inner, 4.f);
  DevBuf xb(x.size() * dsize(t)), ob(size_t(tokens) * inner * dsize(t));
  upload(xb, t, x);
  ob.poison();
  CK(silu_and_mul({t, xb.ptr, ob.ptr, tokens, inner}, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> ref(size_t(tokens) * inner);
  ref_silu_and_mul(x.data(), ref.data(), tokens, inner, rounder(t));
  check(name, download(ob, t, ref.size()), ref, tol_for(t, false));
}

void test_kv_write(DType t, int tokens, int kv_heads, int d, int block_size) {
  char name[128];
  std::snprintf(name, sizeof name, "write_kv_cache %s tokens=%d Hkv=%d D=%d bs=%d", dname(t),
                tokens, kv_heads, d, block_size);
  if (!selected(name)) return;
  const int num_blocks = (tokens + block_size - 1) / block_size + 3;
  const size_t row = size_t(kv_heads) * d, slots = size_t(num_blocks) * block_size;
  std::vector<float> k = random_vec(t, tokens * row), v = random_vec(t, tokens * row);
  std::vector<float> kc = random_vec(t, slots * row), vc = random_vec(t, slots * row);
  std::vector<int64_t> slot(slots);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), g_rng);
  slot.resize(tokens);
  slot[tokens / 2] = -1;  // padding token: skipped
  DevBuf kb(k.size() * dsize(t)), vb(v.size() * dsize(t)), kcb(kc.size() * dsize(t)),
      vcb(vc.size() * dsize(t)), sb(slot.size() * 8);
  upload(kb, t, k);
  upload(vb, t, v);
  upload(kcb, t, kc);
  upload(vcb, t, vc);
  upload_raw(sb, slot);
  KvCacheWriteParams p;
  p.dtype = t;
  p.cache_dtype = t;
  p.key = kb.ptr;
  p.value = vb.ptr;
  p.k_cache = kcb.ptr;
  p.v_cache = vcb.ptr;
  p.slot_mapping = static_cast<int64_t*>(sb.ptr);
  p.num_tokens = tokens;
  p.num_kv_heads = kv_heads;
  p.head_dim = d;
  p.num_slots = int64_t(slots);
  CK(write_kv_cache(p, nullptr));
  CK(cudaDeviceSynchronize());
  for (int i = 0; i < tokens; ++i) {
    if (slot[i] < 0) continue;
    std::copy_n(&k[i * row], row, &kc[slot[i] * row]);
    std::copy_n(&v[i * row], row, &vc[slot[i] * row]);
  }
  check(std::string(name) + " K", download(kcb, t, kc.size()), kc, {0, 0});
  check(std::string(name) + " V", download(vcb, t, vc.size()), vc, {0, 0});
}

void test_gemm(GemmContext* ctx, DType t, int m, int n, int k, bool accumulate, bool bias,
               bool gemv) {
  char name[128];
  std::snprintf(name, sizeof name, "gemm %s m=%d n=%d k=%d%s%s%s", dname(t), m, n, k,
                accumulate ? " +acc" : "", bias ? " +bias" : "", gemv ? "" : " (cuBLASLt only)");
  if (!selected(name)) return;
  std::vector<float> x = random_vec(t, size_t(m) * k), w = random_vec(t, size_t(n) * k),
                     y = random_vec(t, size_t(m) * n);
  std::vector<float> b = random_vec(t, size_t(n));
  DevBuf xb(x.size() * dsize(t)), wb(w.size() * dsize(t)), yb(y.size() * dsize(t)),
      bb(b.size() * dsize(t));
  upload(xb, t, x);
  upload(wb, t, w);
  upload(bb, t, b);
  if (accumulate)
    upload(yb, t, y);
  else
    yb.poison();
  gemm_set_use_gemv(ctx, gemv);
  CK(gemm(ctx, {t, xb.ptr, wb.ptr, yb.ptr, m, n, k, accumulate, bias ? bb.ptr : nullptr}, nullptr));
  CK(cudaDeviceSynchronize());
  gemm_set_use_gemv(ctx, true);
  ref_gemm(x.data(), w.data(), y.data(), m, n, k, accumulate);
  if (bias)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) y[size_t(i) * n + j] += b[size_t(j)];
  check(name, download(yb, t, y.size()), y, t == DType::kF32 ? Tol{1e-5, 1e-4} : tol_for(t, false));
}

// The gate/up GEMV with SiLU-and-mul in its epilogue against the two kernels it replaces: the
// same bits (m = 1 and 2, the skinny kernel's rows; with and without bias; Llama and odd widths).
// At m > 2 the fused entry point must decline (cudaErrorNotSupported).
void test_gemm_silu(GemmContext* ctx, DType t, int m, int inner, int k, bool bias) {
  char name[128];
  std::snprintf(name, sizeof name, "gemm_silu_and_mul %s m=%d inner=%d k=%d%s", dname(t), m, inner,
                k, bias ? " +bias" : "");
  if (!selected(name)) return;
  std::vector<float> x = random_vec(t, size_t(m) * k), w = random_vec(t, size_t(2) * inner * k),
                     b = random_vec(t, size_t(2) * inner);
  DevBuf xb(x.size() * dsize(t)), wb(w.size() * dsize(t)), bb(b.size() * dsize(t)),
      gu(size_t(m) * 2 * inner * dsize(t)), two(size_t(m) * inner * dsize(t)),
      one(size_t(m) * inner * dsize(t));
  upload(xb, t, x);
  upload(wb, t, w);
  upload(bb, t, b);
  one.poison();
  const GemmParams p{t, xb.ptr, wb.ptr, one.ptr, m, 2 * inner, k, false, bias ? bb.ptr : nullptr};
  const cudaError_t e = gemm_silu_and_mul(ctx, p, nullptr);
  if (m > kGemvMaxRows) {
    check(name + std::string(" declines"), {float(e == cudaErrorNotSupported)}, {1.f}, {0, 0});
    return;
  }
  CK(e);
  GemmParams q = p;
  q.y = gu.ptr;
  CK(gemm(ctx, q, nullptr));
  CK(silu_and_mul({t, gu.ptr, two.ptr, m, inner}, nullptr));
  CK(cudaDeviceSynchronize());
  check(name, download(one, t, size_t(m) * inner), download(two, t, size_t(m) * inner), {0, 0});
}

}  // namespace

void elementwise_suite() {
  std::printf("== elementwise, cache write, gemm\n");
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    test_embedding(t, 37, 4096, 1000);
    test_embedding(t, 5, 66, 300);
    for (int hidden : {4096, 64, 8, 100}) {
      test_rms_norm(t, 33, hidden, false);
      test_rms_norm(t, 33, hidden, true);
    }
    test_rms_norm_qk(t, 5, 32, 4, 128);
    test_rms_norm_qk(t, 3, 4, 2, 64);
    using Type = io::RopeScaling::Type;
    io::RopeScaling none, linear, llama3;
    linear.type = Type::kLinear, linear.factor = 4.0;
    llama3.type = Type::kLlama3, llama3.factor = 8.0;
    test_rope(t, 19, 32, 8, 128, none, "none");
    test_rope(t, 19, 32, 8, 128, llama3, "llama3");
    test_rope(t, 7, 8, 4, 8, linear, "linear");
    test_rope(t, 7, 16, 16, 64, llama3, "llama3");
    io::RopeScaling longrope;  // Phi-3's: a factor per frequency
    longrope.type = Type::kLongRope;
    for (int i = 0; i < 48; ++i) longrope.short_factor.push_back(1.0 + 0.37 * i);
    test_rope(t, 11, 32, 8, 96, longrope, "longrope", 1.19f);
    test_silu(t, 9, 14336);
    test_silu(t, 3, 100);
    for (int bs : {16, 32}) {
      test_kv_write(t, 77, 8, 128, bs);
      test_kv_write(t, 5, 4, 8, bs);
    }
  }
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (bool gemv : {true, false}) {
      test_gemm(ctx, t, 1, 1024, 4096, false, false, gemv);
      test_gemm(ctx, t, 3, 1000, 1000, true, true, gemv);
      test_gemm(ctx, t, 7, 512, 64, false, true, gemv);
      test_gemm(ctx, t, 8, 258, 176, false, false, gemv);
      test_gemm(ctx, t, 300, 768, 1024, false, false, gemv);
      test_gemm(ctx, t, 33, 256, 512, true, true, gemv);
    }
    for (int m : {1, 2, 3}) {
      test_gemm_silu(ctx, t, m, 7168, 4096, false);
      test_gemm_silu(ctx, t, m, 100, 264, true);
      test_gemm_silu(ctx, t, m, 9, 8, true);
    }
  }
  gemm_destroy(ctx);
}

}  // namespace pagellm::cuda::test
