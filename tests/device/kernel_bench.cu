// Kernel benchmarks for the device run: decode attention bandwidth against a device-to-device copy
// measured in the same process, tile (prefill) attention FLOP rate, and decode-shaped GEMM
// bandwidth. Inputs are random (never zeros); every timed buffer set is larger than L2.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda::test {
namespace {

#define BK(expr)                                                                         \
  do {                                                                                   \
    cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                            \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((h & 0xffff) / 32768.0f - 1.0f);
  }
}

void fill(void* p, size_t n, uint32_t seed) {
  fill_random_bf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  BK(cudaGetLastError());
}

// Median milliseconds of `reps` timed launches of fn (after 3 warm-ups).
template <typename Fn>
double time_ms(Fn fn, int reps = 20) {
  cudaEvent_t a, b;
  BK(cudaEventCreate(&a));
  BK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    BK(cudaEventRecord(a));
    fn();
    BK(cudaEventRecord(b));
    BK(cudaEventSynchronize(b));
    BK(cudaEventElapsedTime(&ms[i], a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t(2) << 30;
  void *a, *b;
  BK(cudaMalloc(&a, bytes));
  BK(cudaMalloc(&b, bytes));
  fill(a, bytes / 2, 7);
  const double ms =
      time_ms([&] { BK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); }, 10);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e6);
}

struct AttnBench {
  int batch, q_len, ctx, heads, kv_heads, head_dim, block_size;
  DType kv = DType::kBF16;  // the cache's dtype: bf16 or FP8
};

