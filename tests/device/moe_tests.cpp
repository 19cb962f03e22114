// The mixture-of-experts kernels grouped on the device (backends/cuda/moe.h: moe_sort,
// moe_grouped_linear) against host references, and their benchmark:
//  - moe_sort: the groups (experts in use ascending, their first rows), slot_of_row / row_of_slot
//    inverse and each row inside its expert's range; uniform, skewed and single-expert routing,
//    1 to 1,024 experts, up to 40,000 slots;
//  - moe_grouped_linear through the runner's sequence (sort, gate/up with the SiLU-and-mul, down):
//    every slot's output against a float64 host sum over the same rounded inputs, within the
//    dtype's rounding; odd output counts, k not a multiple of the 64-element step, experts with
//    more rows than one pass holds, bf16 and f16;
//  - a CUDA graph replay gives the eager call's bits;
//  - the per-slot path of small batches (moe_linear's gate/up and down, moe_combine) against the
//    same reference summed per token;
//  - FP8 experts (e4m3 codes with a scale per row) through both paths, against the reference over
//    the dequantized weights;
//  - the benchmark (--moe-bench-only): Qwen3-30B-A3B and Mixtral-8x7B expert shapes, the grouped
//    kernels against the per-slot path (combine included) and a dense cuBLAS GEMM of the same FLOPs
//    and weight bytes, with the copy rate measured in the same process.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/moe.h"
#include "bench_util.h"
#include "fp8_test_util.h"

