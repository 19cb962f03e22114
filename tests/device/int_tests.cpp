// INT4 / INT8 weight-only linear layers (backends/cuda/gemm/int_gemm.h) against a host reference,
// and their benchmark:
//  - int_linear / int_weight_only over m from 1 to 300 (one and two activation tiles, several
//    16-row slices, the dequantize + 16-bit GEMM path past kIntWeightOnlyMaxRows), odd n, one- and
//    two-row-tile grids, k 64 .. 14336, group sizes 32 / 128 / per channel, symmetric and
//    asymmetric zeros, with and without bias, bf16 and f16: within the output dtype's rounding of a
//    float64 sum over the dequantized weights (round((q - z) * s) with s in the layer dtype; the
//    kernels that scale the sums instead of the weights are closer to the unrounded product);
//  - at m = 1 the register kernel and the one-row GEMV (int_weight_gemv) pinned, and the gated
//    GEMV (int_linear_silu_and_mul) bit-identical to the GEMV followed by silu_and_mul;
//  - int_dequantize_weight bit-exact with that host dequantization; int_gather_columns exact;
//  - a CUDA graph replay gives the eager call's bits.
// W8A8-INT8 (int8_linear) is tested in w8a8_tests.cpp.
// The packing below restates the layout of int_gemm.h on purpose (this binary links no
// pagellm_core; quant/int_gpu_layout.cpp is checked against the CPU loader by the unit tests).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/gemm/int_gemm.h"
#include "bench_util.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_rng(1212);

struct IntWeight {
  int bits = 4, n = 0, k = 0, group = 0;
  std::vector<uint8_t> q, zero;  // [n, k], [n, k / group] (empty: symmetric)
  std::vector<float> scale;      // [n, k / group], already rounded to the layer dtype
  std::vector<uint8_t> packed;   // the kernel layout
  float at(int r, int c) const {
    const size_t g = size_t(r) * (k / group) + c / group;
    const int z = zero.empty() ? 1 << (bits - 1) : zero[g];
    return (float(q[size_t(r) * k + c]) - float(z)) * scale[g];
  }
};

IntWeight random_weight(DType t, int bits, int n, int k, int group, bool asym) {
  IntWeight w;
  w.bits = bits, w.n = n, w.k = k, w.group = group;
  std::uniform_int_distribution<int> qd(0, (1 << bits) - 1);
  std::uniform_real_distribution<float> sd(0.5f, 2.0f);
  w.q.resize(size_t(n) * k);
  for (auto& v : w.q) v = uint8_t(qd(g_rng));
  const size_t groups = size_t(n) * (k / group);
  w.scale.resize(groups);
  for (auto& s : w.scale) s = round_to(t, sd(g_rng) * (bits == 4 ? 0.02f : 0.002f));
  if (asym) {
    w.zero.resize(groups);
    for (auto& z : w.zero) z = uint8_t(qd(g_rng));
  }
  const int row_bytes = k * bits / 8;
  w.packed.assign(size_t(n) * row_bytes, 0);
  static const int kColumnOfNibble[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; c += (bits == 4 ? 8 : 1)) {
      uint8_t* out = &w.packed[size_t(r) * row_bytes + size_t(c) * bits / 8];
      if (bits == 8) {
        out[0] = w.q[size_t(r) * k + c];
        continue;
      }
      uint32_t word = 0;
      for (int nib = 0; nib < 8; ++nib)
        word |= uint32_t(w.q[size_t(r) * k + c + kColumnOfNibble[nib]]) << (4 * nib);
      std::memcpy(out, &word, 4);
    }
  return w;
}

struct IntSetup {
  DType dtype = DType::kBF16;
  int bits = 4, m = 1, n = 0, k = 0, group = 128;
  bool asym = false, bias = false;
};

std::string name_of(const IntSetup& c, const char* what) {
  char b[160];
  std::snprintf(b, sizeof b, "int%d %s %s m=%d n=%d k=%d g=%d%s%s", c.bits, what, dname(c.dtype),
                c.m, c.n, c.k, c.group, c.asym ? " asym" : "", c.bias ? " bias" : "");
  return b;
}

