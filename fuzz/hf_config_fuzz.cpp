// libFuzzer target: config.json and generation_config.json parsing must reject any input with
// pagellm::Error, never crash or hang; an accepted config satisfies the invariants the model relies
// on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto c = pagellm::io::parse_model_config(text, "fuzz/config.json");
    if (c.hidden_size <= 0 || c.num_key_value_heads <= 0 ||
        c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim <= 0 ||
        c.head_dim % 2 != 0 || c.vocab_size <= 0)
      std::abort();
    // A mixture of experts: top-k within the experts, a flag for every layer.
    if (c.is_moe() &&
        (c.moe.top_k < 1 || c.moe.top_k > c.moe.num_experts || c.moe.intermediate_size <= 0 ||
         int64_t(c.moe.dense_layer.size()) != c.num_hidden_layers))
      std::abort();
    // A window names every layer's kind; Gemma's attention scale is finite.
    if (c.sliding_window > 0 && int64_t(c.sliding_layer.size()) != c.num_hidden_layers)
      std::abort();
    if (c.gemma.enabled && !(c.gemma.query_pre_attn_scalar > 0.0)) std::abort();
  } catch (const pagellm::Error&) {
  }
  try {
    pagellm::io::parse_generation_config(text, "fuzz/generation_config.json");
  } catch (const pagellm::Error&) {
  }
  return 0;
}
