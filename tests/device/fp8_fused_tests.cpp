// FP8 activation quantization fused into the kernel that writes the activation (kernels.h Fp8Out):
//  - rms_norm (with and without the residual add, rows of one round and of several, per row and
//    per 128-column group) with an FP8 copy gives the bytes and scales of the plain kernel
//    followed by quantize_fp8_per_token, bit for bit, and the same 16-bit output when it also
//    writes it;
//  - silu_and_mul (and GeLU-tanh-and-mul) with an FP8 copy likewise, per row and per group, and
//    refuses the shapes it cannot take;
//  - fp8_linear on the pre-quantized input (x_quantized) gives the bits of the unfused call, and
//    fp8_linear_quantizes_x answers as the path the call takes.
// fp8_fused_bench (cuda_kernel_tests --fp8-fused-bench-only) times the fused norm against the
// plain norm + quantize_fp8_per_token on Llama-3.1-8B's rows (hidden 4096), and the memory-bound
// kernels of a prefill step against the copy rate measured in the same process.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/rope_frequencies.h"
#include "backends/cuda/gemm/fp8_gemm.h"
#include "backends/cuda/kernels.h"
#include "bench_util.h"
#include "device_test_util.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_rng(4242);

std::vector<uint8_t> random_bytes(DType t, size_t n, float mag) {
  std::uniform_real_distribution<float> dist(-mag, mag);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(g_rng);
  return encode(t, v);
}

