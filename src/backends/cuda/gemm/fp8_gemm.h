// FP8 (e4m3) linear layers on the GPU: the one runtime form every FP8 checkpoint format is loaded
// into — an e4m3 weight [n, k] with one fp32 scale per output channel (per-tensor scales are
// broadcast; fused q/k/v and gate/up shards keep their own scales row by row) — and dynamic
// per-token activation quantization. The smallest m reads the FP8 weight once and multiplies the
// 16-bit activations directly (weight-bound: CUDA cores for one row, gemm/fp8_weight_only.cu,
// tensor cores beyond, gemm/fp8_weight_only_mma.cu); decode batches quantize the activations per
// token and run cuBLASLt's unscaled FP8 GEMM, then a kernel applies the scales; larger m runs
// cuBLASLt's tensor-core FP8 GEMM (sm_89+) with the per-token x
// per-channel scales applied inside cuBLASLt (outer-vector scaling, cuBLAS >= 12.9 on sm_90) or,
// where cuBLASLt lacks that mode, in a small epilogue kernel (gemm/fp8_linear.cpp). Block-scaled
// checkpoints (128x128 weight blocks) can also run as they are: activations are then quantized per
// 128-column group and cuBLASLt applies both block scales.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

// Largest finite e4m3 value: scales are amax / kFp8Max.
constexpr float kFp8Max = 448.0f;
// Floor of the amax in a scale, so that an all-zero row gets a finite, nonzero scale.
constexpr float kFp8MinAmax = 1e-12f;
// Side of the square weight blocks (and of the activation groups) of block-scaled FP8 checkpoints
// ("weight_block_size": [128, 128], DeepSeek-V3 / Qwen3-FP8 style).
constexpr int kFp8Block = 128;
// Row stride, in floats, of a block-scaled weight's scales: ceil(k / 128) rounded up to 4 (the
// 16-byte aligned rows cuBLASLt's 128x128 scale mode reads). The loader pads the checkpoint's
// [ceil(n / 128), ceil(k / 128)] scale tensor to this stride.
constexpr int fp8_block_scale_stride(int k) {
  return ((k + kFp8Block - 1) / kFp8Block + 3) / 4 * 4;
}

// xq[i, :] = saturate(x[i, :] / scale[i]) as e4m3 (round to nearest even, ±448 on overflow, NaN
// stays NaN; bit-exact with common/fp8.h on the host), scale[i] = max(amax(x[i, :]), kFp8MinAmax)
// / kFp8Max, both IEEE fp32 divisions. x [m, k] of dtype (bf16 or f16; f32 returns
// cudaErrorNotSupported), xq [m, k] bytes. k a multiple of 8, x and xq 16-byte aligned.
// group_size 128 instead scales each 128-column group of a row on its own (k a multiple of 128),
// with scale [k / 128, m] group-major (scale[g * m + i]: the layout of cuBLASLt's VEC128 mode).
struct QuantizeFp8Params {
  DType dtype = DType::kBF16;
  const void* x = nullptr;
  void* xq = nullptr;
  float* scale = nullptr;  // [m], or [k / 128, m] with group_size 128
  int m = 0;
  int k = 0;
  int group_size = 0;  // 0 (whole row) or kFp8Block
};
cudaError_t quantize_fp8_per_token(const QuantizeFp8Params& p, cudaStream_t stream);

// The same per row of a weight w [n, k] of dtype: wq [n, k] e4m3, w_scale [n] (for
// `--quantization fp8` on a 16-bit checkpoint, and for requantizing block-scaled weights).
cudaError_t quantize_fp8_per_channel(DType dtype, const void* w, int n, int k, void* wq,
                                     float* w_scale, cudaStream_t stream);

// Dequantizes a block-scaled e4m3 slice wq [rows, cols] to out [rows, cols] of dtype (bf16 / f16):
// element (r, c) is scaled by scale[((row0 + r) / block_n) * scale_cols + (col0 + c) / block_k],
// the checkpoint's whole [ceil(n / block_n), scale_cols] scale tensor with the slice at (row0,
// col0). For loading block-wise checkpoints whose tensor-parallel slices or fused parts cut
// through 128x128 blocks: the weight is then requantized per output channel.
struct Fp8BlockDequantParams {
  DType dtype = DType::kBF16;  // of out
  const void* wq = nullptr;
  const float* scale = nullptr;
  void* out = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t row0 = 0, col0 = 0;
  int64_t scale_cols = 0;
  int block_n = 0, block_k = 0;
};
cudaError_t dequantize_fp8_blocks(const Fp8BlockDequantParams& p, cudaStream_t stream);

// out [rows, cols] of dtype (bf16 / f16) = wq [rows, cols] (e4m3) * scale[row], the fp32 product
// rounded once; cols % 16 == 0, 16-byte aligned pointers. (FP8 experts for the prefill GEMMs.)
cudaError_t dequantize_fp8_rows(DType dtype, const void* wq, const float* scale, int64_t rows,
                                int64_t cols, void* out, cudaStream_t stream);