namespace pagellm::cuda::test {
namespace {

std::mt19937_64 g_rng(1818);

enum class Routing { kUniform, kSkewed, kOneExpert };

// ids [n, top_k]: distinct experts per token. kSkewed: every token picks experts 0 .. top_k - 1
// (each of them gets n rows); kOneExpert: top_k = 1 and every token picks the last expert.
std::vector<int32_t> route(Routing how, int n, int top_k, int E) {
  std::vector<int32_t> ids(size_t(n) * top_k);
  std::vector<int32_t> perm(static_cast<size_t>(E));
  for (int t = 0; t < n; ++t) {
    for (int e = 0; e < E; ++e) perm[size_t(e)] = e;
    if (how == Routing::kUniform)
      for (int j = 0; j < top_k; ++j)
        std::swap(perm[size_t(j)], perm[size_t(j) + g_rng() % size_t(E - j)]);
    for (int j = 0; j < top_k; ++j)
      ids[size_t(t) * top_k + j] = how == Routing::kOneExpert ? E - 1 : perm[size_t(j)];
  }
  return ids;
}

template <typename V>
void upload(DevMem& d, const V& v) {
  d.alloc(v.size() * sizeof(v[0]));
  CK(cudaMemcpy(d.ptr, v.data(), d.bytes, cudaMemcpyHostToDevice));
}

std::vector<int32_t> download_ints(const DevMem& d, size_t n) {
  std::vector<int32_t> v(n);
  CK(cudaMemcpy(v.data(), d.ptr, n * 4, cudaMemcpyDeviceToHost));
  return v;
}

struct Sorted {
  DevMem ids, slot_of_row, row_of_slot, groups;
};

// The routing uploaded and the sort's outputs allocated (before any graph capture).
void prepare_sort(Sorted& s, const std::vector<int32_t>& ids, int E) {
  upload(s.ids, ids);
  s.slot_of_row.alloc(ids.size() * 4), s.row_of_slot.alloc(ids.size() * 4);
  s.groups.alloc(size_t(moe_groups_size(E)) * 4);
}

void sort_on_device(Sorted& s, int num_slots, int E, cudaStream_t stream) {
  const MoeSortParams p{static_cast<int32_t*>(s.ids.ptr),
                        num_slots,
                        E,
                        static_cast<int32_t*>(s.slot_of_row.ptr),
                        static_cast<int32_t*>(s.row_of_slot.ptr),
                        static_cast<int32_t*>(s.groups.ptr)};
  CK(moe_sort(p, stream));
}

// "" when the device's sort of ids is a valid grouping, else what is wrong.
std::string check_sort(const std::vector<int32_t>& ids, int E, const Sorted& s) {
  const size_t slots = ids.size();
  const std::vector<int32_t> sor = download_ints(s.slot_of_row, slots);
  const std::vector<int32_t> ros = download_ints(s.row_of_slot, slots);
  const std::vector<int32_t> g = download_ints(s.groups, size_t(moe_groups_size(E)));
  std::vector<int> count(size_t(E), 0);
  for (int32_t e : ids) ++count[size_t(e)];
  int used = 0, begin = 0;
  for (int e = 0; e < E; ++e) {
    if (count[size_t(e)] == 0) continue;
    if (g[size_t(1 + used)] != e || g[size_t(1 + E + used)] != begin)
      return "group " + std::to_string(used) + " is not expert " + std::to_string(e);
    for (int r = begin; r < begin + count[size_t(e)]; ++r) {
      const int32_t slot = sor[size_t(r)];
      if (slot < 0 || size_t(slot) >= slots || ids[size_t(slot)] != e || ros[size_t(slot)] != r)
        return "row " + std::to_string(r) + " holds slot " + std::to_string(slot);
    }
    ++used, begin += count[size_t(e)];
  }
  if (g[0] != used || g[size_t(1 + E + used)] != int(slots)) return "wrong group count or end";
  return "";
}

void sort_suite(Suite& suite) {
  struct Case {
    Routing how;
    int n, top_k, E;
  };
  const Case cases[] = {{Routing::kUniform, 1, 8, 128},     {Routing::kUniform, 64, 8, 128},
                        {Routing::kUniform, 5000, 8, 128},  {Routing::kUniform, 333, 2, 8},
                        {Routing::kUniform, 40, 16, 1024},  {Routing::kSkewed, 700, 4, 64},
                        {Routing::kOneExpert, 37, 1, 1},    {Routing::kUniform, 0, 8, 128},
                        {Routing::kUniform, 10000, 4, 1000}};
  for (const Case& c : cases) {
    const std::string name = "moe_sort n=" + std::to_string(c.n) +
                             " top_k=" + std::to_string(c.top_k) + " E=" + std::to_string(c.E) +
                             (c.how == Routing::kSkewed ? " skewed" : "");
    if (!suite.selected(name)) continue;
    const std::vector<int32_t> ids = route(c.how, c.n, c.top_k, c.E);
    Sorted s;
    prepare_sort(s, ids, c.E);
    sort_on_device(s, int(ids.size()), c.E, nullptr);
    CK(cudaDeviceSynchronize());
    const std::string err = check_sort(ids, c.E, s);
    suite.report(name, err.empty(), err);
  }
}

struct Shape {
  int E, top_k, hidden, inter;
};

// The experts' weights and a batch's activations, as the dtype's values.
struct MoeCase {
  DType t;
  Shape s;
  int n;
  std::vector<int32_t> ids;
  std::vector<float> x, gate_up, down;  // [n, hidden], [E, 2 * inter, hidden], [E, hidden, inter]
  std::vector<float> weights;           // [n, top_k] routing weights
  // FP8 experts: the weights' e4m3 codes and per-row scales (gate_up / down then hold the
  // dequantized values, the reference's weights).
  bool fp8 = false;
  std::vector<uint8_t> gate_up_q, down_q;
  std::vector<float> gate_up_s, down_s;
};

// w [rows, cols] quantized per row to e4m3 codes q and scales s (amax / 448); w becomes the
// dequantized weights.
void quantize_rows(std::vector<float>& w, int64_t rows, int64_t cols, std::vector<uint8_t>& q,
                   std::vector<float>& s) {
  q.resize(w.size()), s.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[size_t(r * cols + c)]));
    s[size_t(r)] = std::max(amax, 1e-12f) / 448.f;
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      q[i] = f32_to_fp8(w[i] / s[size_t(r)], Fp8Format::kE4M3);
      w[i] = fp8_to_f32(q[i], Fp8Format::kE4M3) * s[size_t(r)];
    }
  }
}

