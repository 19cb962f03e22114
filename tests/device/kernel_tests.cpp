// Self-checking tests and benchmarks of pagellm's CUDA kernels against the CPU references in
// kernel_reference.cpp. Runs on the GPU machine (no gtest, no Debian libraries there):
//   cuda_kernel_tests [--filter SUBSTRING] [--bench | --bench-only] [--sampler-bench]
//                     [--fp8-bench | --fp8-bench-only] [--int-bench-only]
//                     [--attention-bench-only] [--moe-bench-only]
// (--filter fp8: only the FP8 linear tests; --fp8-bench-only: only their benchmark)
// Every output buffer is poisoned with NaN before the kernel runs, every input is fresh random
// data, and NaN never passes. Exit status 0 only if every case passed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_case.h"
#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"
#include "common/dtype.h"
#include "common/fp8.h"
#include "device_test_util.h"
#include "kernel_reference.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_rng(1234);
std::string g_filter;
int g_failed = 0, g_passed = 0;
int g_num_sms = 132;

RoundFn rounder(DType t) {
  return [t](float v) { return round_to(t, v); };
}

// Device buffer of n elements of dtype, with host float mirror helpers.
struct DevBuf {
  void* ptr = nullptr;
  size_t bytes = 0;
  DevBuf() = default;
  explicit DevBuf(size_t b) : bytes(b) { CK(cudaMalloc(&ptr, std::max<size_t>(b, 16))); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  ~DevBuf() {
    if (ptr) cudaFree(ptr);
  }
  void poison() { CK(cudaMemset(ptr, 0xff, bytes)); }  // all-ones bits: NaN in f32, f16 and bf16
};

// Random values in [-scale, scale] rounded to dtype (so host and device hold the same numbers).
std::vector<float> random_vec(DType t, size_t n, float scale = 1.f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = round_to(t, dist(g_rng));
  return v;
}

void upload(DevBuf& buf, DType t, const std::vector<float>& v) {
  auto raw = encode(t, v);
  CK(cudaMemcpy(buf.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}
template <typename I>
void upload_raw(DevBuf& buf, const std::vector<I>& v) {
  CK(cudaMemcpy(buf.ptr, v.data(), v.size() * sizeof(I), cudaMemcpyHostToDevice));
}
std::vector<float> download(const DevBuf& buf, DType t, size_t n) {
  std::vector<uint8_t> raw(n * dsize(t));
  CK(cudaMemcpy(raw.data(), buf.ptr, raw.size(), cudaMemcpyDeviceToHost));
  return decode(t, raw);
}

struct Tol {
  double rel_l2, max_rel;  // ‖out−ref‖/‖ref‖ and max|out−ref| / max|ref|
};
Tol tol_for(DType t, bool attention) {
  if (t == DType::kF32) return {2e-6, 2e-5};
  if (t == DType::kF16) return {attention ? 2e-3 : 1e-3, attention ? 8e-3 : 4e-3};
  return {attention ? 1.2e-2 : 8e-3, attention ? 4e-2 : 2e-2};
}

bool check(const std::string& name, const std::vector<float>& out, const std::vector<float>& ref,
           Tol tol) {
  double num = 0, den = 0, max_err = 0, max_ref = 0;
  size_t nan_at = SIZE_MAX;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) {
      if (nan_at == SIZE_MAX) nan_at = i;
      continue;
    }
    const double d = double(out[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    max_err = std::max(max_err, std::fabs(d));
    max_ref = std::max(max_ref, std::fabs(double(ref[i])));
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  const double mrel = max_ref > 0 ? max_err / max_ref : max_err;
  const bool ok = nan_at == SIZE_MAX && rel <= tol.rel_l2 && mrel <= tol.max_rel;
  if (ok) {
    ++g_passed;
    std::printf("  ok   %-70s rel_l2=%.2e max_rel=%.2e\n", name.c_str(), rel, mrel);
  } else {
    ++g_failed;
    if (nan_at != SIZE_MAX)
      std::printf("  FAIL %-70s non-finite output at %zu (ref %g)\n", name.c_str(), nan_at,
                  ref[nan_at]);
    else
      std::printf("  FAIL %-70s rel_l2=%.2e (tol %.1e) max_rel=%.2e (tol %.1e)\n", name.c_str(),
                  rel, tol.rel_l2, mrel, tol.max_rel);
  }
  return ok;
}

bool selected(const std::string& name) {
  return g_filter.empty() || name.find(g_filter) != std::string::npos;
}

// ---- attention ---------------------------------------------------------------------------------

// An FP8 cache's codes of `values` (fp8(x * (1 / scale)), as write_kv_cache stores them), and
// `values` replaced by what the codes mean (code * scale), the reference's input.
std::vector<uint8_t> to_fp8_cache(std::vector<float>& values, DType fp8, float scale) {
  const Fp8Format f = fp8 == DType::kF8E5M2 ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  const float inv = 1.f / scale;
  std::vector<uint8_t> codes(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    codes[i] = f32_to_fp8(values[i] * inv, f);
    values[i] = fp8_to_f32(codes[i], f) * scale;
  }
  return codes;
}

// Builds a paged cache with the seqs' blocks scattered randomly in a larger pool. Slots no seq owns
// (tails of last blocks, spare blocks) hold NaN, so reading past a context shows up as NaN.
struct PagedSetup {
  int num_blocks = 0, max_blocks = 0, num_tokens = 0;
  std::vector<int32_t> qsl, seq_lens, block_tables;
  std::vector<float> q, k_cache, v_cache;
};

PagedSetup make_paged(const AttnCase& c) {
  PagedSetup s;
  const int num_seqs = static_cast<int>(c.q_lens.size());
  s.qsl.assign(num_seqs + 1, 0);
  int needed = 0;
  for (int i = 0; i < num_seqs; ++i) {
    s.qsl[i + 1] = s.qsl[i] + c.q_lens[i];
    const int nb = (c.ctx_lens[i] + c.block_size - 1) / c.block_size;
    needed += nb;
    s.max_blocks = std::max(s.max_blocks, nb);
  }
  s.max_blocks =
      std::max(s.max_blocks, 1) + 1;  // one spare column to prove tables are not over-read
  s.num_tokens = s.qsl[num_seqs];
  s.num_blocks = needed + needed / 8 + 2;
  std::vector<int32_t> perm(s.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g_rng);
  s.block_tables.assign(size_t(num_seqs) * s.max_blocks, -1);  // -1: unused entries fault if read
  s.seq_lens = c.ctx_lens;
  const size_t row = size_t(c.num_kv_heads) * c.head_dim;
  const size_t pool = size_t(s.num_blocks) * c.block_size * row;
  s.k_cache.assign(pool, NAN);
  s.v_cache.assign(pool, NAN);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  int next = 0;
  for (int i = 0; i < num_seqs; ++i) {
    const int nb = (c.ctx_lens[i] + c.block_size - 1) / c.block_size;
    for (int b = 0; b < nb; ++b) s.block_tables[size_t(i) * s.max_blocks + b] = perm[next++];
    for (int j = 0; j < c.ctx_lens[i]; ++j) {
      const size_t slot =
          size_t(s.block_tables[size_t(i) * s.max_blocks + j / c.block_size]) * c.block_size +
          j % c.block_size;
      for (size_t e = 0; e < row; ++e) {
        s.k_cache[slot * row + e] = round_to(c.dtype, dist(g_rng));
        s.v_cache[slot * row + e] = round_to(c.dtype, dist(g_rng));
      }
    }
  }
  // A window: keys no query of the seq attends get K = V = 100 (16-bit caches), which would swamp
  // any output that read them.
  for (int i = 0; i < num_seqs && c.window > 0 && !is_fp8(c.kv_dtype); ++i) {
    const int below = c.ctx_lens[i] - c.q_lens[i] - c.window + 1;  // first query's window start
    for (int j = 0; j < below; ++j) {
      const size_t slot =
          size_t(s.block_tables[size_t(i) * s.max_blocks + j / c.block_size]) * c.block_size +
          j % c.block_size;
      std::fill_n(s.k_cache.begin() + slot * row, row, round_to(c.dtype, 100.f));
      std::fill_n(s.v_cache.begin() + slot * row, row, round_to(c.dtype, 100.f));
    }
  }
  // Queries scaled so that scores spread over a few units: softmax neither flat nor one-hot.
  s.q = random_vec(c.dtype, size_t(s.num_tokens) * c.num_heads * c.head_dim, 3.f);
  return s;
}

struct AttnRun {
  AttentionParams p;
  AttentionPlanHost plan_host;
  AttentionPlan plan;
  DevBuf *split_items = nullptr, *tile_items = nullptr, *workspace = nullptr;
};

}  // namespace

void test_attention(const AttnCase& c) {
  const int num_seqs = static_cast<int>(c.q_lens.size());
  char name[256];
  std::snprintf(name, sizeof name, "attention %s%s H=%d/%d D=%d bs=%d seqs=%d %s%s%s%s",
                dname(c.dtype),
                c.kv_dtype == DType::kF8E4M3   ? " kv=e4m3"
                : c.kv_dtype == DType::kF8E5M2 ? " kv=e5m2"
                                               : "",
                c.num_heads, c.num_kv_heads, c.head_dim, c.block_size, num_seqs, c.label.c_str(),
                c.fixed_splits ? (" splits=" + std::to_string(c.fixed_splits)).c_str() : "",
                c.window ? (" window=" + std::to_string(c.window)).c_str() : "",
                c.softcap > 0.f ? " softcap" : "");
  if (!selected(name)) return;
  PagedSetup s = make_paged(c);
  const bool fp8 = is_fp8(c.kv_dtype);
  const DType kv_dtype = fp8 ? c.kv_dtype : c.dtype;
  const size_t out_n = size_t(s.num_tokens) * c.num_heads * c.head_dim;
  DevBuf q(s.q.size() * dsize(c.dtype)), kc(s.k_cache.size() * dtype_size(kv_dtype)),
      vc(s.v_cache.size() * dtype_size(kv_dtype)), out(out_n * dsize(c.dtype));
  DevBuf qsl(s.qsl.size() * 4), sl(s.seq_lens.size() * 4), bt(s.block_tables.size() * 4);
  // FP8: values in (-1, 1) with K and V scales that leave 2x and ~4x headroom in e4m3.
  const std::vector<float> scales{2.f / 448.f, 4.f / 448.f};
  DevBuf scale_buf(2 * sizeof(float));
  upload(q, c.dtype, s.q);
  if (fp8) {
    upload_raw(kc, to_fp8_cache(s.k_cache, c.kv_dtype, scales[0]));
    upload_raw(vc, to_fp8_cache(s.v_cache, c.kv_dtype, scales[1]));
    upload_raw(scale_buf, scales);
  } else {
    upload(kc, c.dtype, s.k_cache);
    upload(vc, c.dtype, s.v_cache);
  }
  upload_raw(qsl, s.qsl);
  upload_raw(sl, s.seq_lens);
  upload_raw(bt, s.block_tables);
  out.poison();

  AttentionParams p;
  p.dtype = c.dtype;
  p.kv_dtype = kv_dtype;
  if (fp8) {
    p.k_scale = static_cast<const float*>(scale_buf.ptr);
    p.v_scale = p.k_scale + 1;
  }
  p.q = q.ptr;
  p.k_cache = kc.ptr;
  p.v_cache = vc.ptr;
  p.out = out.ptr;
  p.query_start_loc = static_cast<int32_t*>(qsl.ptr);
  p.seq_lens = static_cast<int32_t*>(sl.ptr);
  p.block_tables = static_cast<int32_t*>(bt.ptr);
  p.num_seqs = num_seqs;
  p.num_tokens = s.num_tokens;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.block_size = c.block_size;
  p.max_blocks_per_seq = s.max_blocks;
  p.num_slots = int64_t(s.num_blocks) * c.block_size;
  p.scale = 1.f / std::sqrt(float(c.head_dim));
  p.window = c.window;
  p.softcap = c.softcap;
  AttentionPlanHost ph;
  CK(plan_attention(p, s.qsl.data(), s.seq_lens.data(), g_num_sms, c.fixed_splits, &ph));
  DevBuf si(ph.split_items.size() * 4), ti(ph.tile_items.size() * 4), ws(ph.workspace_bytes);
  DevBuf counters(ph.split_counters * 4);
  CK(cudaMemset(counters.ptr, 0, counters.bytes));  // the split counters start at zero
  upload_raw(si, ph.split_items);
  upload_raw(ti, ph.tile_items);
  AttentionPlan plan;
  plan.split_items = static_cast<int32_t*>(si.ptr);
  plan.num_split_items = static_cast<int>(ph.split_items.size() / 2);
  plan.num_splits = ph.num_splits;
  plan.tile_items = static_cast<int32_t*>(ti.ptr);
  plan.num_tile_items = static_cast<int>(ph.tile_items.size() / 2);
  plan.tile_rows = ph.tile_rows;
  plan.split_counters = static_cast<unsigned*>(counters.ptr);
  CK(run_attention(p, plan, ws.ptr, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> got = download(out, c.dtype, out_n);

  RefAttention r{s.q.data(),     s.k_cache.data(),  s.v_cache.data(),
                 s.qsl.data(),   s.seq_lens.data(), s.block_tables.data(),
                 num_seqs,       s.num_tokens,      c.num_heads,
                 c.num_kv_heads, c.head_dim,        c.block_size,
                 s.max_blocks,   p.scale,           c.window,
                 c.softcap};
  std::vector<float> ref(out_n);
  ref_attention(r, ref.data());
  std::string full = std::string(name) + " [split items " + std::to_string(plan.num_split_items) +
                     " x" + std::to_string(plan.num_splits) + ", tiles " +
                     std::to_string(plan.num_tile_items) + " x" + std::to_string(plan.tile_rows) +
                     " rows]";
  check(full, got, ref, tol_for(c.dtype, true));
  if (plan.num_splits > 1) {
    // The split blocks' counters must be back at zero: a second call with the same counters merges
    // every head again, to the same bits.
    out.poison();
    CK(run_attention(p, plan, ws.ptr, nullptr));
    CK(cudaDeviceSynchronize());
    check(full + " again, same counters", download(out, c.dtype, out_n), got, Tol{0.0, 0.0});
  }
}

std::vector<int> pick(std::initializer_list<int> choices, int n) {
  std::vector<int> c(choices), out(n);
  std::uniform_int_distribution<size_t> d(0, c.size() - 1);
  for (auto& x : out) x = c[d(g_rng)];
  return out;
}

namespace {

struct Heads {
  int h, kv;
};
constexpr Heads kAttnHeads[] = {{8, 8}, {16, 4}, {32, 4}};
constexpr DType kAttnDtypes[] = {DType::kBF16, DType::kF16, DType::kF32};

// Prefill and chunked prefill (cached prefix + new tokens), mixed with decode tokens, in the
// given dtypes.
void prefill_cases(std::initializer_list<DType> dtypes) {
  const auto& heads = kAttnHeads;
  for (DType t : dtypes) {
    for (int d : {8, 64, 128}) {
      for (Heads hd : heads) {
        for (int bs : {16, 32}) {
          test_attention({t,
                          hd.h,
                          hd.kv,
                          d,
                          bs,
                          {1, 17, 64, 65, 100, 37, 1},
                          {1, 17, 64, 65, 116, 1037, 33},
                          0,
                          "prefill+chunked+decode"});
        }
      }
    }
    test_attention({t, 8, 2, 128, 16, {512}, {8191}, 0, "chunk 512 after 7679 cached"});
    test_attention({t, 8, 8, 64, 32, {1000, 300}, {1000, 2300}, 0, "prefill 1000 + chunk 300"});
    test_attention({t, 32, 4, 128, 16, {130, 1, 2, 3}, {130, 5000, 2, 50}, 0, "mixed small q"});
    // Pages of 8 and 128 keys (16 and 1 TMA boxes per 128-key tile on Hopper), partial last pages
    // and key counts on tile boundaries.
    test_attention({t, 16, 4, 128, 8, {300, 203, 256}, {300, 1213, 256}, 0, "prefill bs8"});
    test_attention({t, 16, 2, 64, 128, {257, 130, 384}, {257, 1500, 640}, 0, "prefill bs128"});
    test_attention({t,
                    32,
                    8,
                    128,
                    16,
                    {1000, 129, 64},
                    {1000, 129, 3000},
                    0,
                    "prefill 1000 + 129 + chunk 64"});
  }
}

// Decode through the tensor-core kernel in one MMA layout (tag: the layout, in the case names);
// with `all`, also the cases that other kernels serve (f32, MHA, head_dim 8 / 96).
void decode_tensor_core_cases(const std::string& tag, bool all) {
  const std::vector<DType> dtypes =
      all ? std::vector<DType>(std::begin(kAttnDtypes), std::end(kAttnDtypes))
          : std::vector<DType>{DType::kBF16, DType::kF16};
  const std::vector<int> dims = all ? std::vector<int>{8, 64, 128} : std::vector<int>{64, 128};
  for (DType t : dtypes) {
    for (int d : dims) {
      for (Heads hd : kAttnHeads) {
        if (!all && hd.h == hd.kv) continue;
        for (int bs : {16, 32}) {
          for (int batch : {1, 7, 64}) {
            AttnCase c{t,
                       hd.h,
                       hd.kv,
                       d,
                       bs,
                       std::vector<int>(batch, 1),
                       pick({1, 15, 16, 17, 33, 1000}, batch),
                       0,
                       "decode" + tag};
            test_attention(c);
          }
        }
      }
    }
  }
  for (DType t : dtypes) {
    test_attention({t, 32, 8, 128, 16, std::vector<int>(256, 1),
                    pick({1, 15, 16, 17, 200, 1000}, 256), 0, "decode b256" + tag});
    test_attention({t, 8, 1, 64, 16, {1, 1}, {8191, 4000}, 0, "decode ctx8191 G8" + tag});
    test_attention({t, 16, 4, 128, 32, {1, 1, 1}, {8191, 17, 1}, 0, "decode ctx8191" + tag});
    test_attention({t, 16, 4, 128, 16, {1, 1, 1}, {1, 17, 100}, 64, "decode empty splits" + tag});
    test_attention(
        {t, 32, 8, 128, 16, {1, 1, 1}, {300, 2000, 129}, 16, "decode active splits" + tag});
    if (!all) continue;
    test_attention(
        {t, 8, 4, 8, 16, {1, 1, 1, 1}, {1, 15, 16, 256}, 0, "decode stories-shape" + tag});
    test_attention({t, 12, 12, 96, 16, {1, 1}, {300, 31}, 0, "decode generic D96" + tag});
    test_attention({t, 32, 2, 128, 16, {1, 1, 1}, {3000, 64, 65}, 0, "decode G16" + tag});
    test_attention({t, 8, 4, 64, 32, {1, 1, 1, 1, 1}, {1, 2, 63, 64, 6000}, 0, "decode G2" + tag});
  }
}

void attention_suite() {
  std::printf("== attention\n");
  const auto& dtypes = kAttnDtypes;
  // Decode: context lengths across block boundaries, batch sizes 1..256; GQA decode in bf16 / f16
  // also through the CUDA-core kernel (the default is tensor cores).
  attention_set_decode_tensor_cores(false);
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int d : {64, 128}) {
      for (int batch : {1, 64}) {
        test_attention({t, 32, 4, d, 16, std::vector<int>(batch, 1),
                        pick({1, 15, 16, 17, 33, 1000}, batch), 0, "decode cuda-cores"});
      }
    }
  }
  attention_set_decode_tensor_cores(true);
  // Both layouts of the tensor-core kernel (groups of up to 8: keys or heads on the MMA rows).
  attention_set_decode_mma_layout(DecodeMmaLayout::kHeadRows);
  decode_tensor_core_cases(" heads", true);
  attention_set_decode_mma_layout(DecodeMmaLayout::kKeyRows);
  decode_tensor_core_cases(" keys", false);
  attention_set_decode_mma_layout(DecodeMmaLayout::kAuto);
  // Prefill and chunked prefill (cached prefix + new tokens), mixed with decode tokens; on Hopper
  // through the wgmma kernel (128-row tiles, the default) and the mma.sync one (64-row tiles).
  // f32 never takes the tile kernels, so its cases run once.
  for (bool wgmma : {true, false}) {
    attention_set_prefill_wgmma(wgmma);
    prefill_cases({DType::kBF16, DType::kF16});
  }
  attention_set_prefill_wgmma(true);
  prefill_cases({DType::kF32});
  // Speculative verification rows (1 + k tokens): split-KV items in small batches, tiles in large
  // ones (rows this short take the 64-row kernel on every GPU); the graph shapes' fixed split
  // counts too.
  for (DType t : dtypes) {
    for (int d : {64, 128}) {
      test_attention({t, 32, 8, d, 16, {5}, {1000}, 0, "verify 1+4 b1"});
      test_attention({t, 6, 2, d, 16, {2, 8, 5}, {40, 3000, 5}, 0, "verify 1+k b3"});
      test_attention({t, 32, 8, d, 16, std::vector<int>(4, 5), pick({5, 17, 300, 2000}, 4), 8,
                      "verify 1+4 b4 fixed splits"});
      test_attention({t, 32, 8, d, 16, std::vector<int>(32, 5), pick({5, 17, 300, 2000}, 32), 0,
                      "verify 1+4 b32 tiles"});
    }
  }
  // FP8 caches (bf16 / f16 models): every kernel path (tile prefill, tensor-core GQA decode,
  // CUDA-core decode for MHA and generic head_dim), splits, chunked prefill.
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
      for (int d : {64, 128}) {
        for (DecodeMmaLayout layout : {DecodeMmaLayout::kHeadRows, DecodeMmaLayout::kKeyRows}) {
          const bool keys = layout == DecodeMmaLayout::kKeyRows;
          attention_set_decode_mma_layout(layout);
          test_attention({t, 32, 8, d, 16, std::vector<int>(64, 1),
                          pick({1, 15, 16, 17, 200, 1000}, 64), 0,
                          keys ? "decode keys" : "decode heads", kv});
          test_attention({t,
                          32,
                          4,
                          d,
                          16,
                          {1, 1, 1},
                          {8191, 17, 100},
                          64,
                          keys ? "decode G8 splits keys" : "decode G8 splits heads",
                          kv});
        }
        attention_set_decode_mma_layout(DecodeMmaLayout::kAuto);
        test_attention({t, 16, 16, d, 16, {1, 1, 1}, {1, 300, 4000}, 0, "decode MHA", kv});
        test_attention({t, 32, 4, d, 32, {1, 17, 64, 65, 100, 37, 1},
                        {1, 17, 64, 65, 116, 1037, 33}, 0, "prefill+chunked+decode", kv});
      }
      test_attention({t, 16, 4, 128, 16, {1, 1, 1}, {8191, 17, 100}, 64, "decode splits", kv});
      test_attention({t, 8, 2, 128, 16, {512}, {8191}, 0, "chunk 512 after 7679 cached", kv});
      test_attention({t, 12, 12, 96, 16, {1, 1}, {300, 31}, 0, "decode generic D96", kv});
      test_attention({t, 8, 4, 8, 16, {1, 3}, {100, 20}, 0, "stories-shape", kv});
    }
  }
  attention_set_decode_tensor_cores(false);
  test_attention({DType::kBF16, 32, 8, 128, 16, std::vector<int>(16, 1),
                  pick({1, 17, 1000}, 16), 0, "decode cuda-cores", DType::kF8E4M3});
  attention_set_decode_tensor_cores(true);
  window_cases();
}

// ---- elementwise kernels
// -------------------------------------------------------------------------

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

void test_rope(DType t, int tokens, int heads, int kv_heads, int d, RopeScalingSpec sc,
               const char* label) {
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
  std::vector<float> inv(d / 2);
  rope_inv_freq(d, 500000.0, sc, inv.data());
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
  CK(rope(p, nullptr));
  CK(cudaDeviceSynchronize());
  const std::vector<float> q_dev = download(qb, t, q.size()), k_dev = download(kb, t, k.size());
  // The cos/sin table (the runner's path) gives the same bits; positions past its rows (half of
  // them here) are computed as before.
  upload(qb, t, q);
  upload(kb, t, k);
  const int cache_rows = 65536;
  DevBuf cache(size_t(cache_rows) * d * dsize(t));
  CK(rope_cos_sin_cache(t, p.inv_freq, d, cache_rows, cache.ptr, nullptr));
  p.cos_sin = cache.ptr;
  p.cache_rows = cache_rows;
  CK(rope(p, nullptr));
  CK(cudaDeviceSynchronize());
  check(std::string(name) + " q (cos/sin cache)", download(qb, t, q.size()), q_dev, {0, 0});
  check(std::string(name) + " k (cos/sin cache)", download(kb, t, k.size()), k_dev, {0, 0});
  ref_rope(q.data(), k.data(), pos.data(), inv.data(), tokens, heads, kv_heads, d, rounder(t));
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
    RopeScalingSpec none, linear{RopeScalingType::kLinear, 4.0, 1.0, 4.0, 8192},
        llama3{RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
    test_rope(t, 19, 32, 8, 128, none, "none");
    test_rope(t, 19, 32, 8, 128, llama3, "llama3");
    test_rope(t, 7, 8, 4, 8, linear, "linear");
    test_rope(t, 7, 16, 16, 64, llama3, "llama3");
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

}  // namespace

void bench_main();                                                        // kernel_bench.cpp
void convert_suite(const std::string& filter, int& passed, int& failed);  // convert_tests.cpp
void sampler_suite(const std::string& filter, int& passed, int& failed);  // sampler_tests.cpp
void sampler_bench();                                                     // sampler_tests.cpp
void fp8_suite(const std::string& filter, int& passed, int& failed);      // fp8_tests.cpp
void kv_fp8_suite(const std::string& filter, int& passed, int& failed);   // kv_fp8_tests.cpp
void fp8_fused_suite(const std::string& filter, int& passed, int& failed);  // fp8_fused_tests.cpp
void fp8_fused_bench();                                                     // fp8_fused_tests.cpp
void fp8_bench();                                                         // fp8_bench.cpp
void int_suite(const std::string& filter, int& passed, int& failed);      // int_tests.cpp
void int_bench();                                                         // int_tests.cpp
void prefill_attention_bench();                                           // kernel_bench.cu
void moe_suite(const std::string& filter, int& passed, int& failed);      // moe_tests.cpp
void moe_bench();                                                         // moe_tests.cpp

}  // namespace pagellm::cuda::test

int main(int argc, char** argv) {
  using namespace pagellm::cuda::test;
  bool bench = false, tests = true, sampler_only_bench = false, fp8_only_bench = false,
       int_only_bench = false, fused_only_bench = false, attention_only_bench = false,
       moe_only_bench = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--filter" && i + 1 < argc)
      g_filter = argv[++i];
    else if (a == "--bench")
      bench = true;
    else if (a == "--bench-only") {
      bench = true;
      tests = false;
    } else if (a == "--sampler-bench") {
      sampler_only_bench = true;
    } else if (a == "--fp8-bench") {
      fp8_only_bench = true;
    } else if (a == "--fp8-bench-only") {
      fp8_only_bench = true;
      tests = false;
    } else if (a == "--fp8-fused-bench-only") {
      fused_only_bench = true;
      tests = false;
    } else if (a == "--attention-bench-only") {
      attention_only_bench = true;
      tests = false;
    } else if (a == "--moe-bench-only") {
      moe_only_bench = true;
      tests = false;
    } else if (a == "--int-bench-only") {
      int_only_bench = true;
      tests = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--filter SUBSTRING] [--bench | --bench-only] [--sampler-bench] "
                   "[--fp8-bench | --fp8-bench-only] [--fp8-fused-bench-only] [--int-bench-only] "
                   "[--attention-bench-only] [--moe-bench-only]\n",
                   argv[0]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // logs survive a timeout
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  g_num_sms = prop.multiProcessorCount;
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, g_num_sms);
  const auto t0 = std::chrono::steady_clock::now();
  if (tests) {
    convert_suite(g_filter, g_passed, g_failed);
    elementwise_suite();
    attention_suite();
    sampler_suite(g_filter, g_passed, g_failed);
    fp8_suite(g_filter, g_passed, g_failed);
    kv_fp8_suite(g_filter, g_passed, g_failed);
    fp8_fused_suite(g_filter, g_passed, g_failed);
    int_suite(g_filter, g_passed, g_failed);
    moe_suite(g_filter, g_passed, g_failed);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("kernel tests: %d passed, %d failed (%.1f s)\n", g_passed, g_failed, secs);
  }
  if (bench) bench_main();
  if (attention_only_bench) prefill_attention_bench();
  if (bench || sampler_only_bench) sampler_bench();
  if (bench || fp8_only_bench) fp8_bench();
  if (bench || int_only_bench) int_bench();
  if (bench || fused_only_bench) fp8_fused_bench();
  if (bench || moe_only_bench) moe_bench();
  return g_failed == 0 ? 0 : 1;
}
