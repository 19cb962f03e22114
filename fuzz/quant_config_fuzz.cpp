// libFuzzer target: config.json's quantization_config (every FP8 and INT4 / INT8 format,
// --quantization values) must be accepted or rejected with pagellm::Error, never crash or hang; an
// accepted config satisfies the invariants the loaders rely on, and its ignore lists / targets
// (regexes from the checkpoint) match module names without throwing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "quant/int_weights.h"
#include "quant/quant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  using namespace pagellm::quant;
  try {
    const QuantConfig q = parse_quant_config_text(text, "fuzz/config.json");
    if (q.fp8()) {
      if (q.name.empty() || q.online) std::abort();
      if (q.weight_scales == WeightScales::kBlock &&
          (q.block_n < 1 || q.block_k < 1 || q.block_n > 4096 || q.block_k > 4096))
        std::abort();
      if (q.describe().empty()) std::abort();
    }
    if (q.int_weights()) {
      if ((q.bits != 4 && q.bits != 8) || (q.group_size != -1 && q.group_size < 1)) std::abort();
      if (q.method == Method::kAwq && q.bits != 4) std::abort();
      if (q.describe().empty()) std::abort();
      for (const char* m : {"model.layers.0.self_attn.q_proj.weight", "model.layers.7.mlp.down_proj.weight"})
        (void)int_part_quantized(q, m);
    }
    for (const char* flag : {"", "fp8", "none", "fbgemm_fp8", "awq", "awq_marlin", "gptq",
                             "gptq_marlin", "marlin", "compressed-tensors", "auto-round"}) {
      try {
        const QuantConfig r = resolve_quantization(q, flag, "fuzz/config.json");
        if (std::string(flag) == "fp8" && !r.fp8()) std::abort();
        if (std::string(flag) == "none" && r.quantized()) std::abort();
      } catch (const pagellm::Error&) {
      }
    }
  } catch (const pagellm::Error&) {
  }
  return 0;
}