std::vector<float> random_values(DType t, size_t count, float bound) {
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(count);
  for (float& f : v) f = round_to(t, d(g_rng));
  return v;
}

// Slot s's down-projection output [hidden] by the host, in float64 over the same rounded inputs,
// with the kernel's roundings of the gate, up, SiLU and activation.
std::vector<double> host_slot(const MoeCase& c, int slot) {
  const Shape& s = c.s;
  const int e = c.ids[size_t(slot)], tok = slot / s.top_k;
  const float* x = &c.x[size_t(tok) * s.hidden];
  std::vector<float> act(size_t(s.inter));
  for (int j = 0; j < s.inter; ++j) {
    const float* g = &c.gate_up[(size_t(e) * 2 * s.inter + j) * s.hidden];
    const float* u = g + size_t(s.inter) * s.hidden;
    double gs = 0, us = 0;
    for (int k = 0; k < s.hidden; ++k) gs += double(g[k]) * x[k], us += double(u[k]) * x[k];
    const float gr = round_to(c.t, float(gs)), ur = round_to(c.t, float(us));
    act[size_t(j)] = round_to(c.t, round_to(c.t, gr / (1.f + std::exp(-gr))) * ur);
  }
  std::vector<double> out(size_t(s.hidden));
  for (int h = 0; h < s.hidden; ++h) {
    const float* d = &c.down[(size_t(e) * s.hidden + h) * s.inter];
    double acc = 0;
    for (int j = 0; j < s.inter; ++j) acc += double(d[j]) * act[size_t(j)];
    out[size_t(h)] = acc;
  }
  return out;
}

struct DeviceMoe {
  DevMem x, gate_up, down, act, out, weights, combined;
  DevMem gate_up_s, down_s;  // FP8 experts' scales
  Sorted sorted;
};

// Device buffers of one grouped pass: x [n, hidden] in, act [slots, inter] between, out [slots,
// hidden] in sorted order; the sort's slot_of_row and groups.
struct GroupedBuffers {
  DType t;
  const void *x, *gate_up, *down;
  void *act, *out;
  const int32_t *slot_of_row, *groups;
  const float *gate_up_scale = nullptr, *down_scale = nullptr;  // FP8 experts
};

// The runner's projections after the sort: gate/up (+ SiLU-and-mul), then down.
void grouped_projections(const Shape& s, int slots, const GroupedBuffers& g, cudaStream_t stream) {
  MoeGroupedLinearParams up;
  up.dtype = g.t, up.x = g.x, up.slot_of_row = g.slot_of_row, up.x_row_div = s.top_k;
  up.gated = true, up.w = g.gate_up, up.w_scale = g.gate_up_scale, up.groups = g.groups;
  up.num_experts = s.E;
  up.num_rows = slots, up.max_groups = std::min(s.E, slots), up.y = g.act;
  up.out_features = s.inter, up.in_features = s.hidden;
  CK(moe_grouped_linear(up, stream));
  MoeGroupedLinearParams down = up;
  down.x = g.act, down.slot_of_row = nullptr, down.x_row_div = 1, down.gated = false;
  down.w = g.down, down.w_scale = g.down_scale, down.y = g.out;
  down.out_features = s.hidden, down.in_features = s.inter;
  CK(moe_grouped_linear(down, stream));
}

