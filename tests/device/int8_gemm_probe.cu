// A standalone probe for W8A8-INT8 prefill GEMMs (issue 12), not part of the build. On
// Llama-3.1-8B's projections at m = 256 .. 8,192 it asks cuBLASLt which int8 GEMMs it has and
// times them beside bf16 and FP8 in the same process (CUDA graphs of 10 calls, median of 5):
//   - bf16 -> bf16 (the baseline), FP8 e4m3 with outer-vector scales -> bf16 (the FP8 path);
//   - int8 -> int32 sums (today's W8A8 path), and its two extra kernels' bytes;
//   - int8 with fp32 scaling and an int8, fp32 or bf16 D, and with per-row alpha vectors
//     (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO) or outer-vector scales: which of them
//     cuBLASLt accepts ("no algo" where it has none).
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -o int8_gemm_probe \
//     tests/device/int8_gemm_probe.cu -lcublasLt && ./int8_gemm_probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(expr)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error %s at line %d\n", cudaGetErrorString(e_), __LINE__); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

cublasLtHandle_t g_lt;
void* g_ws;
constexpr size_t kWsBytes = size_t(64) << 20;

struct Case {
  const char* name;
  cudaDataType_t ab, d;
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int mode;  // 0 plain, 1 outer-vector scales, 2 alpha device vector
};

// Milliseconds per call of f, graph-timed.
template <typename F>
double time_graph(F f) {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  f(s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 10; ++i) f(s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / 10);
  }
  std::sort(ms.begin(), ms.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return ms[2];
}

// -1: cuBLASLt has no algorithm (or refused the descriptor); else ms per call.
double run_case(const Case& c, int m, int n, int k, void* w, void* x, void* y, float* wscale,
                float* xscale) {
  cublasLtMatmulDesc_t op;
  if (cublasLtMatmulDescCreate(&op, c.compute, c.scale) != CUBLAS_STATUS_SUCCESS) return -1;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (c.mode == 1) {
    const int32_t v = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &v, sizeof v) ||
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &v, sizeof v))
      return -1;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &wscale,
                                   sizeof wscale);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xscale,
                                   sizeof xscale);
  } else if (c.mode == 2) {
    const cublasLtPointerMode_t pm = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO;
    if (cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &pm, sizeof pm))
      return -1;
  }
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, c.ab, k, n, k);
  cublasLtMatrixLayoutCreate(&lb, c.ab, k, m, k);
  cublasLtMatrixLayoutCreate(&ld, c.d, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWsBytes,
                                       sizeof kWsBytes);
  cublasLtMatmulHeuristicResult_t res[8];
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(g_lt, op, la, lb, ld, ld, pref, 8, res, &found);
  double best = -1;
  if (hs == CUBLAS_STATUS_SUCCESS && found > 0) {
    const float one_f = 1.f, zero_f = 0.f;
    const int32_t one_i = 1, zero_i = 0;
    const void* alpha = c.scale == CUDA_R_32I ? static_cast<const void*>(&one_i) : &one_f;
    const void* beta = c.scale == CUDA_R_32I ? static_cast<const void*>(&zero_i) : &zero_f;
    if (c.mode == 2) alpha = wscale;  // one alpha per row of D (an output feature)
    for (int i = 0; i < std::min(found, 4); ++i) {
      bool ok = true;
      const double ms = time_graph([&](cudaStream_t s) {
        if (cublasLtMatmul(g_lt, op, alpha, w, la, x, lb, beta, y, ld, y, ld, &res[i].algo, g_ws,
                           kWsBytes, s) != CUBLAS_STATUS_SUCCESS)
          ok = false;
      });
      if (ok && (best < 0 || ms < best)) best = ms;
    }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  return best;
}

}  // namespace

int main() {
  CK(cudaSetDevice(0));
  if (cublasLtCreate(&g_lt) != CUBLAS_STATUS_SUCCESS) return 2;
  CK(cudaMalloc(&g_ws, kWsBytes));
  const int kMaxM = 8192, kMaxK = 14336, kMaxN = 28672;
  void *w, *x, *y;
  float *ws, *xs;
  CK(cudaMalloc(&w, size_t(kMaxN) * 4096 * 2 > size_t(4096) * kMaxK * 2
                        ? size_t(kMaxN) * 4096 * 2
                        : size_t(4096) * kMaxK * 2));
  CK(cudaMalloc(&x, size_t(kMaxM) * kMaxK * 2));
  CK(cudaMalloc(&y, size_t(kMaxM) * kMaxN * 4));
  CK(cudaMalloc(&ws, kMaxN * 4));
  CK(cudaMalloc(&xs, kMaxM * 4));
  // Small values in every dtype's bytes: 0x01 bytes are int8 1, e4m3 ~0.002, bf16 ~2.4e-38.
  CK(cudaMemset(w, 1, size_t(kMaxN) * 4096 * 2));
  CK(cudaMemset(x, 1, size_t(kMaxM) * kMaxK * 2));
  std::vector<float> ones(kMaxN, 1e-3f);
  CK(cudaMemcpy(ws, ones.data(), kMaxN * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(xs, ones.data(), kMaxM * 4, cudaMemcpyHostToDevice));
  const Case cases[] = {
      {"bf16->bf16", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 0},
      {"e4m3->bf16 outer-vec", CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F, 1},
      {"int8->int32", CUDA_R_8I, CUDA_R_32I, CUBLAS_COMPUTE_32I, CUDA_R_32I, 0},
      {"int8->int8 f32 scale", CUDA_R_8I, CUDA_R_8I, CUBLAS_COMPUTE_32I, CUDA_R_32F, 0},
      {"int8->f32 f32 scale", CUDA_R_8I, CUDA_R_32F, CUBLAS_COMPUTE_32I, CUDA_R_32F, 0},
      {"int8->bf16 f32 scale", CUDA_R_8I, CUDA_R_16BF, CUBLAS_COMPUTE_32I, CUDA_R_32F, 0},
      {"int8->bf16 outer-vec", CUDA_R_8I, CUDA_R_16BF, CUBLAS_COMPUTE_32I, CUDA_R_32F, 1},
      {"int8->f32 alpha-vec", CUDA_R_8I, CUDA_R_32F, CUBLAS_COMPUTE_32I, CUDA_R_32F, 2},
      {"int8->bf16 alpha-vec", CUDA_R_8I, CUDA_R_16BF, CUBLAS_COMPUTE_32I, CUDA_R_32F, 2},
      {"int8->int8 alpha-vec", CUDA_R_8I, CUDA_R_8I, CUBLAS_COMPUTE_32I, CUDA_R_32F, 2},
  };
  struct Shape {
    const char* name;
    int n, k;
  } shapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gu", 28672, 4096}, {"down", 4096, 14336}};
  std::printf("%-6s %5s %-24s %9s %9s\n", "shape", "m", "case", "us", "TOP/s");
  for (const Shape& sh : shapes)
    for (int m : {256, 1024, 2048, 8192})
      for (const Case& c : cases) {
        const double ms = run_case(c, m, sh.n, sh.k, w, x, y, ws, xs);
        if (ms < 0)
          std::printf("%-6s %5d %-24s %9s\n", sh.name, m, c.name, "no algo");
        else
          std::printf("%-6s %5d %-24s %9.1f %9.1f\n", sh.name, m, c.name, ms * 1e3,
                      2.0 * m * sh.n * sh.k / (ms * 1e9));
      }
  return 0;
}