// y [m, n] of dtype = (x [m, k] · dequant(wq)ᵀ) + bias, dequant(wq)[j, :] = wq[j, :] * w_scale[j]
// (or, with w_block = 128, wq[j, l] * w_scale[(j / 128) * fp8_block_scale_stride(k) + l / 128]).
// k a multiple of 16 (of 128 with w_block); x, wq and xq_work 16-byte aligned (any alignment of y
// and bias works). xq_work [m, k] bytes and x_scale_work [m] floats ([k / 128, m] with w_block:
// activations are then quantized per 128-column group) are scratch for the activation
// quantization; they are read only when m exceeds the weight-only limit below
// (kFp8BlockWeightOnlyMaxRows with w_block) on an FP8-tensor-core GPU and may be null otherwise.
struct Fp8LinearParams {
  DType dtype = DType::kBF16;      // of x, y and bias: bf16 or f16
  const void* x = nullptr;         // [m, k]
  const void* wq = nullptr;        // [n, k] e4m3
  const float* w_scale = nullptr;  // [n], or [ceil(n / 128), fp8_block_scale_stride(k)]
  void* y = nullptr;               // [m, n]
  const void* bias = nullptr;      // [n] or null
  int m = 0;
  int n = 0;
  int k = 0;
  int w_block = 0;                // 0: per-channel scales; kFp8Block: 128x128 block scales
  void* xq_work = nullptr;        // [m, k] e4m3 scratch
  float* x_scale_work = nullptr;  // [m] (or [k / 128, m]) scratch
  // The kernel that wrote x also quantized it into xq_work / x_scale_work (kernels.h Fp8Out, with
  // per-128-column-group scales for w_block): only for a p that fp8_linear_quantizes_x accepts,
  // and x is then not read (it may be null).
  bool x_quantized = false;
};

// Largest m that takes the weight-only path (measured on H100, docs/PERF.md "FP8 GEMM kernels"):
// per-channel weights, tensor-core weight-only ties cuBLASLt at m = 16 and wins below; block-scaled
// weights have only the CUDA-core weight-only kernel, which cuBLASLt's block-scaled GEMM beats
// from m = 4 (where cuBLASLt starts to accept the shape).
constexpr int kFp8WeightOnlyMaxRows = 16;
constexpr int kFp8BlockWeightOnlyMaxRows = 3;
// Decode batches with per-channel weights on an FP8-tensor-core GPU, ahead of both rules above:
// quantized activations and cuBLASLt's unscaled FP8 GEMM, then the scale kernel. Measured on an
// H200 (docs/PERF.md, "FP8 decode batches through cuBLASLt's unscaled GEMM"), summed over a
// Llama-3.1-8B layer: faster than the weight-only kernel from m = 4 (gate/up by 12-22 %) and than
// cuBLASLt's outer-vector-scaled GEMM up to m = 128 (by 5-30 %: its heuristic picks slower kernels
// for these shapes), slower than the scaled GEMM from m = 256. PAGELLM_FP8_DECODE_GEMM=scaled
// turns the rule off (A/B measurements).
constexpr int kFp8DecodeMinRows = 4;
constexpr int kFp8DecodeMaxRows = 128;

// Graph-capturable (no allocation, no synchronization; the cuBLASLt choice per shape is cached in
// ctx on first use, so a graph should be captured after one eager call of each shape). On a GPU
// without FP8 tensor cores (sm_80) every m takes the weight-only path: correct, and on tensor
// cores (bf16/f16 mma) for per-channel weights, but it re-reads the weight for every 16 rows of x,
// so prefill there runs well below the GEMM rate (not yet run on an sm_80 GPU). Shapes cuBLASLt's
// FP8 kernels reject (odd n, say, or m < 4 with block scales) take the same path.
cudaError_t fp8_linear(GemmContext* ctx, const Fp8LinearParams& p, cudaStream_t stream);
// Whether cuBLASLt's FP8 GEMMs with per-channel scales (scaled, and unscaled for decode batches)
// run with fast accumulation: the tensor cores' own accumulator, never promoted to fp32 on the
// way, as vLLM's CUTLASS FP8 kernels on Hopper do. On by default (H200, Llama-3.1-8B shapes: FP8
// prefill +9.5 %, held-out perplexity +0.04 %; docs/PERF.md); PAGELLM_FP8_FAST_ACCUM=0 turns it
// off. Block-scaled GEMMs never use it.
bool fp8_fast_accum();
// The gated MLP's gate/up projection with SiLU-and-mul in the weight-only kernel's epilogue, where
// fp8_linear would take that kernel (decode rows): wq = [gate; up] (p.n = 2 x inner), y [m, inner],
// the same bits as fp8_linear then silu_and_mul. cudaErrorNotSupported elsewhere (run the two).
cudaError_t fp8_linear_silu_and_mul(GemmContext* ctx, const Fp8LinearParams& p,
                                    cudaStream_t stream);

// Whether fp8_linear(ctx, p) takes a tensor-core path, where it quantizes x into the scratch first
// (so the kernel writing x may do that instead: Fp8LinearParams::x_quantized). Host-side and
// graph-safe; the first question for a shape queries cuBLASLt once (then cached), like the call.
bool fp8_linear_quantizes_x(GemmContext* ctx, const Fp8LinearParams& p);

// Pins fp8_linear's path (tests and benchmarks); kAuto chooses by m and the GPU as above. A pinned
// tensor-core path that cuBLASLt cannot run returns cudaErrorNotSupported.
enum class Fp8Path {
  kAuto,
  kWeightOnly,     // the weight-bandwidth kernel, any m
  kScaledGemm,     // quantize x, cuBLASLt FP8 GEMM with outer-vector scales (+ bias epilogue),
                   // or with 128x128 / 1x128 block scales for w_block (+ bias kernel)
  kGemmThenScale,  // quantize x, unscaled cuBLASLt FP8 GEMM into y as bf16, scales + bias kernel
                   // (per-channel scales only; one more bf16 rounding than kScaledGemm)
};
void fp8_linear_set_path(GemmContext* ctx, Fp8Path path);

}  // namespace pagellm::cuda
