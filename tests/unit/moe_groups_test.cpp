// The grouped mixture-of-experts pass's host-side sort (backends/cuda/moe_groups.h): every slot
// lands once, each expert's rows are consecutive and in slot order, and a bad id is an error.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "backends/cuda/moe_groups.h"

namespace pagellm::cuda {
namespace {

TEST(MoeGroups, SortsSlotsByExpertStably) {
  // 3 tokens, top-2, 4 experts: slot s = t * 2 + j.
  const std::vector<int32_t> ids{2, 0, 0, 3, 2, 0};
  const MoeGroups g = moe_group_slots(ids, 2, 4);
  EXPECT_EQ(g.expert_begin, (std::vector<int32_t>{0, 3, 3, 5}));  // expert 1 unused
  EXPECT_EQ(g.expert_count, (std::vector<int32_t>{3, 0, 2, 1}));
  // Expert 0: slots 1, 2, 5; expert 2: slots 0, 4; expert 3: slot 3.
  EXPECT_EQ(g.row_of_slot, (std::vector<int32_t>{3, 0, 1, 5, 4, 2}));
  EXPECT_EQ(g.token_of_row, (std::vector<int32_t>{0, 1, 2, 0, 2, 1}));
  EXPECT_TRUE(g.overflow.empty());
}

// Padded: expert e's block starts at e * rows_per_expert; pad rows read token 0; slots past a
// block go to overflow rows after every block.
TEST(MoeGroups, PaddedBlocksForOneStridedBatch) {
  const std::vector<int32_t> ids{2, 0, 0, 3, 2, 0};
  const MoeGroups g = moe_group_slots(ids, 2, 4, 3);
  EXPECT_EQ(g.expert_begin, (std::vector<int32_t>{0, 3, 6, 9}));
  EXPECT_EQ(g.row_of_slot, (std::vector<int32_t>{6, 0, 1, 9, 7, 2}));
  EXPECT_EQ(g.token_of_row, (std::vector<int32_t>{0, 1, 2, 0, 0, 0, 0, 2, 0, 1, 0, 0}));
  EXPECT_TRUE(g.overflow.empty());
  const MoeGroups h = moe_group_slots(ids, 2, 4, 1);  // expert 0: 2 slots over, expert 2: 1
  EXPECT_EQ(h.expert_begin, (std::vector<int32_t>{0, 1, 2, 3}));
  ASSERT_EQ(h.overflow.size(), 2u);
  EXPECT_EQ(h.overflow[0].expert, 0);
  EXPECT_EQ(h.overflow[0].begin, 4);
  EXPECT_EQ(h.overflow[0].count, 2);
  EXPECT_EQ(h.overflow[1].expert, 2);
  EXPECT_EQ(h.overflow[1].begin, 6);
  EXPECT_EQ(h.overflow[1].count, 1);
  // Slot 1 (expert 0's first) in its block, slots 2 and 5 in its overflow; slot 0 in expert 2's
  // block, slot 4 in its overflow; slot 3 in expert 3's block.
  EXPECT_EQ(h.row_of_slot, (std::vector<int32_t>{2, 0, 4, 3, 6, 5}));
  EXPECT_EQ(h.token_of_row, (std::vector<int32_t>{0, 0, 0, 1, 1, 2, 2}));
}

TEST(MoeGroups, EverySlotOnceOnRandomRoutings) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const int experts = 1 + int(rng() % 64), top_k = 1 + int(rng() % std::min(8, experts));
    const int tokens = int(rng() % 300);
    std::vector<int32_t> ids(size_t(tokens) * size_t(top_k));
    for (auto& e : ids) e = int32_t(rng() % uint32_t(experts));
    const int padding = trial % 2 == 0 ? 0 : 1 + int(rng() % 8);
    const MoeGroups g = moe_group_slots(ids, top_k, experts, padding);
    EXPECT_EQ(g.expert_count, moe_expert_counts(ids, experts));
    // Each slot in a row of its own expert (its block, or its overflow), reading its token.
    std::vector<int> seen(g.token_of_row.size(), 0);
    for (size_t s = 0; s < ids.size(); ++s) {
      const int32_t row = g.row_of_slot[s], e = ids[s];
      ++seen[size_t(row)];
      const int32_t block = padding > 0 ? padding : g.expert_count[size_t(e)];
      bool in_own = row >= g.expert_begin[size_t(e)] && row < g.expert_begin[size_t(e)] + block;
      for (const MoeGroups::Overflow& o : g.overflow)
        in_own = in_own || (o.expert == e && row >= o.begin && row < o.begin + o.count);
      EXPECT_TRUE(in_own) << "slot " << s;
      EXPECT_EQ(g.token_of_row[size_t(row)], int32_t(s / size_t(top_k)));
    }
    for (int n : seen) EXPECT_LE(n, 1);
    if (padding == 0) {
      EXPECT_EQ(g.token_of_row.size(), ids.size());
    }
  }
}

TEST(MoeGroups, AnExpertOutOfRangeIsAnError) {
  const std::vector<int32_t> ids{0, 4};
  EXPECT_THROW(moe_group_slots(ids, 1, 4), std::out_of_range);
  const std::vector<int32_t> negative{-1};
  EXPECT_THROW(moe_group_slots(negative, 1, 4), std::out_of_range);
}

// The block height that costs the fewest GEMM rows: even counts take the busiest expert's count
// rounded up to 16; one outlier goes to an overflow GEMM when its rows cost more than the launch.
TEST(MoeGroups, BlockRowsCostTheFewestGemmRows) {
  const std::vector<int32_t> even{120, 131, 128, 140, 117, 126, 133, 125};
  EXPECT_EQ(moe_block_rows(even, 400.0), 144);
  const std::vector<int32_t> outlier{10, 12, 9, 11, 10, 1000, 8, 12};
  EXPECT_EQ(moe_block_rows(outlier, 100.0), 16);      // 8 * 16 + 984 + 100
  EXPECT_EQ(moe_block_rows(outlier, 10000.0), 1008);  // a launch dearer than every padded row
  EXPECT_EQ(moe_block_rows(std::vector<int32_t>{0, 0}, 50.0), 16);
}

}  // namespace
}  // namespace pagellm::cuda
