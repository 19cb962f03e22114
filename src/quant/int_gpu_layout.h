// The GPU's runtime form of an INT4 / INT8 linear layer (backends/cuda/gemm/int_gemm.h), packed on
// the host from the unpacked integers of its checkpoint parts (quant::unpack_int_part), fused parts
// (q/k/v, gate/up) stacked by rows. Host-only, so that CI checks the packing without a GPU.
//
// Act-order checkpoints (GPTQ desc_act, compressed-tensors actorder "group") assign input columns
// to groups out of order; the columns are permuted here so that each group is contiguous (`perm`,
// which the runner applies to the activations as well). The kernel needs every group to have the
// same width, a multiple of 32, dividing k: pack_int_layer says why not otherwise, and the caller
// falls back to 16-bit weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "quant/int_weights.h"

namespace pagellm::quant {

struct IntGpuLayer {
  int bits = 4;
  int64_t n = 0, k = 0;
  int group_size = 0;           // columns per group (k for per-channel weights)
  std::vector<uint8_t> wq;      // bits 4: uint32 words [n, k / 8] (nibble order of int_gemm.h);
                                // bits 8: [n, k]
  std::vector<uint16_t> scale;  // [n, k / group_size], bf16 or f16 bits
  std::vector<uint8_t> zero;    // [n, k / group_size]; empty when every zero is 2^(bits - 1)
  std::vector<int32_t> perm;    // [k]: kernel column j is local column perm[j]; empty: identity
  int64_t groups() const { return group_size > 0 ? k / group_size : 0; }
};

// Nibble n of a packed word holds column 8j + kIntNibbleColumn[n] of its 8 (int_gemm.h).
inline constexpr int kIntNibbleColumn[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// Packs `parts` (the same bits, columns and column-to-group assignment) for scales of `dtype`
// (kBF16 / kF16). nullopt with *why set when the kernel cannot take the layer.
std::optional<IntGpuLayer> pack_int_layer(const std::vector<const IntPartValues*>& parts,
                                          DType dtype, std::string* why);

// The weight the packed form stands for, W[r, c] in local (checkpoint) column order, with the scale
// rounded to the layer's dtype as the kernel uses it: the host reference for tests.
float int_gpu_weight(const IntGpuLayer& layer, DType dtype, int64_t r, int64_t local_col);

}  // namespace pagellm::quant
