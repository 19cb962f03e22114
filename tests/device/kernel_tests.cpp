// Self-checking tests and benchmarks of pagellm's CUDA kernels against the CPU references in
// kernel_reference.cpp. Runs on the GPU machine (no gtest, no Debian libraries there):
//   cuda_kernel_tests [--filter SUBSTRING] [--bench | --bench-only] [--sampler-bench]
//                     [--fp8-bench | --fp8-bench-only] [--int-bench-only]
//                     [--attention-bench-only] [--moe-bench-only] [--w8a8-bench-only]
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
#include "kernel_test_helpers.h"

namespace pagellm::cuda::test {
namespace {

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

}  // namespace

void elementwise_suite();                                                 // elementwise_tests.cpp
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
void w8a8_suite(const std::string& filter, int& passed, int& failed);     // w8a8_tests.cpp
void w8a8_bench();                                                        // w8a8_tests.cpp
void prefill_attention_bench();                                           // kernel_bench.cu
void moe_suite(const std::string& filter, int& passed, int& failed);      // moe_tests.cpp
void moe_bench();                                                         // moe_tests.cpp

}  // namespace pagellm::cuda::test

int main(int argc, char** argv) {
  using namespace pagellm::cuda::test;
  bool bench = false, tests = true, sampler_only_bench = false, fp8_only_bench = false,
       int_only_bench = false, fused_only_bench = false, attention_only_bench = false,
       moe_only_bench = false, w8a8_only_bench = false;
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
    } else if (a == "--w8a8-bench-only") {
      w8a8_only_bench = true;
      tests = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--filter SUBSTRING] [--bench | --bench-only] [--sampler-bench] "
                   "[--fp8-bench | --fp8-bench-only] [--fp8-fused-bench-only] [--int-bench-only] "
                   "[--attention-bench-only] [--moe-bench-only] [--w8a8-bench-only]\n",
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
    w8a8_suite(g_filter, g_passed, g_failed);
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
  if (bench || w8a8_only_bench) w8a8_bench();
  return g_failed == 0 ? 0 : 1;
}
