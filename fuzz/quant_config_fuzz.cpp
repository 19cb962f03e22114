// libFuzzer target: config.json's quantization_config (every FP8 format, --quantization values)
// must be accepted or rejected with pagellm::Error, never crash or hang; an accepted FP8 config
// satisfies the invariants the loaders rely on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
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
    for (const char* flag : {"", "fp8", "none", "fbgemm_fp8", "awq"}) {
      try {
        const QuantConfig r = resolve_quantization(q, flag, "fuzz/config.json");
        if (std::string(flag) == "fp8" && !r.fp8()) std::abort();
      } catch (const pagellm::Error&) {
      }
    }
  } catch (const pagellm::Error&) {
  }
  return 0;
}
