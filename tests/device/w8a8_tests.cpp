// W8A8-INT8 linear layers (int8_linear, backends/cuda/gemm/int_gemm.h) against the CPU backend's
// math, and their benchmark:
//  - both GEMMs (cuBLASLt's int8 GEMM with int32 sums in slices of the scratch, then the scaling
//    kernel; on Hopper the wgmma kernel with the scaling in its epilogue) against a host reference
//    (per-token symmetric int8 activations, exact integer sums, both scales, the bias): within the
//    output dtype's rounding;
//  - the wgmma kernel bit-identical to the cuBLASLt path: m from 1 to 1,000 (partial 128-row
//    tiles), n not a multiple of 256, k not a multiple of 128, bias, bf16 and f16;
//  - the benchmark (--w8a8-bench-only): Llama-3.1-8B's projections at m = 16 .. 8,192, both paths
//    (quantization included) and the wgmma kernel alone, beside cuBLAS bf16, in CUDA graphs.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/gemm/int_gemm.h"
#include "bench_util.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_rng(808);
using Path = Int8LinearParams::Path;

const char* path_name(Path p) {
  return p == Path::kCublasLt ? "cublaslt" : p == Path::kWgmma ? "wgmma" : "auto";
}

void upload_values(DevMem& d, DType t, const std::vector<float>& v) {
  const std::vector<uint8_t> raw = encode(t, v);
  d.alloc(raw.size());
  CK(cudaMemcpy(d.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}

// The CPU backend's W8A8 on x [m, k]: per-token int8 codes, exact sums, both scales, bias.
std::vector<float> host_w8a8(const std::vector<float>& x, const std::vector<int8_t>& wq,
                             const std::vector<float>& ws, const std::vector<float>* bias, int m,
                             int n, int k) {
  std::vector<float> ref(size_t(m) * n);
  std::vector<int> xq(static_cast<size_t>(k));
  for (int i = 0; i < m; ++i) {
    const float* row = &x[size_t(i) * k];
    float amax = 0.f;
    for (int c = 0; c < k; ++c) amax = std::fmax(amax, std::fabs(row[c]));
    const float inv = amax > 0.f ? 127.0f / amax : 0.f, xs = amax / 127.0f;
    for (int c = 0; c < k; ++c)
      xq[size_t(c)] = int(std::clamp(std::nearbyint(row[c] * inv), -128.f, 127.f));
    for (int j = 0; j < n; ++j) {
      int64_t acc = 0;
      for (int c = 0; c < k; ++c) acc += int64_t{xq[size_t(c)]} * wq[size_t(j) * k + c];
      ref[size_t(i) * n + j] = float(acc) * xs * ws[size_t(j)] + (bias ? (*bias)[size_t(j)] : 0.f);
    }
  }
  return ref;
}

// int8_linear on `path` against the host math; the wgmma path also against the cuBLASLt path's
// bytes. Slices of the int32 scratch (acc_rows) smaller than m are exercised on cuBLASLt.
void test_int8_linear(Suite& s, GemmContext* ctx, DType t, int m, int n, int k, int acc_rows,
                      bool bias, Path path) {
  char name[112];
  std::snprintf(name, sizeof name, "int w8a8 linear %s %s m=%d n=%d k=%d slices of %d%s",
                path_name(path), dname(t), m, n, k, acc_rows, bias ? " bias" : "");
  if (!s.selected(name)) return;
  if (path == Path::kWgmma && !device_is_sm90()) {
    s.report(name, true, "skipped: not compute capability 9.0");
    return;
  }
  std::uniform_real_distribution<float> xd(-1.f, 1.f), sd(0.5f, 2.f);
  std::uniform_int_distribution<int> qd(-128, 127);
  std::vector<float> x(size_t(m) * k), ws(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  std::vector<int8_t> wq(size_t(n) * k);
  for (auto& v : x) v = round_to(t, xd(g_rng));
  for (int i = 0; i < k; ++i) x[size_t(i)] = 0.f;  // row 0 all zeros
  for (auto& v : wq) v = int8_t(qd(g_rng));
  for (auto& v : ws) v = sd(g_rng) * 1e-3f;
  for (auto& v : b) v = round_to(t, xd(g_rng));
  const std::vector<float> ref = host_w8a8(x, wq, ws, bias ? &b : nullptr, m, n, k);
  DevMem xd_, wd(wq.size()), wsd(ws.size() * 4), bd, yd(size_t(m) * n * 2), xq(size_t(m) * k),
      xs(size_t(m) * 4), acc(size_t(acc_rows) * n * 4);
  upload_values(xd_, t, x);
  upload_values(bd, t, b);
  CK(cudaMemcpy(wd.ptr, wq.data(), wq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(wsd.ptr, ws.data(), ws.size() * 4, cudaMemcpyHostToDevice));
  Int8LinearParams p;
  p.dtype = t, p.x = xd_.ptr, p.wq = static_cast<const int8_t*>(wd.ptr);
  p.w_scale = static_cast<const float*>(wsd.ptr), p.y = yd.ptr, p.bias = bias ? bd.ptr : nullptr;
  p.m = m, p.n = n, p.k = k, p.xq_work = static_cast<int8_t*>(xq.ptr);
  p.x_scale_work = static_cast<float*>(xs.ptr), p.acc_work = static_cast<int32_t*>(acc.ptr);
  p.acc_rows = acc_rows, p.path = path;
  CK(cudaMemset(yd.ptr, 0xff, yd.bytes));
  cudaError_t err = int8_linear(ctx, p, nullptr);
  CK(cudaDeviceSynchronize());
  if (err != cudaSuccess) {
    s.report(name, false, cudaGetErrorString(err));
    return;
  }
  const Err e = compare(download(yd, t, ref.size()), ref);
  bool same_bits = true;
  if (path == Path::kWgmma) {
    std::vector<uint8_t> wgmma_bytes(yd.bytes), cublas_bytes(yd.bytes);
    CK(cudaMemcpy(wgmma_bytes.data(), yd.ptr, yd.bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemset(yd.ptr, 0xff, yd.bytes));
    p.path = Path::kCublasLt;
    err = int8_linear(ctx, p, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(cublas_bytes.data(), yd.ptr, yd.bytes, cudaMemcpyDeviceToHost));
    same_bits = err == cudaSuccess && wgmma_bytes == cublas_bytes;
  }
  char detail[112];
  std::snprintf(detail, sizeof detail, "rel_l2 %.2e max_rel %.2e%s", e.rel_l2, e.max_rel,
                path == Path::kWgmma ? (same_bits ? ", cuBLASLt's bits" : ", BITS DIFFER") : "");
  s.report(name, same_bits && e.finite && e.max_rel < (t == DType::kBF16 ? 8e-3 : 2e-3), detail);
}

// The wgmma path refuses what it cannot take (k not a multiple of 16) instead of computing it.
void test_wgmma_refusal(Suite& s, GemmContext* ctx) {
  const std::string name = "int w8a8 wgmma refuses k % 16 != 0";
  if (!s.selected(name)) return;
  DevMem x(64 * 8 * 2), w(64 * 8 * 2), ws(64 * 4), y(64 * 64 * 2), xq(64 * 64), xs(64 * 4),
      acc(64 * 64 * 4);
  Int8LinearParams p;
  p.x = x.ptr, p.wq = static_cast<const int8_t*>(w.ptr), p.w_scale = static_cast<float*>(ws.ptr);
  p.y = y.ptr, p.m = 8, p.n = 64, p.k = 24, p.xq_work = static_cast<int8_t*>(xq.ptr);
  p.x_scale_work = static_cast<float*>(xs.ptr), p.acc_work = static_cast<int32_t*>(acc.ptr);
  p.acc_rows = 8, p.path = Path::kWgmma;
  const cudaError_t err = int8_linear(ctx, p, nullptr);
  s.report(name, err == cudaErrorInvalidValue, cudaGetErrorString(err));
}

}  // namespace

void w8a8_suite(const std::string& filter, int& passed, int& failed) {
  Suite s;
  s.filter = filter;
  std::printf("== int w8a8 (W8A8-INT8 linear)\n");
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  for (DType t : {DType::kBF16, DType::kF16}) {
    test_int8_linear(s, ctx, t, 1, 1024, 4096, 16, true, Path::kAuto);
    test_int8_linear(s, ctx, t, 7, 388, 512, 16, false, Path::kAuto);
    test_int8_linear(s, ctx, t, 300, 768, 1024, 128, true, Path::kCublasLt);
    test_int8_linear(s, ctx, t, 64, 4096, 14336, 64, false, Path::kCublasLt);
    // The wgmma kernel: one row, partial row tiles, n not a multiple of 256 (and of 8), k not a
    // multiple of 128, several column tiles, a long k.
    struct Shape {
      int m, n, k;
      bool bias;
    };
    for (const Shape& sh :
         {Shape{1, 1024, 4096, true}, Shape{7, 388, 512, false}, Shape{64, 4096, 14336, false},
          Shape{129, 260, 1040, true}, Shape{300, 768, 1024, true}, Shape{1000, 6144, 4096, false},
          Shape{256, 28672, 4096, true}, Shape{200, 516, 16, false}})
      test_int8_linear(s, ctx, t, sh.m, sh.n, sh.k, 128, sh.bias, Path::kWgmma);
  }
  test_wgmma_refusal(s, ctx);
  gemm_destroy(ctx);
  passed += s.passed;
  failed += s.failed;
}

// Llama-3.1-8B's projections, W8A8 both ways (quantizing x included) and the wgmma GEMM alone,
// beside cuBLAS bf16, each call in a 20-call graph; weights rotate over >= 512 MB.
void w8a8_bench() {
  std::printf("== w8a8 benchmark\n");
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  std::printf("ceilings: d2d copy (read+write) %.0f GB/s; cuBLASLt bf16 GEMM 8192^3 %.0f TFLOP/s\n",
              copy_gbs(), bf16_gemm_tflops(ctx));
  std::printf("%-15s %5s %10s %10s %10s %10s %9s %9s\n", "n x k", "m", "bf16 us", "cublas us",
              "wgmma us", "gemm us", "TOP/s", "vs bf16");
  constexpr int kMaxM = 8192, kAccRows = 1024;
  for (const ProjectionShape& sh : kLlamaProjections) {
    const size_t w16 = size_t(sh.n) * sh.k * 2;
    const int copies = int((size_t(512) << 20) / (w16 / 2) + 1);
    std::vector<DevMem> wb(static_cast<size_t>(copies)), wq(static_cast<size_t>(copies));
    for (int c = 0; c < copies; ++c) {
      wb[size_t(c)].alloc(w16);
      wq[size_t(c)].alloc(w16 / 2);
      fill_random(wb[size_t(c)].ptr, int64_t(sh.n) * sh.k, 300 + c, 0.05);
      fill_random(wq[size_t(c)].ptr, int64_t(sh.n) * sh.k / 2, 500 + c, 1.0);  // random bytes
    }
    DevMem x(size_t(kMaxM) * sh.k * 2), y(size_t(kMaxM) * sh.n * 2), ws(size_t(sh.n) * 4),
        xq(size_t(kMaxM) * sh.k), xs(size_t(kMaxM) * 4), acc(size_t(kAccRows) * sh.n * 4);
    fill_random(x.ptr, int64_t(kMaxM) * sh.k, 12, 1.0);
    CK(fill_constant(DType::kF32, ws.ptr, sh.n, 1e-3f, nullptr));
    for (int m : {16, 64, 128, 256, 512, 1024, 2048, 8192}) {
      int next = 0;
      const double us16 = 1e3 * time_graph_ms([&](cudaStream_t st) {
                            CK(gemm(ctx,
                                    {DType::kBF16, x.ptr, wb[size_t(next++ % copies)].ptr, y.ptr, m,
                                     sh.n, sh.k, false},
                                    st));
                          });
      Int8LinearParams p;
      p.x = x.ptr, p.w_scale = static_cast<const float*>(ws.ptr), p.y = y.ptr;
      p.m = m, p.n = sh.n, p.k = sh.k, p.xq_work = static_cast<int8_t*>(xq.ptr);
      p.x_scale_work = static_cast<float*>(xs.ptr), p.acc_work = static_cast<int32_t*>(acc.ptr);
      p.acc_rows = kAccRows;
      double us[3];
      for (int v = 0; v < 3; ++v) {
        p.path = v == 0 ? Path::kCublasLt : Path::kWgmma;
        us[v] = 1e3 * time_graph_ms([&](cudaStream_t st) {
                  p.wq = static_cast<const int8_t*>(wq[size_t(next++ % copies)].ptr);
                  CK(v < 2 ? int8_linear(ctx, p, st) : int8_gemm_sm90(p, st));
                });
      }
      std::printf("%-15s %5d %10.1f %10.1f %10.1f %10.1f %9.1f %8.2fx\n", sh.name, m, us16, us[0],
                  us[1], us[2], 2.0 * m * sh.n * sh.k / (us[2] * 1e6), us16 / us[1]);
    }
  }
  gemm_destroy(ctx);
}

}  // namespace pagellm::cuda::test