// The runner's sequence: sort, gate/up (+ SiLU-and-mul), down; out rows in sorted order.
void run_grouped(const MoeCase& c, DeviceMoe& d, cudaStream_t stream) {
  const int slots = c.n * c.s.top_k;
  sort_on_device(d.sorted, slots, c.s.E, stream);
  grouped_projections(
      c.s, slots,
      {c.t, d.x.ptr, d.gate_up.ptr, d.down.ptr, d.act.ptr, d.out.ptr,
       static_cast<int32_t*>(d.sorted.slot_of_row.ptr), static_cast<int32_t*>(d.sorted.groups.ptr),
       c.fp8 ? static_cast<float*>(d.gate_up_s.ptr) : nullptr,
       c.fp8 ? static_cast<float*>(d.down_s.ptr) : nullptr},
      stream);
}

void upload_case(const MoeCase& c, DeviceMoe& d) {
  upload(d.x, encode(c.t, c.x));
  if (c.fp8) {
    upload(d.gate_up, c.gate_up_q), upload(d.gate_up_s, c.gate_up_s);
    upload(d.down, c.down_q), upload(d.down_s, c.down_s);
  } else {
    upload(d.gate_up, encode(c.t, c.gate_up));
    upload(d.down, encode(c.t, c.down));
  }
  const size_t slots = size_t(c.n) * c.s.top_k;
  d.act.alloc(slots * c.s.inter * dsize(c.t));
  d.out.alloc(slots * c.s.hidden * dsize(c.t));
  prepare_sort(d.sorted, c.ids, c.s.E);
  upload(d.weights, c.weights);
  d.combined.alloc(size_t(c.n) * c.s.hidden * dsize(c.t));
}

// Device buffers of the per-slot path: the routing, and combined [n, hidden] out.
struct PerSlotBuffers {
  DType t;
  const void *x, *gate_up, *down;
  void *act, *out, *combined;
  const int32_t* ids;
  const float* weights;
  const float *gate_up_scale = nullptr, *down_scale = nullptr;  // FP8 experts
};

// The per-slot path of small batches: moe_linear's gate/up and down, then moe_combine into
// combined (slot rows in slot order).
void per_slot_path(const Shape& s, int n, const PerSlotBuffers& b, cudaStream_t stream) {
  MoeLinearParams up;
  up.dtype = b.t, up.x = b.x, up.x_row_div = s.top_k, up.gated = true, up.w = b.gate_up;
  up.ids = b.ids, up.y = b.act, up.num_slots = n * s.top_k, up.w_scale = b.gate_up_scale;
  up.out_features = s.inter, up.in_features = s.hidden;
  CK(moe_linear(up, stream));
  MoeLinearParams down = up;
  down.x = b.act, down.x_row_div = 1, down.gated = false, down.w = b.down;
  down.w_scale = b.down_scale;
  down.y = b.out, down.out_features = s.hidden, down.in_features = s.inter;
  CK(moe_linear(down, stream));
  MoeCombineParams sum;
  sum.dtype = b.t, sum.y = b.out, sum.weights = b.weights, sum.out = b.combined;
  sum.num_tokens = n, sum.top_k = s.top_k, sum.hidden = s.hidden;
  CK(moe_combine(sum, stream));
}

void run_per_slot(const MoeCase& c, DeviceMoe& d, cudaStream_t stream) {
  per_slot_path(c.s, c.n,
                {c.t, d.x.ptr, d.gate_up.ptr, d.down.ptr, d.act.ptr, d.out.ptr, d.combined.ptr,
                 static_cast<int32_t*>(d.sorted.ids.ptr), static_cast<float*>(d.weights.ptr),
                 c.fp8 ? static_cast<float*>(d.gate_up_s.ptr) : nullptr,
                 c.fp8 ? static_cast<float*>(d.down_s.ptr) : nullptr},
                stream);
}

