// How the KV pool's blocks map onto layers: vLLM's hybrid KV cache groups. Layers that attend the
// same span of context (all of it, or one sliding window) are cut into groups of at most `slots`
// layers. A physical block holds block_size tokens of K and V for `slots` layers (slot s of the
// pool is layer layer_of(g, s) for a sequence's group-g blocks), and every sequence has one block
// table per group. A sliding group can then give back the blocks its window has passed while the
// full groups keep theirs: Gemma 3 (5 sliding layers to 1 global) holds a 32k-token sequence in
// about a fifth of the memory of an all-global layout. One group of all layers is the classic
// layout, used when no layer slides or the hybrid layout is turned off.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace pagellm::io {
struct ModelConfig;
}

namespace pagellm::kv {

// Groups a sequence can have (the scheduler passes one table per group in a fixed array).
inline constexpr int kMaxKvGroups = 8;

struct KvLayout {
  int slots = 0;                  // layers per physical block
  std::vector<int> group_window;  // [num_groups]: 0 = full attention, else the window in tokens
  std::vector<int> layer_group;   // [num_layers]
  std::vector<int> layer_slot;    // [num_layers]

  int num_groups() const { return static_cast<int>(group_window.size()); }
  int num_layers() const { return static_cast<int>(layer_group.size()); }
  bool hybrid() const { return num_groups() > 1 || (num_groups() == 1 && group_window[0] > 0); }

  // One full-attention group of `num_layers` layers, slot = layer.
  static KvLayout uniform(int num_layers);
  // layer_windows[l]: 0 for a full-attention layer, else its window. hybrid = false (or no sliding
  // layer) gives uniform(); otherwise the layers of each window value are grouped in layer order,
  // full attention first, with as many slots as the rarest kind has layers (more when that would
  // make over kMaxKvGroups groups).
  static KvLayout plan(std::span<const int64_t> layer_windows, bool hybrid);
};

// The layout a runner of this (whole-model or pipeline-stage) config allocates: plan() over its
// layers' windows when config.hybrid_kv_cache is set, else uniform() over its layers.
KvLayout kv_layout_of(const io::ModelConfig& config);

}  // namespace pagellm::kv
