// Expert-sorted slots for the grouped mixture-of-experts pass (a prefill of many tokens): the
// slots ordered by expert (a stable counting sort), so that each expert's slots are one block of
// consecutive rows and a GEMM reads each expert's weights once, instead of once per slot.
// Host-side and CUDA-free (the routing comes back from the device; unit-tested on the CPU).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pagellm::cuda {

struct MoeGroups {
  std::vector<int32_t> token_of_row;  // [rows] the token whose input row i reads (pad rows: 0)
  std::vector<int32_t> row_of_slot;   // [slots] the row of slot s (= t * top_k + j)
  std::vector<int32_t> expert_begin;  // [num_experts] expert e's (first) rows start here
  std::vector<int32_t> expert_count;  // [num_experts] slots routed to expert e
  // Padded layouts: the slots past an expert's block, in rows of their own after every block.
  struct Overflow {
    int32_t expert, begin, count;
  };
  std::vector<Overflow> overflow;
};

// Slots routed to each expert. ids [num_tokens * top_k]: slot s's expert. Throws
// std::out_of_range for an id outside [0, num_experts) (a routing kernel bug: nothing to clamp to).
inline std::vector<int32_t> moe_expert_counts(std::span<const int32_t> ids, int num_experts) {
  std::vector<int32_t> count(size_t(num_experts), 0);
  for (int32_t e : ids) {
    if (e < 0 || e >= num_experts)
      throw std::out_of_range("MoE routing chose expert " + std::to_string(e) + " of " +
                              std::to_string(num_experts));
    ++count[size_t(e)];
  }
  return count;
}

// rows_per_expert 0: expert e's rows follow expert e - 1's (rows = slots). P > 0: expert e's block
// is rows [e * P, (e + 1) * P), padded with rows of token 0, so that one strided-batch GEMM covers
// every expert; an expert's slots past its first P go to rows of their own after the blocks
// (`overflow`, in expert order).
// counts: moe_expert_counts(ids, num_experts), when the caller has them already.
inline MoeGroups moe_group_slots(std::span<const int32_t> ids, int top_k,
                                 std::vector<int32_t> counts, int rows_per_expert = 0) {
  const int num_experts = int(counts.size());
  MoeGroups g;
  g.expert_count = std::move(counts);
  g.expert_begin.resize(size_t(num_experts));
  const int32_t p = rows_per_expert;
  int32_t end = p > 0 ? p * num_experts : 0;  // the packed layout's next row, or the overflow's
  for (size_t e = 0; e < size_t(num_experts); ++e) {
    const int32_t count = g.expert_count[e];
    if (p == 0) {
      g.expert_begin[e] = end;
      end += count;
      continue;
    }
    g.expert_begin[e] = int32_t(e) * p;
    if (count > p) {
      g.overflow.push_back({int32_t(e), end, count - p});
      end += count - p;
    }
  }
  g.token_of_row.assign(size_t(end), 0);
  g.row_of_slot.resize(ids.size());
  std::vector<int32_t> taken(size_t(num_experts), 0);
  std::vector<int32_t> overflow_of(size_t(num_experts), -1);
  for (size_t i = 0; i < g.overflow.size(); ++i)
    overflow_of[size_t(g.overflow[i].expert)] = int32_t(i);
  for (size_t s = 0; s < ids.size(); ++s) {
    const size_t e = size_t(ids[s]);
    const int32_t k = taken[e]++;
    const int32_t row = p == 0 || k < p ? g.expert_begin[e] + k
                                        : g.overflow[size_t(overflow_of[e])].begin + (k - p);
    g.row_of_slot[s] = row;
    g.token_of_row[size_t(row)] = int32_t(s / size_t(top_k));
  }
  return g;
}

// The block height P (a multiple of 16) of the padded layout that costs the fewest GEMM rows:
// num_experts * P for the blocks, plus, for each expert with more than P slots, its overflow rows
// and `launch_rows` for the GEMM of its own (a launch's time in rows of the projections).
inline int moe_block_rows(std::span<const int32_t> counts, double launch_rows) {
  int32_t most = 0;
  for (int32_t c : counts) most = std::max(most, c);
  int best = 16;
  double best_cost = -1;
  for (int p = 16; p < most + 16; p += 16) {
    double cost = double(p) * double(counts.size());
    for (int32_t c : counts)
      if (c > p) cost += double(c - p) + launch_rows;
    if (best_cost < 0 || cost < best_cost) best = p, best_cost = cost;
  }
  return best;
}

inline MoeGroups moe_group_slots(std::span<const int32_t> ids, int top_k, int num_experts,
                                 int rows_per_expert = 0) {
  return moe_group_slots(ids, top_k, moe_expert_counts(ids, num_experts), rows_per_expert);
}

}  // namespace pagellm::cuda