// The worst error of the per-slot path's combined rows against the host's, in units of the
// tolerance: each slot's output rounded to the dtype, weighted and summed in slot order.
double per_slot_error(const MoeCase& c, DeviceMoe& d, double ulp) {
  const Shape& s = c.s;
  run_per_slot(c, d, nullptr);
  const std::vector<float> got = download(d.combined, c.t, size_t(c.n) * s.hidden);
  double worst = 0;
  for (int tok = 0; tok < c.n; ++tok) {
    std::vector<double> ref(size_t(s.hidden), 0.0);
    double row_max = 1e-6;
    for (int j = 0; j < s.top_k; ++j) {
      const std::vector<double> y = host_slot(c, tok * s.top_k + j);
      const double w = c.weights[size_t(tok) * s.top_k + j];
      for (int h = 0; h < s.hidden; ++h) {
        ref[size_t(h)] += w * round_to(c.t, float(y[size_t(h)]));
        row_max = std::max(row_max, std::fabs(y[size_t(h)]));
      }
    }
    for (int h = 0; h < s.hidden; ++h)
      worst = std::max(
          worst, std::fabs(got[size_t(tok) * s.hidden + h] - ref[size_t(h)]) / (3 * ulp * row_max));
  }
  return worst;
}

// The down outputs [slots, hidden] in slot order.
std::vector<float> by_slot(const DeviceMoe& d, DType t, const MoeCase& c) {
  const size_t slots = size_t(c.n) * c.s.top_k, hidden = size_t(c.s.hidden);
  const std::vector<float> out = download(d.out, t, slots * hidden);
  const std::vector<int32_t> ros = download_ints(d.sorted.row_of_slot, slots);
  std::vector<float> v(slots * hidden);
  for (size_t slot = 0; slot < slots; ++slot)
    std::copy_n(&out[size_t(ros[slot]) * hidden], hidden, &v[slot * hidden]);
  return v;
}

void linear_case(Suite& suite, DType t, Shape s, int n, Routing how, bool fp8 = false) {
  const std::string name = std::string("moe_grouped ") + dname(t) + (fp8 ? " fp8 experts" : "") +
                           " E=" + std::to_string(s.E) + " top_k=" + std::to_string(s.top_k) +
                           " hidden=" + std::to_string(s.hidden) +
                           " inter=" + std::to_string(s.inter) + " n=" + std::to_string(n) +
                           (how == Routing::kSkewed ? " skewed" : "");
  if (!suite.selected(name)) return;
  MoeCase c{t, s, n, route(how, n, s.top_k, s.E), {}, {}, {}, {}, fp8, {}, {}, {}, {}};
  c.x = random_values(t, size_t(n) * s.hidden, 1.f);
  c.gate_up = random_values(t, size_t(s.E) * 2 * s.inter * s.hidden, 1.f / std::sqrt(s.hidden));
  c.down = random_values(t, size_t(s.E) * s.hidden * s.inter, 1.f / std::sqrt(s.inter));
  if (fp8) {
    quantize_rows(c.gate_up, int64_t(s.E) * 2 * s.inter, s.hidden, c.gate_up_q, c.gate_up_s);
    quantize_rows(c.down, int64_t(s.E) * s.hidden, s.inter, c.down_q, c.down_s);
  }
  c.weights = random_values(DType::kF32, size_t(n) * s.top_k, 1.f);
  for (float& w : c.weights) w = std::fabs(w) / float(s.top_k);
  DeviceMoe d;
  upload_case(c, d);
  run_grouped(c, d, nullptr);
  CK(cudaDeviceSynchronize());
  const std::vector<float> out = by_slot(d, t, c);
  // Within two units of the dtype's last place (the fp32 sums' order against float64 may flip a
  // rounding of the gate or up value), relative to the output row's largest value.
  const double ulp = t == DType::kBF16 ? 1.0 / 128 : 1.0 / 1024;
  double worst = 0;
  for (int slot = 0; slot < n * s.top_k; ++slot) {
    const std::vector<double> ref = host_slot(c, slot);
    double row_max = 1e-6;
    for (double v : ref) row_max = std::max(row_max, std::fabs(v));
    for (int h = 0; h < s.hidden; ++h) {
      const double got = out[size_t(slot) * s.hidden + h];
      worst = std::max(worst, std::fabs(got - ref[size_t(h)]) / (2 * ulp * row_max));
    }
  }
  // A graph replay gives every slot the eager call's bits (the rows' order within an expert may
  // differ between calls: the sort places them with atomics).
  const std::vector<float> eager = by_slot(d, t, c);
  CK(cudaMemset(d.out.ptr, 0, d.out.bytes));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  run_grouped(c, d, stream);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, stream));
  CK(cudaStreamSynchronize(stream));
  const std::vector<float> replay = by_slot(d, t, c);
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(stream));
  const bool same = std::memcmp(eager.data(), replay.data(), eager.size() * 4) == 0;
  const double per_slot = per_slot_error(c, d, ulp);
  char detail[128];
  std::snprintf(detail, sizeof detail, "worst %.2f of the tolerance; per-slot + combine %.2f%s",
                worst, per_slot, same ? "" : "; graph replay differs");
  suite.report(name, worst <= 1.0 && per_slot <= 1.0 && same, detail);
}