// Device copies of one weight and the params pointing at them.
struct DeviceWeight {
  DevMem wq, scale, zero;
  DeviceWeight(const IntWeight& w, DType t) : wq(w.packed.size()), scale(w.scale.size() * 2) {
    CK(cudaMemcpy(wq.ptr, w.packed.data(), w.packed.size(), cudaMemcpyHostToDevice));
    const std::vector<uint8_t> s = encode(t, w.scale);
    CK(cudaMemcpy(scale.ptr, s.data(), s.size(), cudaMemcpyHostToDevice));
    if (!w.zero.empty()) {
      zero.alloc(w.zero.size());
      CK(cudaMemcpy(zero.ptr, w.zero.data(), w.zero.size(), cudaMemcpyHostToDevice));
    }
  }
  IntLinearParams params(const IntWeight& w, DType t) const {
    IntLinearParams p;
    p.dtype = t, p.bits = w.bits, p.wq = wq.ptr, p.scale = scale.ptr;
    p.zero = zero.ptr ? static_cast<const uint8_t*>(zero.ptr) : nullptr;
    p.n = w.n, p.k = w.k, p.group_size = w.group;
    return p;
  }
};

void upload(DevMem& d, DType t, const std::vector<float>& v) {
  const std::vector<uint8_t> raw = encode(t, v);
  d.alloc(raw.size());
  CK(cudaMemcpy(d.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}

// At m = 1: the register kernel (int_linear takes the GEMV there) and the GEMV itself.
void test_one_row_kernels(Suite& s, const IntSetup& c, const IntLinearParams& p, DevMem& yd,
                          const std::vector<float>& ref, double tol) {
  for (int tiles : {1, 4}) {
    CK(cudaMemset(yd.ptr, 0xff, yd.bytes));
    const cudaError_t err = int_weight_only(p, nullptr, tiles);
    if (err == cudaErrorNotSupported && tiles == 4 && c.k > 32768) continue;  // register kernel
    CK(err);
    CK(cudaDeviceSynchronize());
    const Err e = compare(download(yd, c.dtype, ref.size()), ref);
    char detail[96];
    std::snprintf(detail, sizeof detail, "rel_l2 %.2e max_rel %.2e", e.rel_l2, e.max_rel);
    s.report(name_of(c, tiles == 1 ? "register kernel" : "gemv"), e.finite && e.max_rel < tol,
             detail);
  }
}

// int_linear_silu_and_mul at m = 1 (w = [gate; up]) against the GEMV followed by silu_and_mul:
// the same bits (each row's sum is formed in the same order in both).
void test_gated_gemv(Suite& s, const IntSetup& c, const IntLinearParams& p, GemmContext* ctx) {
  const std::string name = name_of(c, "gemv silu_and_mul");
  if (!s.selected(name)) return;
  const int inner = c.n / 2;
  DevMem two(size_t(c.n) * 2), fused(size_t(inner) * 2), want(size_t(inner) * 2);
  IntLinearParams q = p;
  q.y = fused.ptr;
  CK(cudaMemset(fused.ptr, 0xff, fused.bytes));
  const cudaError_t err = int_linear_silu_and_mul(ctx, q, nullptr);
  if (err == cudaErrorNotSupported && c.k > 32768) return;
  CK(err);
  q.y = two.ptr;
  CK(int_weight_only(q, nullptr, 4));
  CK(silu_and_mul({c.dtype, two.ptr, want.ptr, 1, inner}, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<uint8_t> a(fused.bytes), b(want.bytes);
  CK(cudaMemcpy(a.data(), fused.ptr, a.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), want.ptr, b.size(), cudaMemcpyDeviceToHost));
  s.report(name, a == b, "bit-identical to the GEMV, then silu_and_mul");
}

// One kernel of m <= kIntWeightOnlyMaxRows (int_weight_stream, int_weight_wgmma), with k split over
// blocks (scratch given) and without; `refused_unsplit`: NotSupported without the scratch is
// allowed.
void test_pinned_kernel(Suite& s, const IntSetup& c, const IntLinearParams& p, DevMem& work,
                        DevMem& yd, const std::vector<float>& ref, double tol, const char* what,
                        cudaError_t (*kernel)(const IntLinearParams&, cudaStream_t),
                        bool refused_unsplit) {
  for (void* scratch : {work.ptr, static_cast<void*>(nullptr)}) {
    IntLinearParams q = p;
    q.w_work = scratch;
    CK(cudaMemset(yd.ptr, 0xff, yd.bytes));
    const cudaError_t err = kernel(q, nullptr);
    if (err == cudaErrorNotSupported && !scratch && refused_unsplit) continue;
    CK(err);
    CK(cudaDeviceSynchronize());
    const Err e = compare(download(yd, c.dtype, ref.size()), ref);
    char detail[96];
    std::snprintf(detail, sizeof detail, "rel_l2 %.2e max_rel %.2e", e.rel_l2, e.max_rel);
    s.report(name_of(c, (std::string(what) + (scratch ? "" : " unsplit")).c_str()),
             e.finite && e.max_rel < tol, detail);
  }
}

void test_linear(Suite& s, GemmContext* ctx, const IntSetup& c) {
  const std::string name = name_of(c, "linear");
  if (!s.selected(name)) return;
  const IntWeight w = random_weight(c.dtype, c.bits, c.n, c.k, c.group, c.asym);
  std::uniform_real_distribution<float> xd(-1.f, 1.f);
  std::vector<float> x(size_t(c.m) * c.k), bias(size_t(c.n));
  for (auto& v : x) v = round_to(c.dtype, xd(g_rng));
  for (auto& v : bias) v = round_to(c.dtype, xd(g_rng));
  std::vector<float> wd(size_t(c.n) * c.k);
  for (int r = 0; r < c.n; ++r)
    for (int j = 0; j < c.k; ++j) wd[size_t(r) * c.k + j] = round_to(c.dtype, w.at(r, j));
  std::vector<float> ref(size_t(c.m) * c.n);
  for (int i = 0; i < c.m; ++i)
    for (int r = 0; r < c.n; ++r) {
      double acc = c.bias ? bias[size_t(r)] : 0.0;
      for (int j = 0; j < c.k; ++j) acc += double(x[size_t(i) * c.k + j]) * wd[size_t(r) * c.k + j];
      ref[size_t(i) * c.n + r] = float(acc);
    }
  DeviceWeight dw(w, c.dtype);
  DevMem xd_, yd(size_t(c.m) * c.n * 2), bd, work(size_t(c.n) * c.k * 2);
  upload(xd_, c.dtype, x);
  upload(bd, c.dtype, bias);
  CK(cudaMemset(yd.ptr, 0xff, yd.bytes));  // NaN
  IntLinearParams p = dw.params(w, c.dtype);
  p.x = xd_.ptr, p.y = yd.ptr, p.m = c.m, p.bias = c.bias ? bd.ptr : nullptr, p.w_work = work.ptr;
  CK(int_linear(ctx, p, nullptr));
  CK(cudaDeviceSynchronize());
  const Err e = compare(download(yd, c.dtype, ref.size()), ref);
  const double tol = c.dtype == DType::kBF16 ? 8e-3 : 2e-3;
  char detail[96];
  std::snprintf(detail, sizeof detail, "rel_l2 %.2e max_rel %.2e", e.rel_l2, e.max_rel);
  s.report(name, e.finite && e.max_rel < tol, detail);
  std::vector<uint8_t> eager(yd.bytes), replay(yd.bytes);
  CK(cudaMemcpy(eager.data(), yd.ptr, yd.bytes, cudaMemcpyDeviceToHost));

  if (c.m <= kIntWeightOnlyMaxRows) {
    // The streaming kernel refuses small groups at large k without the scratch (int_linear's
    // fallback); the wgmma kernel takes 4 bits with groups a multiple of 128 on sm_90a only.
    test_pinned_kernel(s, c, p, work, yd, ref, tol, "stream", int_weight_stream, c.group < 64);
    if (device_is_sm90() && c.bits == 4 && c.group % 128 == 0)
      test_pinned_kernel(s, c, p, work, yd, ref, tol, "wgmma", int_weight_wgmma, false);
  }

  if (c.m != 1) return;
  test_one_row_kernels(s, c, p, yd, ref, tol);
  if (c.n % 2 == 0) test_gated_gemv(s, c, p, ctx);

  // The dequantized weight, bit-exact, and a graph replay equal to the eager call.
  DevMem deq(size_t(c.n) * c.k * 2);
  CK(int_dequantize_weight(p, deq.ptr, nullptr));
  CK(cudaDeviceSynchronize());
  s.report(name_of(c, "dequantize"), download(deq, c.dtype, wd.size()) == wd, "bit-exact");
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CK(int_linear(ctx, p, stream));
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaMemset(yd.ptr, 0xff, yd.bytes));
  CK(cudaGraphLaunch(exec, stream));
  CK(cudaStreamSynchronize(stream));
  CK(cudaMemcpy(replay.data(), yd.ptr, yd.bytes, cudaMemcpyDeviceToHost));
  s.report(name_of(c, "graph"), eager == replay, "replay bit-identical to eager");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(stream));
}

// Parameters outside int_linear's contract: the pinned kernels answer InvalidValue without a
// launch (no group size, k not a multiple of it, a float32 dtype, more rows than they take).
void test_invalid_params(Suite& s) {
  const std::string name = "int pinned kernels refuse invalid params";
  if (!s.selected(name)) return;
  DevMem buf(1 << 16);
  IntLinearParams ok;
  ok.x = ok.wq = ok.scale = ok.y = buf.ptr;
  ok.m = 2, ok.n = 16, ok.k = 256, ok.group_size = 128;
  std::vector<IntLinearParams> bad(5, ok);
  bad[0].group_size = 0;
  bad[1].k = 320;
  bad[2].dtype = DType::kF32;
  bad[3].m = kIntWeightOnlyMaxRows + 1;
  bad[4].k = kIntMaxK;  // past the 32-bit activation strides
  bool all = true;
  for (const IntLinearParams& p : bad) {
    all = all && int_weight_only(p, nullptr, 5) == cudaErrorInvalidValue;
    all = all && int_weight_wgmma(p, nullptr) == cudaErrorInvalidValue;
  }
  CK(cudaDeviceSynchronize());
  s.report(name, all, "cudaErrorInvalidValue, nothing launched");
}

void test_gather(Suite& s, DType t, int m, int k) {
  char name[64];
  std::snprintf(name, sizeof name, "int gather %s m=%d k=%d", dname(t), m, k);
  if (!s.selected(name)) return;
  std::vector<int32_t> perm(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) perm[size_t(j)] = j;
  std::shuffle(perm.begin(), perm.end(), g_rng);
  std::uniform_real_distribution<float> xd(-1.f, 1.f);
  std::vector<float> x(size_t(m) * k), want(x.size());
  for (auto& v : x) v = round_to(t, xd(g_rng));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < k; ++j) want[size_t(i) * k + j] = x[size_t(i) * k + perm[size_t(j)]];
  DevMem xd_, pd(perm.size() * 4), out(x.size() * 2);
  upload(xd_, t, x);
  CK(cudaMemcpy(pd.ptr, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice));
  CK(int_gather_columns(t, xd_.ptr, static_cast<int32_t*>(pd.ptr), out.ptr, m, k, nullptr));
  CK(cudaDeviceSynchronize());
  s.report(name, download(out, t, want.size()) == want, "exact");
}

}  // namespace

