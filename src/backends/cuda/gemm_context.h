// The state behind the opaque GemmContext of kernels.h, shared by the dense GEMM (gemm.cpp) and
// the FP8 linear layers (gemm/fp8_linear.cpp): one cuBLASLt handle and workspace, and the
// heuristic's choice per shape (the query costs tens of microseconds, a step issues ~7 GEMMs per
// layer, and a cached choice keeps every call graph-capturable).
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

class GemmContext {
 public:
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // [workspace_bytes] device scratch for split-K and friends
  std::size_t workspace_bytes = 0;
  bool use_gemv = true;  // decode-sized m through gemv.cu
  // gemm(): (dtype, m, n, k, accumulate, bias) -> algorithm.
  using Key = std::tuple<int, int, int, int, bool, bool, int>;  // ..., batch
  std::map<Key, cublasLtMatmulAlgo_t> algos;

  // fp8_linear(): the path a test or benchmark pinned (an Fp8Path; 0 = automatic), the device's
  // compute capability (major * 10 + minor, read on first use) and, per (mode, dtype, m, n, k,
  // bias, y alignment), the cuBLASLt algorithm or the fact that cuBLASLt has none.
  int fp8_path = 0;
  int sm_version = -1;
  struct Fp8Algo {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  using Fp8Key = std::tuple<int, int, int, int, int, bool, int>;
  std::map<Fp8Key, Fp8Algo> fp8_algos;
};

// Owns the cuBLASLt descriptors of one call (C and D share one layout).
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  LtDescs() = default;
  LtDescs(const LtDescs&) = delete;
  LtDescs& operator=(const LtDescs&) = delete;
  ~LtDescs() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// cuBLASLt heuristic's first choice for descriptors d, queried once per key and cached in
// ctx->fp8_algos (also when cuBLASLt has none, so a rejected shape costs one query). ab_align and
// c_align (bytes; 0: not stated) are the minimum alignments of A/B and of C/D the choice must take.
// Shared by the FP8 (gemm/fp8_linear.cpp) and int8 (gemm/int8_linear.cu) GEMMs.
const GemmContext::Fp8Algo& cached_lt_algo(GemmContext* ctx, const GemmContext::Fp8Key& key,
                                           const LtDescs& d, uint32_t ab_align, uint32_t c_align);

}  // namespace pagellm::cuda
