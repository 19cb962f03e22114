// A standalone probe for the FP8 batch-1 GEMV's ceiling (docs/PERF.md, "The FP8 GEMV's access
// pattern"), not part of the build. It measures, on Llama-3.1-8B's four projection shapes:
//   - stream_rows: the CUDA-core GEMV's access pattern alone (a warp streams R weight rows, each
//     lane 16 bytes at 16 lane + 512 u of each row, U loads a row in flight), with no arithmetic,
//     so the rate any kernel of that pattern can reach;
//   - mma_gemv: an e4m3 x e4m3 GEMV on FP8 tensor cores (mma.sync m16n8k32), the weights loaded
//     straight into A fragments (lane (g, t4) reads 16 bytes of rows g and g + 8; k is permuted
//     the same way for x), S warps of a block splitting k; checked against a host reference.
// qkv (25 MB) and o (17 MB) fit in the H200's 50 MB L2, so their repeated launches read partly
// from it; gate-up and down do not.
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o fp8_gemv_probe \
//     tests/device/fp8_gemv_probe.cu && ./fp8_gemv_probe
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                     \
  do {                                                                            \
    const cudaError_t e = (x);                                                    \
    if (e != cudaSuccess) {                                                       \
      std::printf("CUDA error %s at line %d\n", cudaGetErrorString(e), __LINE__); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

__device__ __forceinline__ void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// y[row] = w_scale[row] * x_scale * sum_k w[row, k] x[k]; block = S warps on 16 rows, warp q on
// bytes [q k / S, (q + 1) k / S) (k / S a multiple of 64). Per 64-byte step, lane (g, t4)'s 16
// bytes of row g (and g + 8) at 16 t4 are two MMAs' A words: bytes 0-7 the first, 8-15 the second.
template <int S, int U>
__global__ void __launch_bounds__(32 * S)
    mma_gemv(const uint8_t* __restrict__ w, const uint8_t* __restrict__ x,
             const float* __restrict__ w_scale, float x_scale, float* __restrict__ y, int k) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
  const int row0 = blockIdx.x * 16, per = k / S, kb = warp * per;
  const auto* ra = reinterpret_cast<const uint4*>(w + int64_t{row0 + g} * k + kb + 16 * t4);
  const auto* rb = reinterpret_cast<const uint4*>(w + int64_t{row0 + g + 8} * k + kb + 16 * t4);
  const auto* xs = reinterpret_cast<const uint4*>(x + kb + 16 * t4);
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  const int steps = per / 64;
  for (int s0 = 0; s0 < steps; s0 += U) {
    uint4 va[U], vb[U], vx[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool ok = s0 + u < steps;
      const uint4 zero = make_uint4(0, 0, 0, 0);
      va[u] = ok ? __ldcs(ra + (s0 + u) * 4) : zero;
      vb[u] = ok ? __ldcs(rb + (s0 + u) * 4) : zero;
      vx[u] = ok ? __ldg(xs + (s0 + u) * 4) : zero;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint32_t a0[4] = {va[u].x, vb[u].x, va[u].y, vb[u].y};
      const uint32_t a1[4] = {va[u].z, vb[u].z, va[u].w, vb[u].w};
      mma_e4m3(c, a0, vx[u].x, vx[u].y);
      mma_e4m3(c, a1, vx[u].z, vx[u].w);
    }
  }
  __shared__ float part[S][16];  // column 0 of each warp's accumulators
  if (t4 == 0) {
    part[warp][g] = c[0];
    part[warp][g + 8] = c[2];
  }
  __syncthreads();
  if (threadIdx.x < 16) {
    float sum = 0.f;
    for (int q = 0; q < S; ++q) sum += part[q][threadIdx.x];
    y[row0 + threadIdx.x] = sum * w_scale[row0 + threadIdx.x] * x_scale;
  }
}

// The CUDA-core GEMV's loads alone: W warps a block, R rows a warp, U loads a row in flight.
template <int R, int U, int W>
__global__ void __launch_bounds__(32 * W)
    stream_rows(const uint8_t* __restrict__ w, float* __restrict__ y, int k) {
  const int lane = threadIdx.x & 31, row0 = (blockIdx.x * W + (threadIdx.x >> 5)) * R;
  const int nv = k / 16;
  uint32_t fold = 0;
  for (int v0 = lane; v0 < nv; v0 += 32 * U) {
    uint4 wv[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const auto* row = reinterpret_cast<const uint4*>(w + int64_t{row0 + r} * k);
        wv[r][u] = v0 + 32 * u < nv ? __ldcs(row + v0 + 32 * u) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) fold ^= wv[r][u].x ^ wv[r][u].y ^ wv[r][u].z ^ wv[r][u].w;
  }
  if (fold == 0x12345678u) y[row0] = 1.f;  // keeps the loads
}

// Microseconds per launch of `launch` (20 launches a graph, `reps` graphs).
template <typename F>
float time_us(F launch, int reps = 50) {
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; ++i) launch(st);
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  CK(cudaGraphLaunch(exec, st));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, st));
  for (int r = 0; r < reps; ++r) CK(cudaGraphLaunch(exec, st));
  CK(cudaEventRecord(b, st));
  CK(cudaEventSynchronize(b));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  CK(cudaStreamDestroy(st));
  return ms * 1000.f / (reps * 20);
}

