#include "kv/kv_layout.h"

#include <algorithm>
#include <map>
#include <string>

#include "common/error.h"
#include "io/hf_config.h"

namespace pagellm::kv {

KvLayout KvLayout::uniform(int num_layers) {
  KvLayout out;
  out.slots = num_layers;
  out.group_window = {0};
  out.layer_group.assign(static_cast<size_t>(num_layers), 0);
  for (int l = 0; l < num_layers; ++l) out.layer_slot.push_back(l);
  return out;
}

KvLayout KvLayout::plan(std::span<const int64_t> layer_windows, bool hybrid) {
  const int num_layers = static_cast<int>(layer_windows.size());
  std::map<int64_t, std::vector<int>> by_window;  // full attention (0) first
  for (int l = 0; l < num_layers; ++l) {
    const int64_t w = layer_windows[static_cast<size_t>(l)];
    if (w < 0 || w > INT32_MAX)
      invalid_argument("kv layout: layer " + std::to_string(l) + " has window " +
                       std::to_string(w));
    by_window[w].push_back(l);
  }
  if (!hybrid || num_layers == 0 || (by_window.size() == 1 && by_window.begin()->first == 0))
    return uniform(num_layers);
  int slots = num_layers;
  for (const auto& [w, layers] : by_window)
    slots = std::min(slots, static_cast<int>(layers.size()));
  auto groups_with = [&](int s) {
    int n = 0;
    for (const auto& [w, layers] : by_window) n += (static_cast<int>(layers.size()) + s - 1) / s;
    return n;
  };
  while (groups_with(slots) > kMaxKvGroups) ++slots;
  KvLayout out;
  out.slots = slots;
  out.layer_group.assign(static_cast<size_t>(num_layers), 0);
  out.layer_slot.assign(static_cast<size_t>(num_layers), 0);
  for (const auto& [w, layers] : by_window) {
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % static_cast<size_t>(slots) == 0) out.group_window.push_back(static_cast<int>(w));
      out.layer_group[static_cast<size_t>(layers[i])] = out.num_groups() - 1;
      out.layer_slot[static_cast<size_t>(layers[i])] =
          static_cast<int>(i % static_cast<size_t>(slots));
    }
  }
  return out;
}

KvLayout kv_layout_of(const io::ModelConfig& config) {
  const int num_layers = static_cast<int>(config.num_hidden_layers);
  if (!config.hybrid_kv_cache) return KvLayout::uniform(num_layers);
  std::vector<int64_t> windows;
  for (int l = 0; l < num_layers; ++l) windows.push_back(config.layer_window(l));
  return KvLayout::plan(windows, true);
}

}  // namespace pagellm::kv
