// FP8 linear benchmark (cuda_kernel_tests --fp8-bench): every fp8_linear path against the bf16
// cuda::gemm on Llama-3.1-8B's projections (n, k) = qkv (6144, 4096), o (4096, 4096), gate_up
// (28672, 4096), down (4096, 14336) at m = 1 .. 8192, next to the two ceilings measured in the same
// process (device-to-device copy, bytes read + written; cuBLASLt bf16 GEMM 8192³). Weights are
// random bf16 quantized per channel on the device (never zeros) and rotate over >= 512 MB of
// copies so that L2 (50 MB) cannot serve them. Small m is timed twice: single launches between
// events, and 20 launches captured in one CUDA graph (a decode step's setting: no launch gaps).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/gemm/fp8_gemm.h"
#include "backends/cuda/gemm/fp8_internal.h"
#include "backends/cuda/kernels.h"
#include "bench_util.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {
namespace {

struct Row {
  std::string shape, path;
  int m;
  double us_single, us_graph;  // us_graph < 0: not timed
  double w_bytes, flops;
};

struct Ceilings {
  double copy_gbs, gemm_tflops;
};

void print_row(const Row& r, const Ceilings& c) {
  const double us = r.us_graph > 0 ? r.us_graph : r.us_single;
  const double gbs = r.w_bytes / (us * 1e3), tf = r.flops / (us * 1e6);
  char graph[16] = "-";
  if (r.us_graph > 0) std::snprintf(graph, sizeof graph, "%.1f", r.us_graph);
  std::printf("%-15s %5d  %-28s %9.1f %8s %8.0f %6.1f%% %8.1f %6.1f%%\n", r.shape.c_str(), r.m,
              r.path.c_str(), r.us_single, graph, gbs, 100.0 * gbs / c.copy_gbs, tf,
              100.0 * tf / c.gemm_tflops);
}

}  // namespace

