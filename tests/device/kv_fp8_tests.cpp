// The KV cache's writes (backends/cuda/kv_cache.cu, the fused rope + write of rope.cu) and the FP8
// KV cache's kernels (attention/ over FP8 caches) against host references; the attention kernels' numerics over random FP8 caches are in kernel_tests.cpp
// (attention_suite, "kv=e4m3" / "kv=e5m2"):
//  - write_kv_cache into an FP8 cache: every code bit-exact with common/fp8.h's encoding of
//    x * (1 / scale), padding tokens skipped; compute_kv_scales = 2 * amax / fp8_max over the
//    tokens with a slot;
//  - rope_and_write_kv_cache: q, k and both caches bit for bit as rope() then write_kv_cache()
//    leave them, for 16-bit, f32 and FP8 caches, vectorized and scalar rows;
//  - every FP8 code decoded exactly by each attention path (tile prefill, tensor-core decode,
//    CUDA-core decode): a query that sees one key gets that key's V row back, code for code.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/rope_frequencies.h"
#include "backends/cuda/kernels.h"
#include "common/fp8.h"
#include "device_test_util.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_kv_rng(4242);

Fp8Format format_of(DType fp8) {
  return fp8 == DType::kF8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
}
const char* fp8_name(DType fp8) { return fp8 == DType::kF8E5M2 ? "e5m2" : "e4m3"; }

std::vector<float> random_values(DType t, size_t n, float mag) {
  std::uniform_real_distribution<float> dist(-mag, mag);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(t, dist(g_kv_rng));
  return v;
}

template <typename I>
void upload_vec(DevMem& d, const std::vector<I>& v) {
  d.alloc(v.size() * sizeof(I));
  CK(cudaMemcpy(d.ptr, v.data(), v.size() * sizeof(I), cudaMemcpyHostToDevice));
}

template <typename I>
std::vector<I> download_vec(const DevMem& d, size_t n) {
  std::vector<I> v(n);
  CK(cudaMemcpy(v.data(), d.ptr, n * sizeof(I), cudaMemcpyDeviceToHost));
  return v;
}

void test_write(Suite& s, DType t, DType fp8, int tokens, int kv_heads, int d) {
  char name[128];
  std::snprintf(name, sizeof name, "write_kv_cache %s -> %s tokens=%d Hkv=%d D=%d", dname(t),
                fp8_name(fp8), tokens, kv_heads, d);
  if (!s.selected(name)) return;
  const size_t row = size_t(kv_heads) * d, slots = size_t(tokens) + 5;
  std::vector<float> k = random_values(t, tokens * row, 3.f), v = random_values(t, tokens * row, .5f);
  std::vector<int64_t> slot(slots);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), g_kv_rng);
  slot.resize(size_t(tokens));
  slot[size_t(tokens / 2)] = -1;                   // a padding token: skipped ...
  k[size_t(tokens / 2) * row] = round_to(t, 1000.f);  // ... and not in the amax
  const std::vector<float> scales{3.f / 224.f, 0.5f / 200.f};
  DevMem kb, vb, sb, scb, kcb(slots * row), vcb(slots * row), calc(2 * sizeof(float));
  const std::vector<uint8_t> kraw = encode(t, k), vraw = encode(t, v);
  upload_vec(kb, kraw);
  upload_vec(vb, vraw);
  upload_vec(sb, slot);
  upload_vec(scb, scales);
  CK(cudaMemset(kcb.ptr, 0, kcb.bytes));
  CK(cudaMemset(vcb.ptr, 0, vcb.bytes));
  KvCacheWriteParams p;
  p.dtype = t;
  p.cache_dtype = fp8;
  p.k_scale = static_cast<const float*>(scb.ptr);
  p.v_scale = p.k_scale + 1;
  p.key = kb.ptr, p.value = vb.ptr, p.k_cache = kcb.ptr, p.v_cache = vcb.ptr;
  p.slot_mapping = static_cast<int64_t*>(sb.ptr);
  p.num_tokens = tokens, p.num_kv_heads = kv_heads, p.head_dim = d, p.num_slots = int64_t(slots);
  CK(write_kv_cache(p, nullptr));
  float* calc_ptr = static_cast<float*>(calc.ptr);
  CK(compute_kv_scales(p, calc_ptr, calc_ptr + 1, nullptr));
  CK(cudaDeviceSynchronize());
  const Fp8Format f = format_of(fp8);
  std::vector<uint8_t> want_k(slots * row, 0), want_v(slots * row, 0);
  float amax_k = 0.f, amax_v = 0.f;
  for (int i = 0; i < tokens; ++i) {
    if (slot[size_t(i)] < 0) continue;
    for (size_t e = 0; e < row; ++e) {
      const float x = k[size_t(i) * row + e], y = v[size_t(i) * row + e];
      want_k[size_t(slot[size_t(i)]) * row + e] = f32_to_fp8(x * (1.f / scales[0]), f);
      want_v[size_t(slot[size_t(i)]) * row + e] = f32_to_fp8(y * (1.f / scales[1]), f);
      amax_k = std::max(amax_k, std::fabs(x));
      amax_v = std::max(amax_v, std::fabs(y));
    }
  }
  const bool codes = download_vec<uint8_t>(kcb, slots * row) == want_k &&
                     download_vec<uint8_t>(vcb, slots * row) == want_v;
  const std::vector<float> got = download_vec<float>(calc, 2);
  const bool scales_ok = got[0] == 2.f * amax_k / fp8_max(f) && got[1] == 2.f * amax_v / fp8_max(f);
  char detail[160];
  std::snprintf(detail, sizeof detail, "codes %s, scales %g %g (want %g %g)",
                codes ? "bit-exact" : "DIFFER", got[0], got[1], 2.f * amax_k / fp8_max(f),
                2.f * amax_v / fp8_max(f));
  s.report(name, codes && scales_ok, detail);
}

