// FP8 linear layers (backends/cuda/gemm/fp8_gemm.h) against host references:
//  - quantize_fp8_per_token (per row and per 128-column group) / _per_channel: every byte and
//    every scale bit-exact with the host
//    math on common/fp8.h (rows of random data, zeros, NaN, ±inf, huge and tiny magnitudes);
//  - fp8_linear on every path (weight-only on CUDA cores and on tensor cores, the benchmark's
//    alternative configurations, cuBLASLt with outer-vector or 128x128 block scales, cuBLASLt +
//    scale kernel, automatic) over odd n, k multiples of 16, m from 1 to 300,
//    with and without bias, bf16 and f16: within the output dtype's rounding of a float64 sum over
//    exactly the values the device multiplies (16-bit x for the weight-only path, the per-token
//    e4m3 x otherwise);
//  - a CUDA graph replay of fp8_linear gives the eager call's bits.
// Outputs are poisoned with NaN first; inputs are fresh random data.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/gemm/fp8_gemm.h"
#include "backends/cuda/gemm/fp8_internal.h"
#include "backends/cuda/kernels.h"
#include "common/fp8.h"
#include "device_test_util.h"
#include "fp8_test_util.h"
#include "kernel_reference.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_rng(8181);

// Row i of an [rows, cols] matrix gets magnitude 2^(i % 7 - 3) so that per-row scales differ.
std::vector<float> random_rows(DType t, int rows, int cols) {
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(size_t(rows) * cols);
  for (int i = 0; i < rows; ++i) {
    const float mag = std::ldexp(1.f, i % 7 - 3);
    for (int j = 0; j < cols; ++j) v[size_t(i) * cols + j] = round_to(t, dist(g_rng) * mag);
  }
  return v;
}

// ---- quantization ------------------------------------------------------------------------------

// Rows that stress the conversion: magnitudes over 2^-30..2^0 of the row max (e4m3 subnormals and
// underflow to zero), an all-zero row, a NaN, ±inf (f16 only reaches 65504, so inf comes from
// encode), one huge row, and rows scaled by 2^-100..2^100 (f16: 2^-12..2^12), so that the
// kernels' quotients (fp8_act_quant.cuh fp8_quotient) meet scales of every exponent.
std::vector<float> quantize_inputs(DType t, int m, int k) {
  std::vector<float> x = random_rows(t, m, k);
  std::uniform_real_distribution<float> expo(-30.f, 0.f), sign(-1.f, 1.f);
  const int max_shift = t == DType::kF16 ? 12 : 100;
  std::uniform_int_distribution<int> shift(-max_shift, max_shift);
  for (int i = 0; i < m; ++i) {
    float* row = &x[size_t(i) * k];
    switch (i % 8) {
      case 1:
        for (int j = 0; j < k; ++j)
          row[j] = round_to(t, std::copysign(std::exp2(expo(g_rng)), sign(g_rng)));
        break;
      case 2:
        std::fill(row, row + k, 0.f);
        break;
      case 3:
        row[k / 2] = NAN;
        break;
      case 4:
        row[k - 1] = INFINITY;
        row[0] = -INFINITY;
        break;
      case 5:
        for (int j = 0; j < k; ++j) row[j] = round_to(t, row[j] * 4000.f);  // f16 stays finite
        break;
      case 6:
      case 7: {
        const int e = shift(g_rng);
        for (int j = 0; j < k; ++j) row[j] = round_to(t, std::ldexp(row[j], e));
        break;
      }
      default:
        break;
    }
  }
  return x;
}