void fp8_bench() {
  std::printf("== fp8 benchmark\n");
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  const Ceilings ceil{copy_gbs(), bf16_gemm_tflops(ctx)};
  std::printf("ceilings: d2d copy (read+write) %.0f GB/s; cuBLASLt bf16 GEMM 8192^3 %.0f TFLOP/s\n",
              ceil.copy_gbs, ceil.gemm_tflops);
  std::printf("%-15s %5s  %-28s %9s %8s %8s %7s %8s %7s\n", "n x k", "m", "path", "us(1)",
              "us(graph)", "W GB/s", "of copy", "TFLOP/s", "of bf16");
  const int ms_list[] = {1, 2, 4, 8, 12, 16, 32, 64, 128, 256, 1024, 8192};
  std::vector<Row> rows;
  // Block-scaled rows run in a second pass, after every per-channel row is on record.
  for (const bool block_pass : {false, true})
    for (const ProjectionShape& sh : kLlamaProjections) {
      const size_t w16 = size_t(sh.n) * sh.k * 2, w8 = w16 / 2;
      const int copies16 = int((size_t(512) << 20) / w16 + 1),
                copies8 = int((size_t(512) << 20) / w8 + 1);
      std::vector<DevMem> wb(static_cast<size_t>(copies16)), wq(static_cast<size_t>(copies8));
      std::vector<DevMem> ws(static_cast<size_t>(copies8));
      for (int c = 0; c < copies16; ++c) {
        wb[size_t(c)].alloc(w16);
        fill_random(wb[size_t(c)].ptr, int64_t(sh.n) * sh.k, 100 + c, 0.05);
      }
      for (int c = 0; c < copies8; ++c) {
        wq[size_t(c)].alloc(w8);
        ws[size_t(c)].alloc(size_t(sh.n) * 4);
        CK(quantize_fp8_per_channel(DType::kBF16, wb[size_t(c % copies16)].ptr, sh.n, sh.k,
                                    wq[size_t(c)].ptr, static_cast<float*>(ws[size_t(c)].ptr),
                                    nullptr));
      }
      const int max_m = 8192;
      // Scale buffers with slack past their documented sizes, in case cuBLASLt's block modes read
      // padded tiles (their contents then only reach rows that do not exist).
      DevMem x(size_t(max_m) * sh.k * 2), y(size_t(max_m) * sh.n * 2), xq(size_t(max_m) * sh.k),
          xs(size_t(max_m + 128) * (sh.k / kFp8Block + 4) * 4);
      // Block scales for the block-scaled rows: any positive value times the same bytes.
      const size_t num_block_scales =
          size_t((sh.n + kFp8Block - 1) / kFp8Block + 1) * fp8_block_scale_stride(sh.k);
      DevMem wsb(num_block_scales * 4);
      CK(fill_constant(DType::kF32, wsb.ptr, int64_t(num_block_scales), 1e-3f, nullptr));
      fill_random(x.ptr, int64_t(max_m) * sh.k, 11, 1.0);
      for (int m : ms_list) {
        const double flops = 2.0 * m * sh.n * sh.k;
        int next16 = 0, next8 = 0;
        auto bf16_call = [&](cudaStream_t st) {
          CK(gemm(ctx,
                  {DType::kBF16, x.ptr, wb[size_t(next16++ % copies16)].ptr, y.ptr, m, sh.n, sh.k,
                   false},
                  st));
        };
        bool blocked = false;
        auto fp8_params = [&]() {
          const size_t c = size_t(next8++ % copies8);
          Fp8LinearParams p;
          p.x = x.ptr;
          p.wq = wq[c].ptr;
          p.w_scale = static_cast<const float*>(blocked ? wsb.ptr : ws[c].ptr);
          p.w_block = blocked ? kFp8Block : 0;
          p.y = y.ptr;
          p.m = m;
          p.n = sh.n;
          p.k = sh.k;
          p.xq_work = xq.ptr;
          p.x_scale_work = static_cast<float*>(xs.ptr);
          return p;
        };
        auto add = [&](const std::string& path, double w_bytes,
                       const std::function<void(cudaStream_t)>& call) {
          Row r{sh.name, path, m, 0, -1, w_bytes, flops};
          r.us_single = 1e3 * time_ms([&] { call(nullptr); }, m >= 1024 ? 10 : 25);
          if (m <= 256) r.us_graph = 1e3 * time_graph_ms(call);
          print_row(r, ceil);
          rows.push_back(r);
        };
        if (block_pass) {
          // Block-scaled weights (128x128) with activations quantized per 128-column group.
          blocked = true;
          if (m <= 8)
            add("fp8 block wo cores", double(w8),
                [&](cudaStream_t st) { CK(fp8_weight_only(fp8_params(), 1, st)); });
          fp8_linear_set_path(ctx, Fp8Path::kScaledGemm);
          if (const cudaError_t e = fp8_linear(ctx, fp8_params(), nullptr); e == cudaSuccess)
            add("fp8 block quant+cublasLt", double(w8),
                [&](cudaStream_t st) { CK(fp8_linear(ctx, fp8_params(), st)); });
          else
            std::printf("%-15s %5d  %-28s %s\n", sh.name, m, "fp8 block cublasLt",
                        cudaGetErrorString(e));
          fp8_linear_set_path(ctx, Fp8Path::kAuto);
          add("fp8 block auto", double(w8),
              [&](cudaStream_t st) { CK(fp8_linear(ctx, fp8_params(), st)); });
          continue;
        }
        add("bf16 gemm", double(w16), bf16_call);
        // What a model gets: fp8_linear's own choice for this m.
        add("fp8 auto", double(w8),
            [&](cudaStream_t st) { CK(fp8_linear(ctx, fp8_params(), st)); });
        // Weight-only kernels: CUDA cores (default configuration up to 16 rows, the alternatives up
        // to 8) and tensor cores (up to 64 rows: 4 slices of 16).
        for (int v = 1; v < kFp8WeightOnlyNumVariants; ++v) {
          const int limit = v == 1 ? 16 : v == 2 ? 64 : 8;
          if (m > limit) continue;
          add(std::string("fp8 wo ") + fp8_weight_only_variant_name(v), double(w8),
              [&, v](cudaStream_t st) { CK(fp8_weight_only(fp8_params(), v, st)); });
        }
        for (Fp8Path path : {Fp8Path::kScaledGemm, Fp8Path::kGemmThenScale}) {
          if (path == Fp8Path::kGemmThenScale && m < 4) continue;
          fp8_linear_set_path(ctx, path);
          const cudaError_t e = fp8_linear(ctx, fp8_params(), nullptr);
          if (e == cudaSuccess)
            add(path == Fp8Path::kScaledGemm ? "fp8 quant+cublasLt scaled"
                                             : "fp8 quant+cublasLt+scale",
                double(w8), [&](cudaStream_t st) { CK(fp8_linear(ctx, fp8_params(), st)); });
          else
            std::printf("%-15s %5d  %-28s %s\n", sh.name, m, "fp8 cublasLt", cudaGetErrorString(e));
          fp8_linear_set_path(ctx, Fp8Path::kAuto);
        }
        if (m >= 16)
          add("fp8 quantize only", double(size_t(m) * sh.k * 3), [&](cudaStream_t st) {
            CK(quantize_fp8_per_token(
                {DType::kBF16, x.ptr, xq.ptr, static_cast<float*>(xs.ptr), m, sh.k}, st));
          });
      }
    }
  // Summary per (shape, m): bf16, fp8_linear's choice, and the fastest per-channel fp8 path.
  std::printf("== fp8 summary (per-channel weights; us per call, graph timing where taken)\n");
  std::printf("%-16s %5s %9s %9s %8s %7s %7s %9s  %s\n", "shape", "m", "bf16", "fp8 auto",
              "speedup", "W%copy", "TF%bf16", "best fp8", "best path");
  auto us = [](const Row& r) { return r.us_graph > 0 ? r.us_graph : r.us_single; };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].path != "bf16 gemm") continue;
    const Row& b = rows[i];
    const Row *best = nullptr, *automatic = nullptr;
    for (size_t j = i + 1; j < rows.size() && rows[j].path != "bf16 gemm"; ++j) {
      if (rows[j].shape != b.shape || rows[j].m != b.m) break;
      if (rows[j].path == "fp8 auto")
        automatic = &rows[j];
      else if (rows[j].path.rfind("fp8 quantize", 0) != 0 && (!best || us(rows[j]) < us(*best)))
        best = &rows[j];
    }
    if (!best || !automatic) continue;
    const double t = us(*automatic);
    std::printf("%-16s %5d %9.1f %9.1f %7.2fx %6.1f%% %6.1f%% %9.1f  %s\n", b.shape.c_str(), b.m,
                us(b), t, us(b) / t, 100.0 * automatic->w_bytes / (t * 1e3) / ceil.copy_gbs,
                100.0 * automatic->flops / (t * 1e6) / ceil.gemm_tflops, us(*best),
                best->path.c_str());
  }
  // The same for block-scaled weights: fp8_linear's choice and the fastest block path.
  std::printf("== fp8 block-scaled summary (us per call)\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].path != "fp8 block auto") continue;
    const Row& a = rows[i];
    const Row* best = &a;
    for (const Row& r : rows)
      if (r.shape == a.shape && r.m == a.m && r.path.rfind("fp8 block", 0) == 0 &&
          us(r) < us(*best))
        best = &r;
    std::printf("%-16s %5d auto %9.1f (%5.1f%% of copy)  best %9.1f  %s\n", a.shape.c_str(), a.m,
                us(a), 100.0 * a.w_bytes / (us(a) * 1e3) / ceil.copy_gbs, us(*best),
                best->path.c_str());
  }
  gemm_destroy(ctx);
}

}  // namespace pagellm::cuda::test