// Returns ms per call; fills bytes (KV read) and flops.
double bench_attention(const AttnBench& c, double* kv_bytes, double* flops, int* splits) {
  const int nb_per_seq = (c.ctx + c.block_size - 1) / c.block_size;
  const int num_blocks = c.batch * nb_per_seq;
  const size_t row = size_t(c.kv_heads) * c.head_dim;
  const size_t pool = size_t(num_blocks) * c.block_size * row;
  const int num_tokens = c.batch * c.q_len;
  void *q, *kc, *vc, *out;
  BK(cudaMalloc(&q, size_t(num_tokens) * c.heads * c.head_dim * 2));
  BK(cudaMalloc(&out, size_t(num_tokens) * c.heads * c.head_dim * 2));
  const size_t kv_elem = dtype_size(c.kv);
  BK(cudaMalloc(&kc, pool * kv_elem));
  BK(cudaMalloc(&vc, pool * kv_elem));
  fill(q, size_t(num_tokens) * c.heads * c.head_dim, 1);
  fill(kc, pool * kv_elem / 2, 2);  // FP8: random codes
  fill(vc, pool * kv_elem / 2, 3);
  std::vector<int32_t> qsl(c.batch + 1), lens(c.batch, c.ctx), table(size_t(c.batch) * nb_per_seq);
  for (int i = 0; i <= c.batch; ++i) qsl[i] = i * c.q_len;
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(5));  // scattered blocks, as in a real pool
  int32_t *d_qsl, *d_lens, *d_table;
  BK(cudaMalloc(&d_qsl, qsl.size() * 4));
  BK(cudaMalloc(&d_lens, lens.size() * 4));
  BK(cudaMalloc(&d_table, table.size() * 4));
  BK(cudaMemcpy(d_qsl, qsl.data(), qsl.size() * 4, cudaMemcpyHostToDevice));
  BK(cudaMemcpy(d_lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  BK(cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  AttentionParams p;
  p.dtype = DType::kBF16;
  p.kv_dtype = c.kv;
  float* scales = nullptr;
  if (is_fp8(c.kv)) {
    BK(cudaMalloc(&scales, 2 * sizeof(float)));
    const float one[2] = {0.01f, 0.01f};
    BK(cudaMemcpy(scales, one, sizeof one, cudaMemcpyHostToDevice));
    p.k_scale = scales;
    p.v_scale = scales + 1;
  }
  p.q = q;
  p.k_cache = kc;
  p.v_cache = vc;
  p.out = out;
  p.query_start_loc = d_qsl;
  p.seq_lens = d_lens;
  p.block_tables = d_table;
  p.num_seqs = c.batch;
  p.num_tokens = num_tokens;
  p.num_heads = c.heads;
  p.num_kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.block_size = c.block_size;
  p.max_blocks_per_seq = nb_per_seq;
  p.num_slots = int64_t(table.size()) * c.block_size;
  p.scale = 1.f / std::sqrt(float(c.head_dim));
  int num_sms = 0;
  BK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  AttentionPlanHost ph;
  BK(plan_attention(p, qsl.data(), lens.data(), num_sms, 0, &ph));
  int32_t *d_si = nullptr, *d_ti = nullptr;
  void* ws = nullptr;
  BK(cudaMalloc(&d_si, std::max<size_t>(4, ph.split_items.size() * 4)));
  BK(cudaMalloc(&d_ti, std::max<size_t>(4, ph.tile_items.size() * 4)));
  if (ph.workspace_bytes) BK(cudaMalloc(&ws, ph.workspace_bytes));
  unsigned* counters = nullptr;  // the split blocks' merge counters start at zero
  BK(cudaMalloc(&counters, std::max<size_t>(4, ph.split_counters * 4)));
  BK(cudaMemset(counters, 0, std::max<size_t>(4, ph.split_counters * 4)));
  BK(cudaMemcpy(d_si, ph.split_items.data(), ph.split_items.size() * 4, cudaMemcpyHostToDevice));
  BK(cudaMemcpy(d_ti, ph.tile_items.data(), ph.tile_items.size() * 4, cudaMemcpyHostToDevice));
  AttentionPlan plan{d_si,    int(ph.split_items.size() / 2), ph.num_splits,
                     d_ti,    int(ph.tile_items.size() / 2),  ph.tile_rows,
                     counters};
  const double ms = time_ms([&] { BK(run_attention(p, plan, ws, nullptr)); });
  *kv_bytes = 2.0 * c.batch * double(c.ctx) * row * double(kv_elem);
  // Causal: each query row attends to (ctx - q_len + i + 1) keys; QK and PV are 2·D flops per key.
  double keys = 0;
  for (int i = 0; i < c.q_len; ++i) keys += c.ctx - c.q_len + i + 1;
  *flops = 4.0 * c.batch * c.heads * c.head_dim * keys;
  *splits = ph.num_splits;
  for (void* ptr :
       {q, kc, vc, out, static_cast<void*>(d_qsl), static_cast<void*>(d_lens),
        static_cast<void*>(d_table), static_cast<void*>(d_si), static_cast<void*>(d_ti), ws,
        static_cast<void*>(counters), static_cast<void*>(scales)})
    if (ptr) cudaFree(ptr);
  return ms;
}

}  // namespace

// Prefill attention (tile kernels), causal, bf16: on Hopper the wgmma kernel, then mma.sync.
void prefill_attention_bench() {
  std::printf("%-52s %9s %10s\n", "prefill attention (tensor-core tiles)", "ms", "TFLOP/s");
  const AttnBench prefill[] = {
      {1, 8192, 8192, 32, 8, 128, 16}, {1, 4096, 4096, 32, 8, 128, 16},
      {4, 2048, 2048, 32, 8, 128, 16}, {1, 2048, 8192, 32, 8, 128, 16},
      {8, 1024, 1024, 32, 32, 64, 16}, {1, 4096, 4096, 32, 8, 64, 16},
      {2, 1024, 1024, 32, 8, 128, 16}, {1, 4096, 4096, 32, 8, 128, 16, DType::kF8E4M3},
  };
  for (const auto& c : prefill)
    for (bool wgmma : {true, false}) {       // on Hopper: the wgmma kernel, then mma.sync
      if (!wgmma && is_fp8(c.kv)) continue;  // FP8 caches always take the mma.sync kernel
      attention_set_prefill_wgmma(wgmma);
      double bytes, flops;
      int splits;
      const double ms = bench_attention(c, &bytes, &flops, &splits);
      attention_set_prefill_wgmma(true);
      char label[96];
      std::snprintf(label, sizeof label, "seqs=%d q=%d ctx=%d H=%d/%d D=%d%s %s", c.batch, c.q_len,
                    c.ctx, c.heads, c.kv_heads, c.head_dim, is_fp8(c.kv) ? " kv=e4m3" : "",
                    wgmma && !is_fp8(c.kv) ? "wgmma" : "mma.sync");
      std::printf("%-52s %9.3f %10.1f\n", label, ms, flops / (ms * 1e9));
    }
}

void bench_main() {
  std::printf("== benchmarks (bf16)\n");
  const double copy = copy_bandwidth_gbs();
  std::printf("d2d copy bandwidth (read+write): %.0f GB/s\n", copy);
  std::printf("%-52s %9s %10s %8s %9s\n", "decode attention (split-KV)", "ms", "KV GB/s", "of copy",
              "splits");
  const AttnBench decode[] = {
      {1, 1, 32768, 32, 8, 128, 16},  {1, 1, 131072, 32, 8, 128, 16},
      {16, 1, 4096, 32, 8, 128, 16},  {64, 1, 4096, 32, 8, 128, 16},
      {256, 1, 1024, 32, 8, 128, 16}, {128, 1, 8192, 32, 8, 128, 16},
      {64, 1, 4096, 32, 32, 128, 16}, {64, 1, 4096, 32, 4, 128, 16},
      {64, 1, 4096, 16, 16, 64, 16},  {64, 1, 4096, 32, 8, 128, 32},
      {64, 1, 4096, 32, 8, 128, 16, DType::kF8E4M3}, {1, 1, 131072, 32, 8, 128, 16, DType::kF8E4M3},
      {128, 1, 8192, 32, 8, 128, 16, DType::kF8E4M3}, {64, 1, 4096, 16, 16, 64, 16, DType::kF8E4M3},
  };
  // Tensor cores in both MMA layouts where the group allows keys on the rows (<= 8), then CUDA
  // cores.
  enum Path { kHeads, kKeys, kCores };
  for (const auto& c : decode)
    for (Path path : {kHeads, kKeys, kCores}) {
      const int group = c.heads / c.kv_heads;
      if (path != kHeads && group == 1) continue;  // MHA always runs on CUDA cores
      if (path == kKeys && group > 8) continue;
      attention_set_decode_tensor_cores(path != kCores);
      attention_set_decode_mma_layout(path == kKeys ? DecodeMmaLayout::kKeyRows
                                                    : DecodeMmaLayout::kHeadRows);
      double bytes, flops;
      int splits;
      const double ms = bench_attention(c, &bytes, &flops, &splits);
      attention_set_decode_tensor_cores(true);
      attention_set_decode_mma_layout(DecodeMmaLayout::kAuto);
      char label[96];
      std::snprintf(label, sizeof label, "batch=%d ctx=%d H=%d/%d D=%d bs=%d%s %s", c.batch, c.ctx,
                    c.heads, c.kv_heads, c.head_dim, c.block_size, is_fp8(c.kv) ? " kv=e4m3" : "",
                    group == 1       ? ""
                    : path == kHeads ? "tc"
                    : path == kKeys  ? "tc-keys"
                                     : "cores");
      const double gbs = bytes / (ms * 1e6);
      std::printf("%-52s %9.3f %10.0f %7.1f%% %9d\n", label, ms, gbs, 100.0 * gbs / copy, splits);
    }
  prefill_attention_bench();
  // Decode-shaped GEMMs of Llama-3.1-8B (m = batch): weight-read bandwidth. Weights rotate over
  // >= 512 MB of copies so that L2 (50 MB) cannot serve them.
  std::printf("%-52s %9s %10s %8s\n", "gemm bf16 (gemv for m<=8 / cuBLASLt)", "ms", "W GB/s",
              "TFLOP/s");
  cudaError_t err;
  GemmContext* ctx = gemm_create(32 << 20, &err);
  BK(err);
  struct G {
    int m, n, k;
  };
  for (G g : {G{1, 6144, 4096}, G{1, 4096, 4096}, G{1, 28672, 4096}, G{1, 4096, 14336},
              G{1, 128256, 4096}, G{8, 28672, 4096}, G{8, 4096, 14336}, G{64, 28672, 4096},
              G{4096, 4096, 4096}, G{8192, 14336, 4096}}) {
    const size_t wbytes = size_t(g.n) * g.k * 2;
    const int copies = int(std::max<size_t>(1, (size_t(512) << 20) / wbytes + 1));
    void *x, *y;
    std::vector<void*> ws(static_cast<size_t>(copies));
    BK(cudaMalloc(&x, size_t(g.m) * g.k * 2));
    BK(cudaMalloc(&y, size_t(g.m) * g.n * 2));
    fill(x, size_t(g.m) * g.k, 11);
    for (int c = 0; c < copies; ++c) {
      BK(cudaMalloc(&ws[size_t(c)], wbytes));
      fill(ws[size_t(c)], wbytes / 2, 12 + c);
    }
    for (bool use_gemv : {true, false}) {
      if (!use_gemv && g.m > 8) continue;
      gemm_set_use_gemv(ctx, use_gemv);
      int next = 0;
      const double ms = time_ms([&] {
        BK(gemm(ctx, {DType::kBF16, x, ws[size_t(next++ % copies)], y, g.m, g.n, g.k, false},
                nullptr));
      });
      char label[96];
      std::snprintf(label, sizeof label, "m=%d n=%d k=%d%s", g.m, g.n, g.k,
                    g.m > 8    ? ""
                    : use_gemv ? " gemv"
                               : " cuBLASLt");
      std::printf("%-52s %9.3f %10.0f %8.1f\n", label, ms, double(wbytes) / (ms * 1e6),
                  2.0 * g.m * g.n * g.k / (ms * 1e9));
    }
    gemm_set_use_gemv(ctx, true);
    cudaFree(x);
    cudaFree(y);
    for (void* w : ws) cudaFree(w);
  }
  gemm_destroy(ctx);
}

}  // namespace pagellm::cuda::test