// Two seqs, 8 query heads over 2 KV heads, head_dim 128: the V row of key 0 of (seq, kv head)
// holds codes (2 * seq + head) * 128 + d (mod 256: every code twice; NaN / inf codes become 0).
// Decode: q_len 1, ctx 1. Prefill: q_len = ctx = 9 (the tile kernel: rows longer than the split
// path's short rows, see plan_attention), row 0 sees key 0 only.
void test_codes(Suite& s, DType t, DType fp8, bool prefill, bool tensor_cores) {
  char name[128];
  std::snprintf(name, sizeof name, "attention %s kv=%s every code exact (%s)", dname(t),
                fp8_name(fp8), prefill ? "tile prefill" : tensor_cores ? "mma decode" : "cuda-core decode");
  if (!s.selected(name)) return;
  const int heads = 8, kv_heads = 2, d = 128, bs = 16, q_len = prefill ? 9 : 1;
  const Fp8Format f = format_of(fp8);
  const size_t row = size_t(kv_heads) * d;
  std::vector<uint8_t> kc(2 * bs * row, 0), vc(2 * bs * row, 0);
  std::vector<float> want(size_t(2 * q_len) * heads * d, 0.f);
  for (int seq = 0; seq < 2; ++seq) {
    for (int h = 0; h < kv_heads; ++h) {
      for (int e = 0; e < d; ++e) {
        uint8_t code = uint8_t((2 * seq + h) * d + e);
        if (!std::isfinite(fp8_to_f32(code, f))) code = 0;
        vc[size_t(seq) * bs * row + size_t(h) * d + size_t(e)] = code;  // block `seq`, offset 0
        for (int g = 0; g < heads / kv_heads; ++g)
          want[(size_t(seq * q_len) * heads + size_t(h * heads / kv_heads + g)) * d + size_t(e)] =
              fp8_to_f32(code, f);
      }
    }
  }
  const std::vector<float> q(size_t(2 * q_len) * heads * d, 0.f);
  const std::vector<int32_t> qsl{0, q_len, 2 * q_len}, lens{q_len, q_len}, tables{0, 1};
  const std::vector<float> scales{1.f, 1.f};
  DevMem qd, kd, vd, od(want.size() * dsize(t)), qsld, lensd, tabd, scd, si, ti, ws;
  upload_vec(qd, encode(t, q));
  upload_vec(kd, kc);
  upload_vec(vd, vc);
  upload_vec(qsld, qsl);
  upload_vec(lensd, lens);
  upload_vec(tabd, tables);
  upload_vec(scd, scales);
  AttentionParams p;
  p.dtype = t;
  p.kv_dtype = fp8;
  p.k_scale = static_cast<const float*>(scd.ptr);
  p.v_scale = p.k_scale + 1;
  p.q = qd.ptr, p.k_cache = kd.ptr, p.v_cache = vd.ptr, p.out = od.ptr;
  p.query_start_loc = static_cast<int32_t*>(qsld.ptr);
  p.seq_lens = static_cast<int32_t*>(lensd.ptr);
  p.block_tables = static_cast<int32_t*>(tabd.ptr);
  p.num_seqs = 2, p.num_tokens = 2 * q_len, p.num_heads = heads, p.num_kv_heads = kv_heads;
  p.head_dim = d, p.block_size = bs, p.max_blocks_per_seq = 1, p.scale = 0.088f;
  AttentionPlanHost ph;
  CK(plan_attention(p, qsl.data(), lens.data(), 132, 1, &ph));
  upload_vec(si, ph.split_items.empty() ? std::vector<int32_t>{0} : ph.split_items);
  upload_vec(ti, ph.tile_items.empty() ? std::vector<int32_t>{0} : ph.tile_items);
  AttentionPlan plan;
  plan.split_items = static_cast<int32_t*>(si.ptr);
  plan.num_split_items = int(ph.split_items.size() / 2);
  plan.num_splits = ph.num_splits;
  plan.tile_items = static_cast<int32_t*>(ti.ptr);
  plan.num_tile_items = int(ph.tile_items.size() / 2);
  plan.tile_rows = ph.tile_rows;
  attention_set_decode_tensor_cores(tensor_cores);
  CK(run_attention(p, plan, nullptr, nullptr));
  CK(cudaDeviceSynchronize());
  attention_set_decode_tensor_cores(true);
  const std::vector<float> got = download(od, t, want.size());
  int wrong = 0;
  for (int seq = 0; seq < 2; ++seq)  // row 0 of each seq
    for (size_t i = 0; i < size_t(heads) * d; ++i) {
      const size_t at = size_t(seq * q_len) * heads * d + i;
      wrong += got[at] != want[at];
    }
  s.report(name, wrong == 0 && (prefill ? plan.num_tile_items > 0 : plan.num_split_items > 0),
           wrong ? std::to_string(wrong) + " values differ" : "all codes exact");
}


