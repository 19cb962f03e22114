#include "backends/cpu/rope_frequencies.h"

#include <cmath>
#include <numbers>

namespace pagellm::cpu {

std::vector<float> rope_inv_freq(const io::RopeScaling& scaling, double theta, int64_t head_dim) {
  // HF: inv_freq = 1 / theta ** (arange(0, dim, 2).float() / dim), all in fp32.
  // transformers' longrope: 1 / (factor_i * theta ** (2i / dim)), the factors as fp32.
  using Type = io::RopeScaling::Type;
  const bool longrope = scaling.type == Type::kLongRope;
  const std::vector<double>& ext = scaling.use_long ? scaling.long_factor : scaling.short_factor;
  const int64_t half = head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = std::pow(static_cast<float>(theta), expo);
    inv[size_t(i)] = 1.0f / (longrope ? static_cast<float>(ext.at(size_t(i))) * power : power);
  }
  if (scaling.type == Type::kLinear) {
    for (float& f : inv) f /= static_cast<float>(scaling.factor);
  } else if (scaling.type == Type::kLlama3) {
    // transformers' _compute_llama3_parameters: low frequencies are divided by factor, high ones
    // kept, and the band in between interpolated smoothly.
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_wavelen = old_len / scaling.low_freq_factor;
    const double high_wavelen = old_len / scaling.high_freq_factor;
    const float factor = static_cast<float>(scaling.factor);
    for (float& f : inv) {
      const float wavelen = 2.0f * static_cast<float>(std::numbers::pi) / f;
      const float scaled = wavelen > low_wavelen ? f / factor : f;
      if (wavelen < high_wavelen || wavelen > low_wavelen) {
        f = scaled;
      } else {
        const float smooth =
            (static_cast<float>(old_len) / wavelen - static_cast<float>(scaling.low_freq_factor)) /
            static_cast<float>(scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
    }
  }
  return inv;
}

}  // namespace pagellm::cpu