void linear_suite(Suite& suite) {
  for (DType t : {DType::kBF16, DType::kF16}) {
    linear_case(suite, t, {8, 2, 64, 32}, 5, Routing::kUniform);
    linear_case(suite, t, {8, 3, 64, 32}, 27, Routing::kUniform);     // the runner check's tiny MoE
    linear_case(suite, t, {16, 4, 136, 40}, 9, Routing::kUniform);    // k not a multiple of 64
    linear_case(suite, t, {6, 2, 72, 24}, 50, Routing::kSkewed);  // part tiles; 50 rows / expert
    linear_case(suite, t, {64, 8, 256, 96}, 1, Routing::kUniform);    // batch 1
    linear_case(suite, t, {64, 8, 256, 96}, 64, Routing::kUniform);   // a decode batch
    linear_case(suite, t, {4, 1, 128, 48}, 40, Routing::kOneExpert);  // one expert, three passes
  }
  linear_case(suite, DType::kBF16, {16, 8, 2048, 768}, 4, Routing::kUniform);  // Qwen3-30B-A3B rows
  // FP8 experts (e4m3 codes, a scale per row): k a multiple of 16.
  for (DType t : {DType::kBF16, DType::kF16}) {
    linear_case(suite, t, {8, 2, 64, 32}, 5, Routing::kUniform, true);
    linear_case(suite, t, {6, 2, 80, 48}, 50, Routing::kSkewed, true);  // part tiles and steps
    linear_case(suite, t, {64, 8, 256, 96}, 1, Routing::kUniform, true);
    linear_case(suite, t, {64, 8, 256, 96}, 64, Routing::kUniform, true);
  }
  linear_case(suite, DType::kBF16, {16, 8, 2048, 768}, 4, Routing::kUniform, true);
}

// ---- benchmark --------------------------------------------------------------------------------

constexpr int kRoutings = 20;  // one per call of a timed graph: calls share few experts' weights

struct BenchMoe {
  Shape s;
  int n;
  DevMem x, gate_up, down, act, out, ids, slot_of_row, row_of_slot, groups, weights, combined;
  double needed_bytes = 0;  // mean over the routings: the experts in use, their three matrices
  int mean_used = 0;
  bool fp8 = false;                // time the FP8 experts below instead
  DevMem gate_up8, down8, scale8;  // e4m3 1.0 everywhere, scales 0.01
};