void int_suite(const std::string& filter, int& passed, int& failed) {
  Suite s;
  s.filter = filter;
  std::printf("== int (INT4 / INT8 weight-only linear)\n");
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  struct Shape {
    int m, n, k, group;
  };
  const Shape shapes[] = {{1, 1024, 4096, 128},
                          {1, 97, 64, 32},
                          {3, 1001, 384, 128},
                          {8, 9000, 512, 128},
                          {9, 768, 1024, 1024},
                          {16, 4096, 14336, 128},
                          {33, 512, 256, 32},
                          {64, 8448, 256, 64},
                          {65, 300, 512, 128},
                          {64, 4096, 4096, 128},
                          {24, 2000, 14336, 32},
                          {40, 257, 1120, 32},
                          {300, 768, 1024, 128},
                          {1, 8448, 4096, 4096},
                          // one-row GEMV: a partial last chunk, groups of 32 and 64, Llama's
                          // gate/up and down, a k split into more chunks than stages
                          {1, 130, 1120, 32},
                          {1, 512, 832, 64},
                          {1, 28672, 4096, 128},
                          {1, 4096, 14336, 128},
                          {1, 34, 14336, 32},
                          // the tiny references' projections (hidden 64), a 576-wide row
                          {3, 128, 64, 32},
                          {27, 128, 64, 32},
                          {27, 256, 64, 32},
                          {3, 64, 128, 32},
                          {27, 64, 128, 32},
                          {40, 300, 576, 32},
                          {5, 300, 576, 32},
                          // the wgmma kernel: every tile width, odd n, groups of 256 and per
                          // channel, a k split
                          {2, 130, 512, 128},
                          {33, 300, 1024, 128},
                          {47, 257, 2048, 256},
                          {24, 2000, 14336, 128},
                          {12, 1000, 3072, 3072}};
  int i = 0;
  for (DType t : {DType::kBF16, DType::kF16})
    for (int bits : {4, 8})
      for (const Shape& sh : shapes) {
        IntSetup c;
        c.dtype = t, c.bits = bits, c.m = sh.m, c.n = sh.n, c.k = sh.k, c.group = sh.group;
        c.asym = i % 2 == 0, c.bias = i % 3 == 0;
        ++i;
        test_linear(s, ctx, c);
      }
  test_invalid_params(s);
  for (DType t : {DType::kBF16, DType::kF16}) test_gather(s, t, 5, 4096);
  gemm_destroy(ctx);
  passed += s.passed;
  failed += s.failed;
}