// kind: 0 per token, 1 per channel, 2 per 128-column group.
void test_quantize(Suite& s, DType t, int m, int k, int kind) {
  char name[128];
  const char* kinds[] = {"per-token", "per-channel", "group128"};
  std::snprintf(name, sizeof name, "fp8 quantize %s %s m=%d k=%d", kinds[kind], dname(t), m, k);
  if (!s.selected(name)) return;
  const std::vector<float> x = quantize_inputs(t, m, k);
  const std::vector<uint8_t> raw = encode(t, x);
  const int group = kind == 2 ? kFp8Block : k;
  const int num_groups = k / group;
  DevMem xd(raw.size()), qd(size_t(m) * k), sd(size_t(m) * num_groups * 4);
  CK(cudaMemcpy(xd.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemset(qd.ptr, 0xa5, qd.bytes));
  CK(cudaMemset(sd.ptr, 0xff, sd.bytes));
  float* scale = static_cast<float*>(sd.ptr);
  if (kind == 1)
    CK(quantize_fp8_per_channel(t, xd.ptr, m, k, qd.ptr, scale, nullptr));
  else
    CK(quantize_fp8_per_token({t, xd.ptr, qd.ptr, scale, m, k, kind == 2 ? kFp8Block : 0},
                              nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<uint8_t> q(size_t(m) * k), q_ref(q.size());
  std::vector<float> sc(size_t(m) * num_groups), sc_ref(sc.size());
  CK(cudaMemcpy(q.data(), qd.ptr, q.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sc.data(), sd.ptr, sc.size() * 4, cudaMemcpyDeviceToHost));
  // Group scales are group-major: scale[g * m + i].
  for (int i = 0; i < m; ++i)
    for (int g = 0; g < num_groups; ++g) {
      const size_t o = size_t(i) * k + size_t(g) * group;
      sc_ref[size_t(g) * m + i] = host_quantize_row(&x[o], group, &q_ref[o]);
    }
  // NaN codes compare without their sign: inf / inf (a row holding ±inf has an infinite scale)
  // is a NaN whose sign differs between x86 and the GPU before any conversion.
  auto same = [](uint8_t a, uint8_t b) {
    return a == b || ((a & 0x7f) == 0x7f && (b & 0x7f) == 0x7f);
  };
  size_t bad_q = 0, bad_s = 0, first = SIZE_MAX;
  for (size_t i = 0; i < q.size(); ++i)
    if (!same(q[i], q_ref[i]) && bad_q++ == 0) first = i;
  for (size_t i = 0; i < sc.size(); ++i)
    if (std::memcmp(&sc[i], &sc_ref[i], 4) != 0) ++bad_s;
  char detail[160];
  if (bad_q == 0 && bad_s == 0)
    std::snprintf(detail, sizeof detail, "%zu bytes, %zu scales bit-exact", q.size(), sc.size());
  else if (first != SIZE_MAX)
    std::snprintf(detail, sizeof detail,
                  "%zu bytes / %zu scales differ; first at %zu: x=%g got 0x%02x want 0x%02x", bad_q,
                  bad_s, first, x[first], q[first], q_ref[first]);
  else
    std::snprintf(detail, sizeof detail, "%zu scales differ", bad_s);
  s.report(name, bad_q == 0 && bad_s == 0, detail);
}

// dequantize_fp8_blocks on a slice [rows, cols] at (row0, col0) of an [n, k] block-scaled weight
// (random e4m3 codes, random positive scales): every output equals the host's fp32 product rounded
// to the dtype. by_rows: dequantize_fp8_rows instead (bn = 1, bk = cols = k, col0 = 0: a scale
// per row, from row row0 of the scales).
void test_dequant_blocks(Suite& s, DType t, int n, int k, int row0, int col0, int rows, int cols,
                         int bn, int bk, bool by_rows = false) {
  char name[128];
  std::snprintf(name, sizeof name, "fp8 dequantize %s %s %dx%d slice (%d,%d) %dx%d",
                by_rows ? "rows" : "blocks", dname(t), bn, bk, row0, col0, rows, cols);
  if (!s.selected(name)) return;
  const int sr = (n + bn - 1) / bn, sc = (k + bk - 1) / bk;
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> mag(1e-4f, 1e-2f);
  std::vector<uint8_t> q(size_t(rows) * cols);
  for (auto& v : q) {
    v = uint8_t(code(g_rng));
    if ((v & 0x7f) == 0x7f) v = 0;  // no NaN codes
  }
  std::vector<float> scale(size_t(sr) * sc);
  for (auto& v : scale) v = mag(g_rng);
  DevMem qd(q.size()), sd(scale.size() * 4), od(q.size() * dsize(t));
  CK(cudaMemcpy(qd.ptr, q.data(), q.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sd.ptr, scale.data(), scale.size() * 4, cudaMemcpyHostToDevice));
  Fp8BlockDequantParams p;
  p.dtype = t, p.wq = qd.ptr, p.scale = static_cast<const float*>(sd.ptr), p.out = od.ptr;
  p.rows = rows, p.cols = cols, p.row0 = row0, p.col0 = col0, p.scale_cols = sc;
  p.block_n = bn, p.block_k = bk;
  if (by_rows)
    CK(dequantize_fp8_rows(t, qd.ptr, static_cast<const float*>(sd.ptr) + row0, rows, cols, od.ptr,
                           nullptr));
  else
    CK(dequantize_fp8_blocks(p, nullptr));
  CK(cudaDeviceSynchronize());
  const std::vector<float> out = download(od, t, q.size());
  size_t bad = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      const float want = round_to(t, fp8_to_f32(q[i], Fp8Format::kE4M3) *
                                         scale[size_t((row0 + r) / bn) * sc + (col0 + c) / bk]);
      if (std::memcmp(&out[i], &want, 4) != 0) ++bad;
    }
  char detail[96];
  std::snprintf(detail, sizeof detail, "%zu of %zu values differ", bad, q.size());
  s.report(name, bad == 0, detail);
}

// ---- fp8_linear --------------------------------------------------------------------------------

const char* path_name(Fp8Path p) {
  switch (p) {
    case Fp8Path::kWeightOnly:
      return "weight-only";
    case Fp8Path::kScaledGemm:
      return "cublasLt-scaled";
    case Fp8Path::kGemmThenScale:
      return "cublasLt+scale-kernel";
    default:
      return "auto";
  }
}

// One shape's operands, device buffers and float64 references, shared by every path run on it.
struct LinearSetup {
  DType dtype;
  int m, n, k;
  bool bias;
  int w_block = 0;     // 0: per-channel weight scales; kFp8Block: 128x128 block scales
  float x_gain = 1.f;  // x's magnitude: a power of two times the random rows
  std::vector<float> ref_wo, ref_tc, exact;  // [m, n]: x16 reference, xq reference, unquantized
  DevMem xd, wd, sd, bd, yd, xq_work, xs_work;
  Fp8LinearParams params;
};

void setup_linear(LinearSetup& c) {
  const DType t = c.dtype;
  std::vector<float> x = random_rows(t, c.m, c.k);
  const std::vector<float> w = random_rows(DType::kF32, c.n, c.k);
  for (float& v : x) v = round_to(t, v * c.x_gain);
  std::vector<float> bias(size_t(c.n));
  for (auto& b : bias) b = round_to(t, std::uniform_real_distribution<float>(-1.f, 1.f)(g_rng));
  // The weight as a checkpoint would hold it: e4m3 + per-channel or 128x128-block scales,
  // quantized on the host.
  std::vector<uint8_t> wq(size_t(c.n) * c.k);
  std::vector<float> w_scale;
  if (c.w_block)
    w_scale = host_quantize_blocks(w, c.n, c.k, wq);
  else
    for (int j = 0; j < c.n; ++j)
      w_scale.push_back(host_quantize_row(&w[size_t(j) * c.k], c.k, &wq[size_t(j) * c.k]));
  const std::vector<uint8_t> x_raw = encode(t, x), b_raw = encode(t, bias);
  c.xd.alloc(x_raw.size());
  c.wd.alloc(wq.size());
  c.sd.alloc((w_scale.size() + size_t(fp8_block_scale_stride(c.k))) * 4);
  c.bd.alloc(b_raw.size());
  c.yd.alloc(size_t(c.m) * c.n * 2);
  c.xq_work.alloc(size_t(c.m) * c.k);
  // Slack past the documented sizes, in case cuBLASLt's block modes read padded tiles.
  c.xs_work.alloc(size_t(c.m + 128) * (c.k / kFp8Block + 4) * 4);
  CK(cudaMemcpy(c.xd.ptr, x_raw.data(), x_raw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(c.wd.ptr, wq.data(), wq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(c.sd.ptr, w_scale.data(), w_scale.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(c.bd.ptr, b_raw.data(), b_raw.size(), cudaMemcpyHostToDevice));
  Fp8LinearParams& p = c.params;
  p.dtype = t;
  p.x = c.xd.ptr;
  p.wq = c.wd.ptr;
  p.w_scale = static_cast<const float*>(c.sd.ptr);
  p.y = c.yd.ptr;
  p.bias = c.bias ? c.bd.ptr : nullptr;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.w_block = c.w_block;
  p.xq_work = c.xq_work.ptr;
  p.x_scale_work = static_cast<float*>(c.xs_work.ptr);

  // References in float64 over the exact device operands: 16-bit x (weight-only) or the host's
  // quantization of x per token or per 128-column group (tensor-core paths; bit-exact with the
  // device's, tested above). Dequantized operands are held in float: an e4m3 value (4 significant
  // bits) times a scale rounds at 2^-24, far below the tolerance.
  const int stride = fp8_block_scale_stride(c.k);
  std::vector<float> wdq(wq.size());
  for (int j = 0; j < c.n; ++j)
    for (int l = 0; l < c.k; ++l) {
      const float ws =
          c.w_block ? w_scale[size_t(j / kFp8Block) * stride + l / kFp8Block] : w_scale[size_t(j)];
      wdq[size_t(j) * c.k + l] = fp8_to_f32(wq[size_t(j) * c.k + l], Fp8Format::kE4M3) * ws;
    }
  std::vector<float> xdq(x.size());
  const int group = c.w_block ? kFp8Block : c.k;
  for (int i = 0; i < c.m; ++i)
    for (int g = 0; g < c.k / group; ++g) {
      std::vector<uint8_t> q(static_cast<size_t>(group));
      const size_t o = size_t(i) * c.k + size_t(g) * group;
      const float xs = host_quantize_row(&x[o], group, q.data());
      for (int l = 0; l < group; ++l) xdq[o + l] = fp8_to_f32(q[size_t(l)], Fp8Format::kE4M3) * xs;
    }
  const size_t num_out = size_t(c.m) * c.n;
  c.ref_wo.resize(num_out);
  c.ref_tc.resize(num_out);
  c.exact.resize(num_out);
  ref_gemm(x.data(), wdq.data(), c.ref_wo.data(), c.m, c.n, c.k, false);
  ref_gemm(xdq.data(), wdq.data(), c.ref_tc.data(), c.m, c.n, c.k, false);
  ref_gemm(x.data(), w.data(), c.exact.data(), c.m, c.n, c.k, false);
  for (int i = 0; i < c.m; ++i)
    for (int j = 0; j < c.n; ++j) {
      const size_t o = size_t(i) * c.n + j;
      const float b = c.bias ? bias[size_t(j)] : 0.f;
      c.ref_wo[o] = round_to(t, float(double(c.ref_wo[o]) + b));
      c.ref_tc[o] = round_to(t, float(double(c.ref_tc[o]) + b));
      c.exact[o] = c.exact[o] + b;
    }
}

std::string linear_name(const LinearSetup& c, Fp8Path path, int variant) {
  char name[160];
  char gain[32] = "";
  if (c.x_gain != 1.f) std::snprintf(gain, sizeof gain, " x*2^%d", std::ilogb(c.x_gain));
  std::snprintf(name, sizeof name, "fp8 linear %s%s %s%s m=%d n=%d k=%d%s%s", dname(c.dtype),
                c.w_block ? " block128" : "", path_name(path),
                variant ? (" v" + std::to_string(variant)).c_str() : "", c.m, c.n, c.k,
                c.bias ? " +bias" : "", gain);
  return name;
}

// Runs one path (variant > 0: a weight-only benchmark variant) on a prepared shape and checks it.
void run_linear(Suite& s, GemmContext* ctx, LinearSetup& c, Fp8Path path, int variant) {
  const std::string name_str = linear_name(c, path, variant);
  const char* name = name_str.c_str();
  if (!s.selected(name)) return;
  CK(cudaMemset(c.yd.ptr, 0xff, c.yd.bytes));  // NaN in f16 and bf16
  cudaError_t err;
  if (variant != 0) {
    err = fp8_weight_only(c.params, variant, nullptr);
  } else {
    fp8_linear_set_path(ctx, path);
    err = fp8_linear(ctx, c.params, nullptr);
    fp8_linear_set_path(ctx, Fp8Path::kAuto);
  }
  if (err == cudaErrorNotSupported && variant != 0) {
    std::printf("  skip %-66s not supported by this kernel\n", name);
    return;
  }
  if (err == cudaErrorNotSupported &&
      (path == Fp8Path::kScaledGemm || path == Fp8Path::kGemmThenScale)) {
    // A pinned cuBLASLt path on a shape cuBLASLt rejects: information, not a failure (the
    // automatic path falls back, and its own cases check that).
    std::printf("  skip %-66s cuBLASLt has no FP8 algorithm for this shape\n", name);
    return;
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {  // reported, not fatal: the remaining cases still run
    s.report(name, false, std::string("returned ") + cudaGetErrorString(err));
    return;
  }
  const std::vector<float> y = download(c.yd, c.dtype, size_t(c.m) * c.n);
  // Both references round once to the dtype; fp32 accumulation adds far less than that.
  const Err wo = compare(y, c.ref_wo), tc = compare(y, c.ref_tc), ex = compare(y, c.exact);
  // The unscaled cuBLASLt path stores its sums as bf16 before scaling (fp8_gemm.h), so one bf16
  // rounding sits inside every f16 result too: bf16's tolerance for it (measured, H100: rel_l2
  // 1.6e-3 .. 1.9e-3 in f16, 2.4e-3 .. 2.9e-3 in bf16).
  // The automatic path takes that kernel for decode batches (fp8_gemm.h kFp8DecodeMinRows).
  // cuBLASLt's fast accumulation (on by default, fp8_gemm.h fp8_fast_accum) sums in the tensor
  // cores' own accumulator: bf16's tolerance for the scaled GEMM too (measured, H200: f16 rel_l2
  // 1.2e-3 .. 1.3e-3, max_rel up to 3.2e-3, against 3.5e-2 for the quantization itself).
  const bool bf16 = c.dtype == DType::kBF16 || path == Fp8Path::kGemmThenScale ||
                    path == Fp8Path::kAuto || (path == Fp8Path::kScaledGemm && fp8_fast_accum());
  const double tol_l2 = bf16 ? 4e-3 : 1e-3, tol_max = bf16 ? 1e-2 : 3e-3;
  const bool ok_wo = wo.finite && wo.rel_l2 <= tol_l2 && wo.max_rel <= tol_max;
  const bool ok_tc = tc.finite && tc.rel_l2 <= tol_l2 && tc.max_rel <= tol_max;
  const bool want_wo = path == Fp8Path::kWeightOnly;
  const bool want_tc = path == Fp8Path::kScaledGemm || path == Fp8Path::kGemmThenScale;
  // The automatic path may take either; the two references differ by the activation quantization
  // error (percents), far above the tolerance, so matching one of them is still a sharp check.
  const bool ok = want_wo ? ok_wo : want_tc ? ok_tc : (ok_wo || ok_tc);
  const bool show_wo = want_wo || (!want_tc && ok_wo);
  const Err& shown = show_wo ? wo : tc;
  char detail[200];
  std::snprintf(detail, sizeof detail, "%s rel_l2=%.2e max_rel=%.2e (vs unquantized %.1e)%s",
                show_wo ? "ref=x16" : "ref=xq", shown.rel_l2, shown.max_rel, ex.rel_l2,
                shown.finite ? "" : " NON-FINITE");
  s.report(name, ok, detail);
}

// The gate/up projection with SiLU-and-mul in the weight-only kernel's epilogue
// (fp8_linear_silu_and_mul) against that kernel followed by silu_and_mul: the same bits. Where
// fp8_linear would not take the CUDA-core kernel (per-channel scales past one row), the fused entry
// point must decline.
void test_silu_fused(Suite& s, GemmContext* ctx, DType t, int m, int inner, int k, int w_block) {
  char name[160];
  std::snprintf(name, sizeof name, "fp8 gate/up + silu_and_mul %s%s m=%d inner=%d k=%d", dname(t),
                w_block ? " block128" : "", m, inner, k);
  if (!s.selected(name)) return;
  LinearSetup c;
  c.dtype = t;
  c.m = m;
  c.n = 2 * inner;
  c.k = k;
  c.bias = inner % 2 == 1;
  c.w_block = w_block;
  setup_linear(c);
  const size_t out_bytes = size_t(m) * inner * 2;
  DevMem one(out_bytes), two(out_bytes);
  Fp8LinearParams p = c.params;
  p.y = one.ptr;
  const cudaError_t e = fp8_linear_silu_and_mul(ctx, p, nullptr);
  if (!(m <= kFp8DefaultMaxRows || (w_block != 0 && m <= 2))) {
    s.report(name, e == cudaErrorNotSupported, "declines (another kernel runs this shape)");
    return;
  }
  CK(e);
  CK(fp8_weight_only(c.params, 1, nullptr));  // into c.yd
  CK(silu_and_mul({t, c.yd.ptr, two.ptr, m, inner}, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<uint8_t> a(out_bytes), b(out_bytes);
  CK(cudaMemcpy(a.data(), one.ptr, out_bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), two.ptr, out_bytes, cudaMemcpyDeviceToHost));
  s.report(name, a == b,
           a == b ? "bit-identical to the two kernels" : "DIFFERS from the two kernels");
}

// Activations far from 1 at m = 1: the tensor-core stream kernel stages x as f16 and rescales it by
// a power of two when its largest magnitude leaves f16's comfortable range (2^17 exceeds f16's
// largest value; 2^-12 puts most of x below f16's smallest normal). Against the CUDA-core kernel's
// tolerance, with per-channel and block scales.
void test_x_range(Suite& s, GemmContext* ctx) {
  const struct {
    DType t;
    float gain;
    int w_block;
  } cases[] = {{DType::kBF16, 131072.f, 0},
               {DType::kBF16, 1.f / 4096, 0},
               {DType::kF16, 1.f / 4096, 0},
               {DType::kBF16, 131072.f, kFp8Block}};
  for (const auto& cs : cases) {
    LinearSetup c;
    c.dtype = cs.t;
    c.m = 1;
    c.n = 1001;
    c.k = 2048;
    c.bias = false;
    c.w_block = cs.w_block;
    c.x_gain = cs.gain;
    if (!s.selected(linear_name(c, Fp8Path::kWeightOnly, 1))) continue;
    setup_linear(c);
    run_linear(s, ctx, c, Fp8Path::kWeightOnly, 1);
  }
}

// Captures fp8_linear (after one eager call of the shape) into a graph, replays it on fresh
// inputs and compares bit for bit with an eager call on the same inputs.
void test_graph(Suite& s, GemmContext* ctx, DType t, int m, int n, int k) {
  char name[128];
  std::snprintf(name, sizeof name, "fp8 linear %s graph replay m=%d n=%d k=%d", dname(t), m, n, k);
  if (!s.selected(name)) return;
  std::vector<float> w = random_rows(DType::kF32, n, k);
  std::vector<uint8_t> wq(size_t(n) * k);
  std::vector<float> w_scale(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j)
    w_scale[size_t(j)] = host_quantize_row(&w[size_t(j) * k], k, &wq[size_t(j) * k]);
  DevMem xd(size_t(m) * k * 2), wd(wq.size()), sd(size_t(n) * 4), y1(size_t(m) * n * 2),
      y2(size_t(m) * n * 2), xq_work(size_t(m) * k), xs_work(size_t(m) * 4);
  CK(cudaMemcpy(wd.ptr, wq.data(), wq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sd.ptr, w_scale.data(), w_scale.size() * 4, cudaMemcpyHostToDevice));
  Fp8LinearParams p;
  p.dtype = t;
  p.x = xd.ptr;
  p.wq = wd.ptr;
  p.w_scale = static_cast<const float*>(sd.ptr);
  p.m = m;
  p.n = n;
  p.k = k;
  p.xq_work = xq_work.ptr;
  p.x_scale_work = static_cast<float*>(xs_work.ptr);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  p.y = y1.ptr;
  const std::vector<uint8_t> warm = encode(t, random_rows(t, m, k));
  CK(cudaMemcpy(xd.ptr, warm.data(), warm.size(), cudaMemcpyHostToDevice));
  cudaError_t err = fp8_linear(ctx, p, stream);  // plans the shape outside the capture
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const cudaError_t captured = fp8_linear(ctx, p, stream);
  CK(cudaStreamEndCapture(stream, &graph));
  if (err == cudaSuccess) err = captured;
  if (err != cudaSuccess) {
    s.report(name, false, std::string("returned ") + cudaGetErrorString(err));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(stream));
    return;
  }
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const std::vector<uint8_t> fresh = encode(t, random_rows(t, m, k));
  CK(cudaMemcpy(xd.ptr, fresh.data(), fresh.size(), cudaMemcpyHostToDevice));
  CK(cudaMemset(y1.ptr, 0xff, y1.bytes));
  CK(cudaGraphLaunch(exec, stream));
  p.y = y2.ptr;
  CK(fp8_linear(ctx, p, stream));
  CK(cudaStreamSynchronize(stream));
  std::vector<uint8_t> a(y1.bytes), b(y2.bytes);
  CK(cudaMemcpy(a.data(), y1.ptr, a.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), y2.ptr, b.size(), cudaMemcpyDeviceToHost));
  const bool same = a == b;
  const Err e = compare(decode(t, a), decode(t, b));
  s.report(name, same && e.finite, same ? "bit-identical to eager" : "differs from eager");
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(stream));
}

}  // namespace

void fp8_suite(const std::string& filter, int& passed, int& failed) {
  Suite s;
  s.filter = filter;
  std::printf("== fp8 (quantization, fp8_linear)\n");
  for (DType t : {DType::kBF16, DType::kF16}) {
    test_quantize(s, t, 1, 16, 0);
    test_quantize(s, t, 7, 4096, 0);
    test_quantize(s, t, 300, 1040, 0);
    test_quantize(s, t, 12, 14336, 0);
    test_quantize(s, t, 5, 8192, 0);   // four 16-byte slices per thread
    test_quantize(s, t, 3, 20480, 0);  // past eight: the two-pass loop
    test_quantize(s, t, 97, 4096, 1);
    test_quantize(s, t, 400, 2048, 0);  // 100 of the rows scaled by 2^-100..2^100
    test_quantize(s, t, 400, 2048, 1);
    test_quantize(s, t, 400, 2048, 2);
    test_quantize(s, t, 1, 128, 2);
    test_quantize(s, t, 37, 4096, 2);
    test_quantize(s, t, 300, 640, 2);
    test_dequant_blocks(s, t, 1024, 4096, 0, 0, 1024, 4096, 128, 128);
    test_dequant_blocks(s, t, 1000, 1100, 192, 64, 300, 700, 128, 128);  // slice cuts blocks
    test_dequant_blocks(s, t, 300, 200, 7, 0, 100, 200, 64, 32);
    test_dequant_blocks(s, t, 1536, 2048, 0, 0, 1536, 2048, 1, 2048, true);  // FP8 experts
    test_dequant_blocks(s, t, 300, 48, 17, 0, 200, 48, 1, 48, true);
  }
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  struct Shape {
    int m, n, k, w_block;
  };
  // Odd n, k multiples of 16 (of 128 for block scales, with and without scale-row padding), m
  // across the weight-only / tensor-core boundary; rows five and six: decode batches (fp8_gemm.h
  // kFp8DecodeMinRows..kFp8DecodeMaxRows) on either side of their bounds; the last: long
  // block-scaled rows at m = 1 (the CUDA-core kernel's k split over two warps); then m = 1 for the
  // tensor-core stream kernel: one partial chunk of k, a partial last chunk, Llama's qkv.
  const Shape shapes[] = {
      {1, 1024, 4096, 0},   {2, 1001, 1040, 0},   {3, 97, 64, 0},        {8, 768, 4096, 0},
      {16, 1024, 1024, 0},  {64, 1001, 512, 0},   {300, 768, 1040, 0},   {300, 97, 16, 0},
      {1, 4096, 14336, 0},  {5, 136, 2048, 0},    {1, 1024, 4096, 128},  {3, 1001, 640, 128},
      {8, 384, 2048, 128},  {64, 257, 512, 128},  {300, 768, 1024, 128}, {16, 1024, 4096, 128},
      {2, 4096, 14336, 0},  {9, 1001, 1120, 0},   {24, 6144, 4096, 0},   {33, 257, 1040, 0},
      {64, 4096, 4096, 0},  {64, 28672, 1024, 0}, {100, 1001, 2048, 0},  {128, 640, 14336, 0},
      {1, 1001, 8192, 128}, {1, 97, 64, 0},       {1, 1001, 1040, 0},    {1, 6144, 4096, 0}};
  for (DType t : {DType::kBF16, DType::kF16}) {
    test_silu_fused(s, ctx, t, 1, 7168, 4096, 0);
    test_silu_fused(s, ctx, t, 1, 99, 1040, 0);
    test_silu_fused(s, ctx, t, 2, 100, 256, 0);
    test_silu_fused(s, ctx, t, 1, 300, 1024, kFp8Block);
    test_silu_fused(s, ctx, t, 2, 7, 512, kFp8Block);
    test_silu_fused(s, ctx, t, 1, 14336, 4096, 0);
  }
  test_x_range(s, ctx);
  // Per-channel shapes and graph replays first, block-scaled shapes last: a fault in cuBLASLt's
  // newer block modes then cannot hide the other results.
  int i = 0;
  for (const bool block_pass : {false, true}) {
    if (block_pass) {
      test_graph(s, ctx, DType::kBF16, 1, 1024, 4096);
      test_graph(s, ctx, DType::kBF16, 64, 1024, 4096);
      test_graph(s, ctx, DType::kF16, 300, 768, 1040);
    }
    for (DType t : {DType::kBF16, DType::kF16})
      for (const Shape& sh : shapes) {
        if ((sh.w_block != 0) != block_pass) continue;
        LinearSetup c;
        c.dtype = t;
        c.m = sh.m;
        c.n = sh.n;
        c.k = sh.k;
        c.bias = (i++ % 3) != 0;
        c.w_block = sh.w_block;
        std::vector<std::pair<Fp8Path, int>> runs = {
            {Fp8Path::kWeightOnly, 0}, {Fp8Path::kScaledGemm, 0}, {Fp8Path::kAuto, 0}};
        if (!sh.w_block) runs.push_back({Fp8Path::kGemmThenScale, 0});
        // Each weight-only kernel on its own: CUDA cores (default configuration) and tensor cores
        // at every m (in slices past 8 / 16 rows), the benchmark's alternative configurations up
        // to 16.
        for (int variant = 1; variant < kFp8WeightOnlyNumVariants; ++variant)
          if (variant == 1 || (variant == 2 && !sh.w_block) || (t == DType::kBF16 && sh.m <= 16))
            runs.push_back({Fp8Path::kWeightOnly, variant});
        // The float64 references cost more than the kernels: build them only if a run is selected.
        if (std::none_of(runs.begin(), runs.end(), [&](const auto& r) {
              return s.selected(linear_name(c, r.first, r.second));
            }))
          continue;
        setup_linear(c);
        for (const auto& r : runs) run_linear(s, ctx, c, r.first, r.second);
      }
  }
  gemm_destroy(ctx);
  passed += s.passed;
  failed += s.failed;
}

}  // namespace pagellm::cuda::test