// A device copy of raw bytes (the buffer sized to them).
void put(DevMem& d, const std::vector<uint8_t>& raw) {
  d.alloc(raw.size());
  CK(cudaMemcpy(d.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}

std::vector<uint8_t> fetch(const DevMem& d, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  CK(cudaMemcpy(out.data(), d.ptr, bytes, cudaMemcpyDeviceToHost));
  return out;
}

// The quantized copy a fused kernel wrote (q, scale) against quantize_fp8_per_token on the plain
// kernel's 16-bit output (ref_x): every byte and every scale bit-exact.
struct QuantCheck {
  size_t bad_q = 0, bad_s = 0;
  std::string detail() const {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%zu bytes, %zu scales differ", bad_q, bad_s);
    return buf;
  }
};

QuantCheck check_against_unfused(DType t, const DevMem& ref_x, int rows, int cols, int group,
                                 const DevMem& q, const DevMem& scale) {
  const size_t num_scales = size_t(rows) * (group ? cols / group : 1);
  DevMem rq(size_t(rows) * cols), rs(num_scales * 4);
  CK(quantize_fp8_per_token({t, ref_x.ptr, rq.ptr, static_cast<float*>(rs.ptr), rows, cols, group},
                            nullptr));
  CK(cudaDeviceSynchronize());
  QuantCheck c;
  const auto a = fetch(q, rq.bytes), b = fetch(rq, rq.bytes);
  for (size_t i = 0; i < a.size(); ++i) c.bad_q += a[i] != b[i];
  const auto sa = fetch(scale, rs.bytes), sb = fetch(rs, rs.bytes);
  for (size_t i = 0; i < num_scales; ++i) c.bad_s += std::memcmp(&sa[i * 4], &sb[i * 4], 4) != 0;
  return c;
}

// rms_norm with an FP8 copy against rms_norm, then quantize_fp8_per_token on its output. The
// residual (updated in place) starts from the same bytes in both runs; with keep_out the fused
// kernel also writes the 16-bit rows, which must equal the plain kernel's.
void test_norm(Suite& s, DType t, int rows, int hidden, bool residual, int group, bool keep_out) {
  char name[128];
  std::snprintf(name, sizeof name, "fp8 fused rms_norm %s rows=%d hidden=%d%s%s%s", dname(t), rows,
                hidden, residual ? " +res" : "", group ? " group128" : "", keep_out ? " +out" : "");
  if (!s.selected(name)) return;
  const size_t n = size_t(rows) * hidden, bytes = n * dsize(t);
  const auto x_raw = random_bytes(t, n, 2.f), res_raw = random_bytes(t, n, 4.f);
  const auto w_raw = random_bytes(t, size_t(hidden), 1.5f);
  DevMem x, w, res_a, res_b;
  put(x, x_raw), put(w, w_raw), put(res_a, res_raw), put(res_b, res_raw);
  DevMem out_a(bytes), out_b(bytes), q(n), scale(size_t(rows) * (hidden / 128 + 1) * 4);
  RmsNormParams plain{t,      x.ptr, residual ? res_a.ptr : nullptr, w.ptr, out_a.ptr, rows,
                      hidden, 1e-5f};
  CK(rms_norm(plain, nullptr));
  RmsNormParams fused = plain;
  fused.residual = residual ? res_b.ptr : nullptr;
  fused.out = keep_out ? out_b.ptr : nullptr;
  fused.fp8 = {q.ptr, static_cast<float*>(scale.ptr), group};
  CK(rms_norm(fused, nullptr));
  CK(cudaDeviceSynchronize());
  const QuantCheck c = check_against_unfused(t, out_a, rows, hidden, group, q, scale);
  const bool out_same = !keep_out || fetch(out_a, bytes) == fetch(out_b, bytes);
  const bool res_same = !residual || fetch(res_a, bytes) == fetch(res_b, bytes);
  s.report(name, c.bad_q == 0 && c.bad_s == 0 && out_same && res_same,
           c.detail() + (out_same ? "" : ", 16-bit rows differ") +
               (res_same ? "" : ", residual differs"));
}

// silu_and_mul with an FP8 copy against silu_and_mul, then quantize_fp8_per_token on its output;
// with keep_out the fused kernel also writes the 16-bit rows, which must equal the plain kernel's.
void test_silu(Suite& s, DType t, int rows, int inner, int group, bool keep_out, bool gelu) {
  char name[128];
  std::snprintf(name, sizeof name, "fp8 fused silu_and_mul %s rows=%d inner=%d%s%s%s", dname(t),
                rows, inner, group ? " group128" : "", keep_out ? " +out" : "",
                gelu ? " gelu" : "");
  if (!s.selected(name)) return;
  const size_t n = size_t(rows) * inner, bytes = n * dsize(t);
  DevMem x, out_a(bytes), out_b(bytes), q(n), scale(size_t(rows) * (inner / 128 + 1) * 4);
  put(x, random_bytes(t, 2 * n, 6.f));
  SiluAndMulParams plain{t, x.ptr, out_a.ptr, rows, inner, gelu};
  CK(silu_and_mul(plain, nullptr));
  SiluAndMulParams fused = plain;
  fused.out = keep_out ? out_b.ptr : nullptr;
  fused.fp8 = {q.ptr, static_cast<float*>(scale.ptr), group};
  const bool valid = silu_and_mul_fp8_valid(fused);
  CK(silu_and_mul(fused, nullptr));
  CK(cudaDeviceSynchronize());
  const QuantCheck c = check_against_unfused(t, out_a, rows, inner, group, q, scale);
  const bool out_same = !keep_out || fetch(out_a, bytes) == fetch(out_b, bytes);
  s.report(name, valid && c.bad_q == 0 && c.bad_s == 0 && out_same,
           c.detail() + (out_same ? "" : ", 16-bit rows differ") + (valid ? "" : ", refused"));
}

// Shapes the FP8 copy cannot take: refused with cudaErrorInvalidValue, nothing launched.
void test_silu_refusals(Suite& s) {
  const char* name = "fp8 fused silu_and_mul refusals";
  if (!s.selected(name)) return;
  DevMem x(size_t(4) * 2 * 200000 * 2), q(size_t(4) * 200000), scale(4096);
  auto refused = [&](DType t, int inner, int group) {
    SiluAndMulParams p{t, x.ptr, nullptr, 4, inner, false};
    p.fp8 = {q.ptr, static_cast<float*>(scale.ptr), group};
    return !silu_and_mul_fp8_valid(p) && silu_and_mul(p, nullptr) == cudaErrorInvalidValue;
  };
  const bool ok = refused(DType::kF32, 1024, 0) && refused(DType::kBF16, 1000, 0) &&
                  refused(DType::kBF16, 1040, kFp8Block) && refused(DType::kBF16, 1024, 64) &&
                  refused(DType::kF16, 100000, 0);
  s.report(name, ok, ok ? "all refused" : "a bad shape was accepted");
}

// fp8_linear with x_quantized (the scratch filled by quantize_fp8_per_token, as a fused kernel
// would) against the unfused call: the same output bits; and fp8_linear_quantizes_x's answer.
void test_prequantized_linear(Suite& s, GemmContext* ctx, DType t, int m, int n, int k,
                              int w_block) {
  char name[128];
  std::snprintf(name, sizeof name, "fp8 linear x_quantized %s m=%d n=%d k=%d%s", dname(t), m, n, k,
                w_block ? " block128" : "");
  if (!s.selected(name)) return;
  std::uniform_int_distribution<int> code(0, 255);
  std::vector<uint8_t> wq(size_t(n) * k);
  for (auto& v : wq) v = uint8_t(code(g_rng) & 0xbf);  // |w| < 2: no NaN codes
  const int scale_rows = w_block ? (n + 127) / 128 : 1;
  const size_t num_w_scales = w_block ? size_t(scale_rows) * fp8_block_scale_stride(k) : size_t(n);
  std::vector<float> ws(num_w_scales);
  std::uniform_real_distribution<float> mag(1e-3f, 1e-2f);
  for (auto& v : ws) v = mag(g_rng);
  DevMem x, wd(wq.size()), sd(ws.size() * 4);
  put(x, random_bytes(t, size_t(m) * k, 1.f));
  CK(cudaMemcpy(wd.ptr, wq.data(), wq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sd.ptr, ws.data(), ws.size() * 4, cudaMemcpyHostToDevice));
  const size_t ybytes = size_t(m) * n * dsize(t);
  DevMem ya(ybytes), yb(ybytes), xq(size_t(m) * k), xs(size_t(m) * (k / 128 + 1) * 4);
  Fp8LinearParams p;
  p.dtype = t, p.x = x.ptr, p.wq = wd.ptr, p.w_scale = static_cast<const float*>(sd.ptr);
  p.y = ya.ptr, p.m = m, p.n = n, p.k = k, p.w_block = w_block;
  p.xq_work = xq.ptr, p.x_scale_work = static_cast<float*>(xs.ptr);
  fp8_linear_set_path(ctx, Fp8Path::kAuto);
  const bool quantizes = fp8_linear_quantizes_x(ctx, p);
  const bool want = m > (w_block ? kFp8BlockWeightOnlyMaxRows : kFp8WeightOnlyMaxRows);
  CK(fp8_linear(ctx, p, nullptr));
  bool same = true;
  if (quantizes) {
    CK(quantize_fp8_per_token(
        {t, x.ptr, xq.ptr, static_cast<float*>(xs.ptr), m, k, w_block ? kFp8Block : 0}, nullptr));
    Fp8LinearParams pre = p;
    pre.x = nullptr, pre.y = yb.ptr, pre.x_quantized = true;
    CK(fp8_linear(ctx, pre, nullptr));
    CK(cudaDeviceSynchronize());
    same = fetch(ya, ybytes) == fetch(yb, ybytes);
  } else {
    Fp8LinearParams pre = p;
    pre.x_quantized = true;  // the weight-only path needs the 16-bit x: refused
    same = fp8_linear(ctx, pre, nullptr) == cudaErrorInvalidValue;
  }
  char detail[96];
  std::snprintf(detail, sizeof detail, "quantizes_x=%d (want %d), %s", quantizes, want,
                same ? "same bits" : "outputs differ");
  s.report(name, quantizes == want && same, detail);
}

}  // namespace

void fp8_fused_suite(const std::string& filter, int& passed, int& failed) {
  Suite s;
  s.filter = filter;
  std::printf("== fp8 fused activation quantization\n");
  for (DType t : {DType::kBF16, DType::kF16}) {
    for (int group : {0, kFp8Block}) {
      // 4096: one round in registers; 5120 and 8192: several passes; 128: one warp.
      for (int hidden : {4096, 5120, 8192, 128})
        for (bool residual : {false, true}) test_norm(s, t, 33, hidden, residual, group, false);
      test_norm(s, t, 1, 4096, true, group, true);
      test_norm(s, t, 300, 2048, true, group, true);
    }
    test_norm(s, t, 5, 1040, true, 0, true);  // not a multiple of 128: per row only
    for (int group : {0, kFp8Block}) {
      // 14336: Llama-3.1-8B's inner size; 384: one partial warp round; 65536: a 128 KB staging.
      for (int inner : {14336, 384, 2048, 65536}) test_silu(s, t, 33, inner, group, false, false);
      test_silu(s, t, 1, 14336, group, true, false);
      test_silu(s, t, 300, 1536, group, true, false);
      test_silu(s, t, 7, 2048, group, false, true);
    }
    test_silu(s, t, 5, 1040, 0, true, false);  // not a multiple of 128: per row only
  }
  test_silu_refusals(s);
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  for (DType t : {DType::kBF16, DType::kF16}) {
    test_prequantized_linear(s, ctx, t, 1, 1024, 4096, 0);
    test_prequantized_linear(s, ctx, t, 64, 1024, 4096, 0);
    test_prequantized_linear(s, ctx, t, 300, 768, 1040, 0);
    test_prequantized_linear(s, ctx, t, 64, 384, 2048, kFp8Block);
    test_prequantized_linear(s, ctx, t, 2, 384, 2048, kFp8Block);
  }
  gemm_destroy(ctx);
  passed += s.passed;
  failed += s.failed;
}

// The memory-bound kernels of a Llama-3.1-8B prefill step (hidden 4096, 32 / 8 heads of 128,
// inner 14336) at m tokens: µs per call (20 in one graph) and the bytes they must move over that
// time, as a share of the device copy rate measured here.
void prefill_elementwise_bench() {
  const double copy = copy_gbs();
  std::printf("== memory-bound prefill kernels (copy %.0f GB/s; us per call, %% of copy)\n", copy);
  const DType t = DType::kBF16;
  const int hidden = 4096, heads = 32, kv_heads = 8, d = 128, inner = 14336;
  const int qkv = (heads + 2 * kv_heads) * d, kv_row = kv_heads * d;
  auto line = [&](const char* what, int m, double us, double bytes) {
    std::printf("m=%5d %-34s %8.1f us  %5.1f%%\n", m, what, us, 100.0 * bytes / (us * 1e3) / copy);
  };
  for (int m : {2048, 8192}) {
    DevMem x, res, w, out(size_t(m) * hidden * 2), q(size_t(m) * inner), sc(size_t(m) * 4);
    put(x, random_bytes(t, size_t(m) * hidden, 2.f));
    put(res, random_bytes(t, size_t(m) * hidden, 2.f));
    put(w, random_bytes(t, size_t(hidden), 1.f));
    float* scale = static_cast<float*>(sc.ptr);
    const double row = double(m) * hidden * 2;
    RmsNormParams norm{t, x.ptr, res.ptr, w.ptr, out.ptr, m, hidden, 1e-5f};
    line("add + rms_norm", m, 1e3 * time_graph_ms([&](cudaStream_t st) { CK(rms_norm(norm, st)); }),
         4 * row);
    RmsNormParams norm_q = norm;
    norm_q.out = nullptr, norm_q.fp8 = {q.ptr, scale, 0};
    line("add + rms_norm -> fp8", m,
         1e3 * time_graph_ms([&](cudaStream_t st) { CK(rms_norm(norm_q, st)); }), 3.5 * row);
    line("quantize rows (k 4096)", m,
         1e3 * time_graph_ms([&](cudaStream_t st) {
           CK(quantize_fp8_per_token({t, x.ptr, q.ptr, scale, m, hidden, 0}, st));
         }),
         1.5 * row);
    DevMem gu, act(size_t(m) * inner * 2);
    put(gu, random_bytes(t, size_t(m) * 2 * inner, 4.f));
    const double act_bytes = double(m) * inner * 2;
    SiluAndMulParams silu{t, gu.ptr, act.ptr, m, inner, false};
    line("silu_and_mul", m,
         1e3 * time_graph_ms([&](cudaStream_t st) { CK(silu_and_mul(silu, st)); }), 3 * act_bytes);
    SiluAndMulParams silu_q = silu;
    silu_q.out = nullptr, silu_q.fp8 = {q.ptr, scale, 0};
    line("silu_and_mul -> fp8", m,
         1e3 * time_graph_ms([&](cudaStream_t st) { CK(silu_and_mul(silu_q, st)); }),
         2.5 * act_bytes);
    line("quantize rows (k 14336)", m,
         1e3 * time_graph_ms([&](cudaStream_t st) {
           CK(quantize_fp8_per_token({t, act.ptr, q.ptr, scale, m, inner, 0}, st));
         }),
         1.5 * act_bytes);
    // RoPE + KV write on the fused qkv rows: positions 0 .. 1023 repeating, one slot per token.
    DevMem qkv_rows, kc(size_t(m) * kv_row * 2), vc(size_t(m) * kv_row * 2), pos(size_t(m) * 4),
        slots(size_t(m) * 8), inv(size_t(d / 2) * 4), table(size_t(1024) * d * 2);
    put(qkv_rows, random_bytes(t, size_t(m) * qkv, 1.f));
    std::vector<int32_t> positions(static_cast<size_t>(m));
    std::vector<int64_t> slot_ids(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) positions[size_t(i)] = i % 1024, slot_ids[size_t(i)] = i;
    const std::vector<float> freqs = cpu::rope_inv_freq({}, 500000.0, d);
    CK(cudaMemcpy(pos.ptr, positions.data(), pos.bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(slots.ptr, slot_ids.data(), slots.bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(inv.ptr, freqs.data(), inv.bytes, cudaMemcpyHostToDevice));
    CK(rope_cos_sin_cache(t, static_cast<float*>(inv.ptr), d, 1024, table.ptr, nullptr));
    RopeParams rp;
    rp.dtype = t, rp.q = qkv_rows.ptr, rp.k = static_cast<char*>(qkv_rows.ptr) + heads * d * 2;
    rp.positions = static_cast<int32_t*>(pos.ptr), rp.inv_freq = static_cast<float*>(inv.ptr);
    rp.cos_sin = table.ptr, rp.cache_rows = 1024, rp.num_tokens = m;
    rp.num_heads = heads, rp.num_kv_heads = kv_heads, rp.head_dim = d;
    rp.q_token_stride = rp.k_token_stride = qkv;
    KvCacheWriteParams kw;
    kw.dtype = kw.cache_dtype = t, kw.key = rp.k;
    kw.value = static_cast<char*>(rp.k) + kv_row * 2;
    kw.k_cache = kc.ptr, kw.v_cache = vc.ptr, kw.slot_mapping = static_cast<int64_t*>(slots.ptr);
    kw.num_tokens = m, kw.num_kv_heads = kv_heads, kw.head_dim = d, kw.num_slots = m;
    kw.key_token_stride = kw.value_token_stride = qkv;
    // q and k read and written, v read, k and v written to the cache, the table rows read.
    const double rope_bytes = double(m) * 2 * (2.0 * (heads + kv_heads) * d + 3.0 * kv_row + d);
    line("rope + kv cache write", m,
         1e3 * time_graph_ms([&](cudaStream_t st) { CK(rope_and_write_kv_cache(rp, kw, st)); }),
         rope_bytes);
  }
}

void fp8_fused_bench() {
  std::printf("== fp8 fused quantization benchmark (us per call, 20 calls in one graph)\n");
  const DType t = DType::kBF16;
  const int hidden = 4096;
  for (int m : {1, 64, 256, 2048, 8192}) {
    for (int group : {0, kFp8Block}) {
      DevMem x, w, res;
      put(x, random_bytes(t, size_t(m) * hidden, 2.f));
      put(res, random_bytes(t, size_t(m) * hidden, 2.f));
      put(w, random_bytes(t, size_t(hidden), 1.f));
      DevMem out(size_t(m) * hidden * 2), q(size_t(m) * hidden);
      DevMem sc(size_t(m) * (hidden / 128) * 4);
      float* scale = static_cast<float*>(sc.ptr);
      RmsNormParams norm{t, x.ptr, res.ptr, w.ptr, out.ptr, m, hidden, 1e-5f};
      RmsNormParams norm_q = norm;
      norm_q.out = nullptr, norm_q.fp8 = {q.ptr, scale, group};
      const double us =
          1e3 * time_graph_ms([&](cudaStream_t st) {
            CK(rms_norm(norm, st));
            CK(quantize_fp8_per_token({t, out.ptr, q.ptr, scale, m, hidden, group}, st));
          });
      const double fused_us =
          1e3 * time_graph_ms([&](cudaStream_t st) { CK(rms_norm(norm_q, st)); });
      std::printf("m=%5d %-9s add+rms_norm+quantize %8.1f  fused %8.1f\n", m,
                  group ? "group128" : "per-row", us, fused_us);
    }
  }
  prefill_elementwise_bench();
}

}  // namespace pagellm::cuda::test