double copy_rate_gbs() {  // device-to-device copy, read + write
  const size_t bytes = size_t{1} << 30;
  void *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < 10; ++i) CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9;
}

float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 f;
  f.__x = code;
  return float(f);
}

uint8_t random_code() {  // any finite e4m3 code
  const uint8_t v = std::rand() & 0xff;
  return (v & 0x7f) == 0x7f ? 0x38 : v;
}

int main() {
  const double copy = copy_rate_gbs();
  std::printf("d2d copy (read+write) %.0f GB/s\n", copy);
  struct Shape {
    const char* name;
    int n, k;
  };
  for (const Shape sh : {Shape{"qkv", 6144, 4096}, Shape{"o", 4096, 4096},
                         Shape{"gate-up", 28672, 4096}, Shape{"down", 4096, 14336}}) {
    const int n = sh.n, k = sh.k;
    std::vector<uint8_t> hw(size_t(n) * k), hx(k);
    std::srand(1);
    for (auto& v : hw) v = random_code();
    for (auto& v : hx) v = random_code();
    std::vector<float> hs(n);
    for (int i = 0; i < n; ++i) hs[i] = 0.01f + 0.001f * (i % 7);
    uint8_t *w, *x;
    float *ws, *y;
    CK(cudaMalloc(&w, hw.size()));
    CK(cudaMalloc(&x, k));
    CK(cudaMalloc(&ws, n * sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemcpy(w, hw.data(), hw.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(x, hx.data(), k, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ws, hs.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    mma_gemv<4, 4><<<n / 16, 128>>>(w, x, ws, 0.5f, y, k);
    CK(cudaDeviceSynchronize());
    std::vector<float> hy(n);
    CK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0.0;  // |error| over the sum of |terms|, every 97th row
    for (int r = 0; r < n; r += 97) {
      double sum = 0.0, mag = 0.0;
      for (int j = 0; j < k; ++j) {
        const double t = double(e4m3_value(hw[size_t(r) * k + j])) * e4m3_value(hx[j]);
        sum += t;
        mag += std::fabs(t);
      }
      worst = std::fmax(worst, std::fabs(hy[r] - sum * hs[r] * 0.5) / (mag * hs[r] * 0.5));
    }
    std::printf("%-7s %5d x %-5d  mma check: max |err| / sum |terms| %.1e\n", sh.name, n, k, worst);
    const double bytes = double(n) * k;
    auto report = [&](const char* what, float us) {
      std::printf("  %-28s %7.2f us  %5.1f %% of copy\n", what, us,
                  bytes / (us * 1e-6) / 1e9 / copy * 100.0);
    };
    report("mma S=8 U=4", time_us([&](cudaStream_t st) {
             mma_gemv<8, 4><<<n / 16, 256, 0, st>>>(w, x, ws, 0.5f, y, k);
           }));
    report("mma S=16 U=4", time_us([&](cudaStream_t st) {
             mma_gemv<16, 4><<<n / 16, 512, 0, st>>>(w, x, ws, 0.5f, y, k);
           }));
    report("mma S=16 U=2", time_us([&](cudaStream_t st) {
             mma_gemv<16, 2><<<n / 16, 512, 0, st>>>(w, x, ws, 0.5f, y, k);
           }));
    report("mma S=32 U=2", time_us([&](cudaStream_t st) {
             mma_gemv<32, 2><<<n / 16, 1024, 0, st>>>(w, x, ws, 0.5f, y, k);
           }));
    report("stream R=4 U=4, 4 warps", time_us([&](cudaStream_t st) {
             stream_rows<4, 4, 4><<<n / 16, 128, 0, st>>>(w, y, k);
           }));
    report("stream R=2 U=4, 8 warps", time_us([&](cudaStream_t st) {
             stream_rows<2, 4, 8><<<n / 16, 256, 0, st>>>(w, y, k);
           }));
    report("stream R=2 U=8, 4 warps",
           time_us([&](cudaStream_t st) { stream_rows<2, 8, 4><<<n / 8, 128, 0, st>>>(w, y, k); }));
    report("stream R=1 U=16, 4 warps", time_us([&](cudaStream_t st) {
             stream_rows<1, 16, 4><<<n / 4, 128, 0, st>>>(w, y, k);
           }));
    report("stream R=8 U=2, 4 warps", time_us([&](cudaStream_t st) {
             stream_rows<8, 2, 4><<<n / 32, 128, 0, st>>>(w, y, k);
           }));
    CK(cudaFree(w));
    CK(cudaFree(x));
    CK(cudaFree(ws));
    CK(cudaFree(y));
  }
  return 0;
}
