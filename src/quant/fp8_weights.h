// FP8 linear weights of a checkpoint on the host, shared by the CPU loader (which dequantizes them
// to fp32) and the CUDA loader (which keeps them in e4m3 with per-channel or 128x128 block scales):
// which plan entries are quantized, the scale tensors of a weight, their validation, and the scales
// of a rank's slice.
//
// Tensor names follow the checkpoint formats: the weight "X.weight" (F8_E4M3), its scale
// "X.weight_scale" ([] or [1]: per tensor; [n] or [n, 1]: per output channel; [ceil(n / bn),
// ceil(k / bk)]: per block) or, for the block-wise fp8 layout, "X.weight_scale_inv" (same meaning:
// the dequantized weight is w * scale), and the optional static activation scale "X.input_scale"
// (and fbgemm's "X.input_scale_ub"), checked but not needed at run time.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "models/weight_plan.h"
#include "quant/quant_config.h"

namespace pagellm::quant {

// The plan entries an FP8 config quantizes: the attention and MLP projections. The embedding, the
// LM head, norms and biases stay 16-bit (the LM head is in every format's ignore list).
bool quantized_slot(models::WeightSlot slot);

// The experts of a mixture-of-experts layer, which an FP8 checkpoint may store in FP8 too: the CPU
// dequantizes them (fp32), the GPU keeps them in e4m3 with a scale per row (requantizing 128x128
// blocks per row) for its expert kernels, which compute with bf16 / f16 activations (W8A16).
bool fp8_expert_slot(models::WeightSlot slot);

// The plan entries a weight-quantization config may quantize: quantized_slot's projections and
// the experts (FP8 on both backends; INT4 / INT8 weight-only experts on the CPU backend).
bool quantizable_slot(models::WeightSlot slot);

// A (small) tensor's values as fp32; its dtype must be F32, BF16 or F16 (callers check).
std::vector<float> read_f32(const io::TensorView& t);

// [], [1] or [1, 1]: a per-tensor scale.
bool scalar_shape(const std::vector<int64_t>& shape);

// "a.b.weight" -> "a.b.<suffix>".
std::string sibling_name(const std::string& weight_name, const std::string& suffix);

// Checks one linear part of an FP8 checkpoint: an F8_E4M3 weight with a scale tensor of a valid
// dtype (F32, BF16, F16), shape and finite positive values, or a 16-bit weight (a module the
// checkpoint left unquantized) without one; input scales, when present, are scalars. Adds every
// tensor it accounts for to `used`. Throws "FILE: tensor 'NAME' ..." naming the problem.
void check_fp8_part(const io::WeightStore& store, const models::HfTensorSpec& part,
                    const QuantConfig& q, std::set<std::string, std::less<>>& used);

// True when the checkpoint stores `part` in FP8 (and so has a scale tensor for it).
bool part_is_fp8(const io::WeightStore& store, const models::HfTensorSpec& part);

// The scale of each of part's local rows, for a per-tensor or per-channel scale tensor.
std::vector<float> part_row_scales(const io::WeightStore& store, const models::HfTensorSpec& part,
                                   const QuantConfig& q);

// A block-scaled part's whole scale tensor [ceil(n / block_n), ceil(k / block_k)] as fp32.
std::vector<float> part_block_scales(const io::WeightStore& store, const models::HfTensorSpec& part,
                                     const QuantConfig& q);

// Multiplies `local` (part's slice, already converted from e4m3 to fp32, row-major) by its scales:
// the dequantized weight in fp32, exactly (one fp32 multiplication per element).
void apply_part_scales(const io::WeightStore& store, const models::HfTensorSpec& part,
                       const QuantConfig& q, float* local);

// Replaces each row of w [rows, cols] by its per-channel e4m3 quantization, dequantized: scale =
// max(amax, 1e-12) / 448, w = e4m3(w / scale) * scale (what --quantization fp8 does to a 16-bit
// weight on the GPU, so that the CPU backend computes with the same weights). Also the CPU
// reference of the GPU's dynamic per-token activation quantization (rows = tokens).
void fake_quantize_rows(float* w, int64_t rows, int64_t cols);

}  // namespace pagellm::quant