// The runner's layout: q, k and v of a token in one row of (heads + 2 kv_heads) * d elements.
void test_rope_write(Suite& s, DType t, DType cache, int tokens, int heads, int kv_heads, int d) {
  char name[128];
  std::snprintf(name, sizeof name, "rope_and_write_kv_cache %s -> %s tokens=%d H=%d/%d D=%d",
                dname(t), cache == t ? dname(t) : fp8_name(cache), tokens, heads, kv_heads, d);
  if (!s.selected(name)) return;
  const int width = (heads + 2 * kv_heads) * d;
  const size_t row = size_t(kv_heads) * d, slots = size_t(tokens) + 5;
  const size_t cache_bytes = slots * row * (cache == t ? dsize(t) : 1);
  const std::vector<uint8_t> qkv = encode(t, random_values(t, size_t(tokens) * width, 3.f));
  std::vector<int32_t> pos(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int> dp(0, 131071);
  for (auto& x : pos) x = dp(g_kv_rng);
  std::vector<int64_t> slot(slots);
  std::iota(slot.begin(), slot.end(), 0);
  std::shuffle(slot.begin(), slot.end(), g_kv_rng);
  slot.resize(size_t(tokens));
  slot[size_t(tokens / 2)] = -1;  // a padding token: rotated, not stored
  std::vector<uint8_t> init(cache_bytes);
  std::uniform_int_distribution<int> db(0, 255);
  for (auto& b : init) b = uint8_t(db(g_kv_rng));
  const std::vector<float> inv = cpu::rope_inv_freq({}, 500000.0, d);
  DevMem pb, sb, fb, scb, table(size_t(65536) * d * dsize(t));
  upload_vec(pb, pos);
  upload_vec(sb, slot);
  upload_vec(fb, inv);
  upload_vec(scb, std::vector<float>{3.f / 224.f, 0.5f / 200.f});
  CK(rope_cos_sin_cache(t, static_cast<const float*>(fb.ptr), d, 65536, table.ptr, nullptr));
  std::vector<uint8_t> got[2][3];  // [unfused, fused][qkv, k cache, v cache]
  for (int fused = 0; fused < 2; ++fused) {
    DevMem xb, kcb, vcb;
    upload_vec(xb, qkv);
    upload_vec(kcb, init);
    upload_vec(vcb, init);
    RopeParams rp;
    rp.dtype = t, rp.q = xb.ptr, rp.k = static_cast<uint8_t*>(xb.ptr) + heads * d * dsize(t);
    rp.positions = static_cast<int32_t*>(pb.ptr), rp.inv_freq = static_cast<float*>(fb.ptr);
    rp.cos_sin = table.ptr, rp.cache_rows = 65536;  // positions past it: computed
    rp.num_tokens = tokens, rp.num_heads = heads, rp.num_kv_heads = kv_heads, rp.head_dim = d;
    rp.q_token_stride = rp.k_token_stride = width;
    KvCacheWriteParams kw;
    kw.dtype = t, kw.cache_dtype = cache;
    kw.k_scale = cache == t ? nullptr : static_cast<const float*>(scb.ptr);
    kw.v_scale = kw.k_scale ? kw.k_scale + 1 : nullptr;
    kw.key = rp.k, kw.value = static_cast<uint8_t*>(rp.k) + kv_heads * d * dsize(t);
    kw.k_cache = kcb.ptr, kw.v_cache = vcb.ptr, kw.slot_mapping = static_cast<int64_t*>(sb.ptr);
    kw.num_tokens = tokens, kw.num_kv_heads = kv_heads, kw.head_dim = d;
    kw.num_slots = int64_t(slots), kw.key_token_stride = kw.value_token_stride = width;
    if (fused) {
      CK(rope_and_write_kv_cache(rp, kw, nullptr));
    } else {
      CK(rope(rp, nullptr));
      CK(write_kv_cache(kw, nullptr));
    }
    CK(cudaDeviceSynchronize());
    got[fused][0] = download_vec<uint8_t>(xb, qkv.size());
    got[fused][1] = download_vec<uint8_t>(kcb, cache_bytes);
    got[fused][2] = download_vec<uint8_t>(vcb, cache_bytes);
  }
  const bool same = got[0][0] == got[1][0] && got[0][1] == got[1][1] && got[0][2] == got[1][2];
  const bool wrote = got[1][1] != init && got[1][2] != init;
  s.report(name, same && wrote, same ? (wrote ? "bit-exact" : "cache untouched") : "DIFFER");
}
}  // namespace

void kv_fp8_suite(const std::string& filter, int& passed, int& failed) {
  Suite s;
  s.filter = filter;
  std::printf("== KV cache writes (fused rope + write; FP8: scales, decoding every code)\n");
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (DType fp8 : {DType::kF8E4M3, DType::kF8E5M2}) {
      test_write(s, t, fp8, 77, 8, 128);
      test_write(s, t, fp8, 9, 3, 12);  // odd rows: the scalar path
      test_codes(s, t, fp8, true, true);
      test_codes(s, t, fp8, false, true);
      test_codes(s, t, fp8, false, false);
    }
  }
  for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (DType cache : {t, DType::kF8E4M3, DType::kF8E5M2}) {
      if (t == DType::kF32 && cache != t) continue;  // FP8 caches serve 16-bit models
      test_rope_write(s, t, cache, 77, 32, 8, 128);
      test_rope_write(s, t, cache, 9, 6, 3, 12);  // 36-element rows: the scalar V stores
    }
  }
  passed += s.passed;
  failed += s.failed;
}

}  // namespace pagellm::cuda::test