// INT4 / INT8 weight-only against bf16 on Llama-3.1-8B's projections, weights rotated over
// >= 512 MB so that L2 cannot serve them, each call timed in a 20-call graph.
void int_bench() {
  std::printf("== int benchmark\n");
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  const double copy = copy_gbs();
  std::printf("ceiling: d2d copy (read+write) %.0f GB/s\n", copy);
  std::printf("%-15s %5s %6s %9s %9s %8s %7s\n", "n x k", "m", "bits/tiles", "us", "bf16 us",
              "speedup", "W%copy");
  // PAGELLM_INT_BENCH_SHAPE / _M restrict the run to one shape (name prefix) and one m (profiling).
  const char* only_shape = std::getenv("PAGELLM_INT_BENCH_SHAPE");
  const char* only_m = std::getenv("PAGELLM_INT_BENCH_M");
  for (const ProjectionShape& sh : kLlamaProjections) {
    if (only_shape && std::string(sh.name).rfind(only_shape, 0) != 0) continue;
    const size_t w16 = size_t(sh.n) * sh.k * 2;
    const int copies16 = int((size_t(512) << 20) / w16 + 1);
    std::vector<DevMem> wb(static_cast<size_t>(copies16));
    for (int c = 0; c < copies16; ++c) {
      wb[size_t(c)].alloc(w16);
      fill_random(wb[size_t(c)].ptr, int64_t(sh.n) * sh.k, 300 + c, 0.05);
    }
    const int max_m = 64;
    DevMem x(size_t(max_m) * sh.k * 2), y(size_t(max_m) * sh.n * 2), work(w16);
    fill_random(x.ptr, int64_t(max_m) * sh.k, 12, 1.0);
    for (int bits : {4, 8}) {
      const size_t wbytes = size_t(sh.n) * sh.k * bits / 8, groups = size_t(sh.n) * sh.k / 128;
      const int copies = int((size_t(512) << 20) / wbytes + 1);
      std::vector<DevMem> wq(static_cast<size_t>(copies)), sc(static_cast<size_t>(copies));
      for (int c = 0; c < copies; ++c) {
        wq[size_t(c)].alloc(wbytes);
        sc[size_t(c)].alloc(groups * 2);
        fill_random(wq[size_t(c)].ptr, int64_t(wbytes / 2), 500 + c, 1.0);  // random bits
        CK(fill_constant(DType::kBF16, sc[size_t(c)].ptr, int64_t(groups), 0.01f, nullptr));
      }
      for (int m : {1, 4, 8, 16, 32, 64}) {
        if (only_m && std::atoi(only_m) != m) continue;
        int next16 = 0;
        const double us16 = 1e3 * time_graph_ms([&](cudaStream_t st) {
                              CK(gemm(ctx,
                                      {DType::kBF16, x.ptr, wb[size_t(next16++ % copies16)].ptr,
                                       y.ptr, m, sh.n, sh.k, false},
                                      st));
                            });
        // tiles 0: int_linear's choice; 1 and 2 pin the register kernel's rows per block, 3 the
        // streaming kernel (with its k split: the scratch is given), 4 the one-row GEMV, 5 the
        // wgmma kernel (4 bits), 6 the gated GEMV (int_linear_silu_and_mul, half the outputs).
        for (int tiles : {0, 1, 2, 3, 4, 5, 6}) {
          if ((tiles == 4 || tiles == 6) && m != 1) continue;
          if (tiles == 5 && (bits != 4 || !device_is_sm90())) continue;
          int next = 0;
          const double us =
              1e3 * time_graph_ms([&](cudaStream_t st) {
                const size_t c = size_t(next++ % copies);
                IntLinearParams p;
                p.bits = bits, p.x = x.ptr, p.wq = wq[c].ptr, p.scale = sc[c].ptr, p.y = y.ptr;
                p.m = m, p.n = sh.n, p.k = sh.k, p.group_size = 128, p.w_work = work.ptr;
                CK(tiles == 0   ? int_linear(ctx, p, st)
                   : tiles == 6 ? int_linear_silu_and_mul(ctx, p, st)
                                : int_weight_only(p, st, tiles));
              });
          const double bytes = double(wbytes) + double(groups) * 2;
          std::printf("%-15s %5d %4s/%d %9.1f %9.1f %7.2fx %6.1f%%\n", sh.name, m,
                      bits == 4 ? "int4" : "int8", tiles, us, us16, us16 / us,
                      100.0 * (bytes / (us * 1e3)) / copy);
        }
      }
    }
  }
  gemm_destroy(ctx);
}

}  // namespace pagellm::cuda::test