void bench_setup(BenchMoe& b) {
  const Shape& s = b.s;
  const size_t slots = size_t(b.n) * s.top_k, esz = 2;
  b.x.alloc(size_t(b.n) * s.hidden * esz);
  b.gate_up.alloc(size_t(s.E) * 2 * s.inter * s.hidden * esz);
  b.down.alloc(size_t(s.E) * s.hidden * s.inter * esz);
  fill_random(b.x.ptr, int64_t(b.n) * s.hidden, 3, 1.0);
  fill_random(b.gate_up.ptr, int64_t(s.E) * 2 * s.inter * s.hidden, 4, 0.02);
  fill_random(b.down.ptr, int64_t(s.E) * s.hidden * s.inter, 5, 0.02);
  b.gate_up8.alloc(size_t(s.E) * 2 * s.inter * s.hidden);
  b.down8.alloc(size_t(s.E) * s.hidden * s.inter);
  CK(cudaMemset(b.gate_up8.ptr, 0x38, b.gate_up8.bytes));
  CK(cudaMemset(b.down8.ptr, 0x38, b.down8.bytes));
  upload(b.scale8, std::vector<float>(size_t(s.E) * std::max(2 * s.inter, s.hidden), 0.01f));
  b.act.alloc(slots * s.inter * esz);
  b.out.alloc(slots * s.hidden * esz);
  upload(b.weights, std::vector<float>(slots, 1.f / float(s.top_k)));
  b.combined.alloc(size_t(b.n) * s.hidden * esz);
  std::vector<int32_t> all;
  double used_sum = 0;
  for (int i = 0; i < kRoutings; ++i) {
    const std::vector<int32_t> ids = route(Routing::kUniform, b.n, s.top_k, s.E);
    std::vector<bool> used(size_t(s.E), false);
    for (int32_t e : ids) used[size_t(e)] = true;
    used_sum += double(std::count(used.begin(), used.end(), true));
    all.insert(all.end(), ids.begin(), ids.end());
  }
  upload(b.ids, all);
  b.slot_of_row.alloc(slots * 4), b.row_of_slot.alloc(slots * 4);
  b.groups.alloc(size_t(moe_groups_size(s.E)) * 4);
  const double used = used_sum / kRoutings;
  b.mean_used = int(std::lround(used));
  b.needed_bytes = used * 3.0 * s.inter * s.hidden * esz;
}

void bench_grouped(BenchMoe& b, int call, cudaStream_t stream) {
  const Shape& s = b.s;
  const int slots = b.n * s.top_k;
  const int32_t* ids = static_cast<int32_t*>(b.ids.ptr) + size_t(call % kRoutings) * slots;
  auto* sor = static_cast<int32_t*>(b.slot_of_row.ptr);
  auto* groups = static_cast<int32_t*>(b.groups.ptr);
  CK(moe_sort({ids, slots, s.E, sor, static_cast<int32_t*>(b.row_of_slot.ptr), groups}, stream));
  const float* scale = b.fp8 ? static_cast<float*>(b.scale8.ptr) : nullptr;
  grouped_projections(
      s, slots,
      {DType::kBF16, b.x.ptr, b.fp8 ? b.gate_up8.ptr : b.gate_up.ptr,
       b.fp8 ? b.down8.ptr : b.down.ptr, b.act.ptr, b.out.ptr, sor, groups, scale, scale},
      stream);
  MoeCombineParams sum;
  sum.y = b.out.ptr, sum.y_rows = static_cast<int32_t*>(b.row_of_slot.ptr);
  sum.weights = static_cast<float*>(b.weights.ptr), sum.out = b.combined.ptr, sum.num_tokens = b.n;
  sum.top_k = s.top_k, sum.hidden = s.hidden;
  CK(moe_combine(sum, stream));
}

void bench_per_slot(BenchMoe& b, int call, cudaStream_t stream) {
  const int slots = b.n * b.s.top_k;
  const float* scale = b.fp8 ? static_cast<float*>(b.scale8.ptr) : nullptr;
  per_slot_path(b.s, b.n,
                {DType::kBF16, b.x.ptr, b.fp8 ? b.gate_up8.ptr : b.gate_up.ptr,
                 b.fp8 ? b.down8.ptr : b.down.ptr, b.act.ptr, b.out.ptr, b.combined.ptr,
                 static_cast<int32_t*>(b.ids.ptr) + size_t(call % kRoutings) * slots,
                 static_cast<float*>(b.weights.ptr), scale, scale},
                stream);
}

