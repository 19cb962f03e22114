// INT4 / INT8 weight-only linear layers on the GPU (W4A16, W8A16; issue 12): the one runtime form
// every integer checkpoint format (AWQ, GPTQ, compressed-tensors pack-quantized, AutoRound) is
// packed into at load (quant/int_gpu_layout.h), and the kernels that multiply 16-bit activations by
// it. Weights stay packed in GPU memory: a 4-bit layer holds half a byte per weight plus its group
// scales, so a decode step reads about a quarter of the 16-bit model's bytes.
//
// Runtime form of a weight W [n, k] (k input columns in the kernel's order: act-order checkpoints
// are permuted at load so that each group's columns are contiguous, and the activations are
// gathered with the same permutation before the GEMM, int_gather_columns):
//   wq     bits 4: uint32 [n, k / 8]; word j of row r holds columns 8j + {0, 2, 4, 6, 1, 3, 5, 7}
//                  in nibbles 0..7 from the low bits up (so that nibbles i and i + 4 are the
//                  adjacent columns 8j + 2i, 8j + 2i + 1: one mask turns them into a 16-bit pair);
//          bits 8: uint8 [n, k], row-major.
//   scale  [n, k / group_size] of the activation dtype (bf16 / f16).
//   zero   uint8 [n, k / group_size], or null: every zero is 2^(bits - 1) (symmetric schemes).
//   W[r, c] = (q[r, c] - zero[r, c / group_size]) * scale[r, c / group_size], the difference exact.
//   Where group_size is a multiple of 128 (4 bits) or 64 (8 bits) the weight-only kernel multiplies
//   the exact differences and scales the sums in fp32; otherwise, and in int_dequantize_weight,
//   each product is rounded once to the activation dtype. (bf16 scales are the checkpoint's rounded
//   to bf16, as in vLLM's kernels for bf16 models.)
// k and group_size multiples of 32, k < 2^21; group_size divides k (per-channel: group_size = k).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/kernels.h"

namespace pagellm::cuda {

struct IntLinearParams {
  DType dtype = DType::kBF16;     // of x, y, bias and scale: bf16 or f16
  int bits = 4;                   // 4 or 8
  const void* x = nullptr;        // [m, k], 16-byte aligned
  const void* wq = nullptr;       // packed as above, 16-byte aligned
  const void* scale = nullptr;    // [n, k / group_size]
  const uint8_t* zero = nullptr;  // [n, k / group_size] or null
  void* y = nullptr;              // [m, n]
  const void* bias = nullptr;     // [n] or null
  int m = 0, n = 0, k = 0;
  int group_size = 0;
  // Scratch for m above kIntWeightOnlyMaxRows: the weight dequantized to dtype, [n, k]. Null
  // makes every m take the weight-only kernel.
  void* w_work = nullptr;
};

// Largest m that reads the packed weight directly (tensor cores, mma.sync with the weights
// dequantized in registers); larger m dequantizes the weight into w_work and runs the 16-bit GEMM
// (prefill is bound by arithmetic, and the dequantization costs one pass over the weight).
constexpr int kIntWeightOnlyMaxRows = 64;
// Bound on k of every INT kernel (its strides and offsets are 32-bit).
constexpr int kIntMaxK = 1 << 21;

// Graph-capturable. cudaErrorInvalidValue for shapes or pointers outside the contract above.
cudaError_t int_linear(GemmContext* ctx, const IntLinearParams& p, cudaStream_t stream);

// The weight-only kernels for any m (tests and benchmarks pin them); `tiles` pins the kernel: the
// register kernel with 1 (16 weight rows per block, the next chunk prefetched) or 2 (32 rows), 3
// the streaming kernel (int_weight_stream), 4 the one-row GEMV (int_weight_gemv; m = 1 only), 5
// the wgmma kernel (int_weight_wgmma), 0 as int_linear chooses (at m = 1 the GEMV where it
// applies, for 17 <= m <= kIntWeightOnlyMaxRows, and from 9 rows for weights of 2^25+ elements,
// the wgmma kernel where it applies).
cudaError_t int_weight_only(const IntLinearParams& p, cudaStream_t stream, int tiles = 0);

// y [m, n / 2] = silu(gate) * up for w = [gate; up] (n = 2 x inner), the SiLU-and-mul applied in
// the GEMV's epilogue with silu_and_mul's roundings (each projection stored in the dtype first).
// cudaErrorNotSupported where the fused kernel does not apply (m != 1, or as int_weight_gemv):
// the caller then runs int_linear and silu_and_mul.
cudaError_t int_linear_silu_and_mul(GemmContext* ctx, const IntLinearParams& p,
                                    cudaStream_t stream);

// The weight-only GEMV for m = 1 on tensor cores, whole 128-byte weight lines streamed through
// shared memory (gemm/int_weight_gemv.cu); gated: wq = [gate; up] and y [1, n / 2] as
// int_linear_silu_and_mul. p must be valid for int_linear. cudaErrorNotSupported for m != 1, k
// above 32768 or more than 1024 groups per row.
cudaError_t int_weight_gemv(const IntLinearParams& p, bool gated, cudaStream_t stream);

// The streaming kernel for m <= kIntWeightOnlyMaxRows (gemm/int_weight_stream.cu): weights and
// activations through a cp.async pipeline, each weight dequantized once for all m rows; k split
// over blocks where n gives too few, the fp32 partial sums then in p.w_work (none: no split).
// cudaErrorNotSupported where its shared memory cannot hold the group constants (small groups at
// large k) or they are not 16-byte aligned.
cudaError_t int_weight_stream(const IntLinearParams& p, cudaStream_t stream);

// The streaming kernel's pipeline with Hopper's warpgroup MMA (gemm/int_weight_stream.cu): the
// dequantized weights in registers, the activations read by the tensor cores from shared memory.
// 4 bits, groups a multiple of 128 (or per channel), m <= kIntWeightOnlyMaxRows, on a compute
// capability 9.0 device; cudaErrorNotSupported otherwise (and where int_weight_stream's is),
// cudaErrorInvalidValue outside int_linear's contract.
cudaError_t int_weight_wgmma(const IntLinearParams& p, cudaStream_t stream);

// out [n, k] of p.dtype = the dequantized weight of p (x, y, m unused).
cudaError_t int_dequantize_weight(const IntLinearParams& p, void* out, cudaStream_t stream);

// out[i, j] = x[i, perm[j]] for x, out [m, k] of dtype (act-order activations).
cudaError_t int_gather_columns(DType dtype, const void* x, const int32_t* perm, void* out, int m,
                               int k, cudaStream_t stream);

}  // namespace pagellm::cuda

