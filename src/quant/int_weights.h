// INT4 / INT8 linear weights of a checkpoint on the host (AWQ, GPTQ, compressed-tensors
// pack-quantized and int-quantized, AutoRound's GPTQ- and AWQ-style exports): which plan parts are
// quantized, the validation of their tensors, and their dequantization to fp32 for the CPU backend.
//
// Every format stores, per linear weight W [out, in], integers q [out, in], one scale s and one
// zero z per output row and group of input columns, and W = (q - z) * s, computed in fp32: q - z is
// an exact integer, and its product with an F16 / BF16 scale is exact in fp32 (an F32 scale rounds
// once). Tensors of module X (the part "X.weight"):
//   AWQ (GEMM)      X.qweight I32 [in, out / 8]: 8 nibbles of one word are output columns
//                   8j + {0, 2, 4, 6, 1, 3, 5, 7} from the low bits up; X.qzeros I32
//                   [groups, out / 8] packed the same way (absent when zero_point is false:
//                   z = 2^(bits-1)); X.scales [groups, out].
//   GPTQ            X.qweight I32 [in / (32 / bits), out]: input rows packed low bits first;
//                   X.qzeros I32 [groups, out / (32 / bits)] packed along out, holding z - 1 (v1)
//                   or z (gptq_v2; symmetric checkpoints: z = 2^(bits-1), stored either way);
//                   X.scales [groups, out]; X.g_idx I32 [in] (the group of each input column;
//                   required with desc_act, else optional and then in / group_size order).
//   compressed-tensors pack-quantized
//                   X.weight_packed I32 [out, ceil(in / (32 / bits))] packed along in, low bits
//                   first, each value q + 2^(bits-1) (so z = 2^(bits-1) when symmetric);
//                   X.weight_shape [2] = [out, in]; X.weight_scale [out, groups];
//                   X.weight_zero_point I32 [ceil(out / (32 / bits)), groups] packed along out with
//                   the same offset (asymmetric only); X.weight_g_idx I32 [in] (actorder "group").
//   compressed-tensors int-quantized
//                   X.weight I8 [out, in], X.weight_scale [out, 1] / [out] or [] / [1]; z = 0.
// groups = ceil(in / group_size) (1 for group_size -1 / per channel).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/weight_plan.h"
#include "quant/quant_config.h"

namespace pagellm::quant {

// True when an INT4 / INT8 config stores the linear weight `weight_name` ("...q_proj.weight")
// quantized: it matches the config's targets (if any) and not its ignore list. The caller knows
// the name is one of the projections (quantized_slot).
bool int_part_quantized(const QuantConfig& q, const std::string& weight_name);

// Checks the quantized tensors of `part` (the whole tensor: every rank checks all of it): presence,
// dtypes, packed shapes against part.shape = [out, in], finite non-zero scales, g_idx in range and
// filling every group as group_size says, symmetric zeros holding 2^(bits-1) (or its v1 form).
// Adds every tensor it accounts for to `used`. Throws one line "FILE: tensor 'NAME' ..." naming
// the tensor and the problem.
void check_int_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                    const QuantConfig& q, std::set<std::string, std::less<>>& used);

// The integers of the rank's slice of `part`, unsigned: q [rows, cols] (int8 weights of
// int-quantized checkpoints offset by 128, their zero 128), with per row and group the scale and
// the zero point (W = (q - zero) * scale), and the group of each local column. The same checks and
// slicing rules as dequantize_int_part.
struct IntPartValues {
  int bits = 4;
  int64_t rows = 0, cols = 0, groups = 1;
  std::vector<uint8_t> q;      // [rows, cols]
  std::vector<float> scale;    // [rows, groups]
  std::vector<int32_t> zero;   // [rows, groups]
  std::vector<int32_t> group;  // [cols], in [0, groups)
};
IntPartValues unpack_int_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                              const QuantConfig& q);

// Writes the dequantized slice of `part` (row-major, part.local_shape()) to dst, reading only the
// rank's rows or columns. A row-parallel slice (of input columns) must hold whole groups unless
// g_idx assigns them (act-order: every rank reads the whole scale tensor, as vLLM does); otherwise
// throws naming the tensor, the slice and group_size.
void dequantize_int_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                         const QuantConfig& q, float* dst);

// The CUDA runner keeps weight-only formats (W4A16, W8A16) packed and multiplies them with its INT
// kernels (backends/cuda/gemm/int_gemm.h; layers they cannot take, and --dtype float32, are
// dequantized at load). W8A8-INT8 runs on the int8 GEMM when its weights are compressed-tensors
// int-quantized, symmetric, per channel or per tensor; any other W8A8 scheme throws (kUnsupported,
// one line naming `model`): its numerics are the int8 GEMM's, which a 16-bit GEMM would not
// reproduce.
void check_int_weights_on_gpu(const QuantConfig& q, const std::string& model);

// The startup log line of INT weights on the GPU ("" without INT weights).
std::string describe_int_weights_on_gpu(const QuantConfig& q, DType dtype);

// Each row of x [rows, cols] quantized symmetrically to int8 with scale amax / 127 and dequantized:
// the CPU reference of W8A8-INT8's dynamic per-token activation quantization (a row of zeros stays
// zero).
void fake_quantize_rows_int8(float* x, int64_t rows, int64_t cols);

}  // namespace pagellm::quant