// The same FLOPs and weight bytes as one dense GEMM pair: m = the mean rows per expert in use,
// over the used experts' gate/up rows (as one [used * 2 * inter, hidden] matrix) and down rows.
double dense_ms(GemmContext* ctx, BenchMoe& b, DevMem& xd, DevMem& yd) {
  const Shape& s = b.s;
  const int m = std::max(1, (b.n * s.top_k + b.mean_used - 1) / b.mean_used);
  const int up_rows = b.mean_used * 2 * s.inter, down_rows = b.mean_used * s.hidden;
  xd.alloc(size_t(m) * std::max(s.hidden, s.inter) * 2);
  yd.alloc(size_t(m) * std::max(up_rows, down_rows) * 2);
  fill_random(xd.ptr, int64_t(m) * std::max(s.hidden, s.inter), 6, 1.0);
  return time_graph_ms([&](cudaStream_t stream) {
    CK(gemm(ctx, {DType::kBF16, xd.ptr, b.gate_up.ptr, yd.ptr, m, up_rows, s.hidden, false},
            stream));
    CK(gemm(ctx, {DType::kBF16, xd.ptr, b.down.ptr, yd.ptr, m, down_rows, s.inter, false}, stream));
  });
}

}  // namespace

void moe_bench() {
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  CK(err);
  const double copy = copy_gbs();
  std::printf(
      "\nMoE experts (gate/up, down, combine), bf16, graph-timed (20 calls, each routing drawn "
      "anew); copy %.0f GB/s\n",
      copy);
  std::printf("%-14s %5s %6s %12s %12s %12s %9s %11s %12s %12s\n", "shape", "n", "used",
              "grouped us", "per-slot us", "dense us", "% copy", "dense/grp", "fp8 grp us",
              "fp8 slot us");
  const struct {
    const char* name;
    Shape s;
  } shapes[] = {{"qwen3-30b-a3b", {128, 8, 2048, 768}}, {"mixtral-8x7b", {8, 2, 4096, 14336}}};
  for (const auto& sh : shapes) {
    for (int n : {1, 4, 16, 64, 256, 1024}) {
      BenchMoe b;
      b.s = sh.s, b.n = n;
      bench_setup(b);
      int call = 0;
      const double grouped = time_graph_ms([&](cudaStream_t st) { bench_grouped(b, call++, st); });
      call = 0;
      const double slot = time_graph_ms([&](cudaStream_t st) { bench_per_slot(b, call++, st); });
      DevMem xd, yd;
      const double dense = dense_ms(ctx, b, xd, yd);
      b.fp8 = true;  // the same routings with FP8 experts
      call = 0;
      const double grouped8 = time_graph_ms([&](cudaStream_t st) { bench_grouped(b, call++, st); });
      call = 0;
      const double slot8 = time_graph_ms([&](cudaStream_t st) { bench_per_slot(b, call++, st); });
      std::printf("%-14s %5d %6d %12.1f %12.1f %12.1f %8.1f%% %10.2fx %12.1f %12.1f\n", sh.name, n,
                  b.mean_used, grouped * 1e3, slot * 1e3, dense * 1e3,
                  100.0 * b.needed_bytes / (grouped * 1e6) / copy, dense / grouped, grouped8 * 1e3,
                  slot8 * 1e3);
    }
  }
  gemm_destroy(ctx);
}

void moe_suite(const std::string& filter, int& passed, int& failed) {
  std::printf("MoE grouped kernels:\n");
  Suite suite{filter};
  sort_suite(suite);
  linear_suite(suite);
  passed += suite.passed, failed += suite.failed;
}

}  // namespace pagellm::cuda::test