namespace pagellm::cuda {

// W8A8-INT8 (compressed-tensors int-quantized with int8 activations): y [m, n] of dtype =
// (xq · wqᵀ) * x_scale[i] * w_scale[j] (+ bias[j]), where each row of x is quantized on the fly
// symmetrically to int8 (scale amax / 127, round to nearest even, the CPU backend's
// quant::fake_quantize_rows_int8) and the int32 sums come from cuBLASLt's int8 tensor-core GEMM.
// k and n multiples of 4 (int8 GEMM alignment); x, wq, xq_work and acc_work 16-byte aligned.
struct Int8LinearParams {
  DType dtype = DType::kBF16;      // of x, y and bias: bf16 or f16
  const void* x = nullptr;         // [m, k]
  const int8_t* wq = nullptr;      // [n, k]
  const float* w_scale = nullptr;  // [n]
  void* y = nullptr;               // [m, n]
  const void* bias = nullptr;      // [n] or null
  int m = 0, n = 0, k = 0;
  int8_t* xq_work = nullptr;      // [m, k]
  float* x_scale_work = nullptr;  // [m]
  int32_t* acc_work = nullptr;    // [acc_rows, n]: the GEMM runs in slices of acc_rows rows
  int acc_rows = 0;
  // Which GEMM: kAuto picks (Hopper's wgmma kernel where it fits and pays, else cuBLASLt); the
  // others pin one (tests and benchmarks; kWgmma where it does not fit: cudaErrorInvalidValue).
  enum class Path { kAuto, kCublasLt, kWgmma } path = Path::kAuto;
};
// Graph-capturable once each shape has run eagerly (the cuBLASLt choice is cached in ctx).
// cudaErrorNotSupported when cuBLASLt has no int8 algorithm for the shape.
cudaError_t int8_linear(GemmContext* ctx, const Int8LinearParams& p, cudaStream_t stream);

// The Hopper GEMM of int8_linear (gemm/int8_gemm_sm90.cu) over p's already quantized activations
// (xq_work, x_scale_work), scales and bias in its epilogue; acc_work is not used. Whether it serves
// p: a compute capability 9.0 device with TMA, k a multiple of 16, n even, xq_work and wq 16-byte
// and y 4-byte aligned.
bool int8_gemm_sm90_fits(const Int8LinearParams& p);
// Whether int8_linear gives p to it: enough tiles to fill most of the GPU.
bool int8_gemm_sm90_pays(const Int8LinearParams& p);
cudaError_t int8_gemm_sm90(const Int8LinearParams& p, cudaStream_t stream);

}  // namespace pagellm::cuda
