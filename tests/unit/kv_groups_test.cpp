// KV cache groups (vLLM's hybrid allocator): the layer → (group, slot) plan, and KVCacheManager
// with a sliding-window group beside a full one — blocks given back once the window has passed
// them, prefix hits that need only the window's blocks, swap, fork, the peak block count, and the
// reserved null block.
#include <algorithm>
#include <numeric>
#include <set>

#include <gtest/gtest.h>

#include "common/error.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_layout.h"
#include "kv_test_util.h"

namespace pagellm::kv {
namespace {

using testing::tokens;

// Every (group, slot) pair names one layer; groups hold only layers of their own window.
void expect_consistent(const KvLayout& layout, const std::vector<int64_t>& windows) {
  ASSERT_EQ(layout.num_layers(), static_cast<int>(windows.size()));
  std::set<std::pair<int, int>> seen;
  for (size_t l = 0; l < windows.size(); ++l) {
    const int g = layout.layer_group[l], s = layout.layer_slot[l];
    ASSERT_GE(g, 0);
    ASSERT_LT(g, layout.num_groups());
    ASSERT_GE(s, 0);
    ASSERT_LT(s, layout.slots);
    EXPECT_EQ(layout.group_window[static_cast<size_t>(g)], windows[l]) << "layer " << l;
    EXPECT_TRUE(seen.insert({g, s}).second) << "layer " << l << " shares its slot";
  }
  EXPECT_LE(layout.num_groups(), kMaxKvGroups);
}

TEST(KvLayout, UniformWithoutSlidingLayersOrWhenTurnedOff) {
  const std::vector<int64_t> full(4, 0), mixed{512, 0, 512, 0};
  for (const KvLayout& l : {KvLayout::plan(full, true), KvLayout::plan(mixed, false)}) {
    EXPECT_EQ(l.slots, 4);
    EXPECT_EQ(l.group_window, std::vector<int>{0});
    EXPECT_EQ(l.layer_slot, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_FALSE(l.hybrid());
  }
}

TEST(KvLayout, GroupsOfTheRarestKindsSize) {
  // Gemma 3 12B: 48 layers, every sixth global → 8 global layers, 40 sliding: 6 groups of 8.
  std::vector<int64_t> gemma3(48, 1024);
  for (size_t l = 5; l < 48; l += 6) gemma3[l] = 0;
  const KvLayout g3 = KvLayout::plan(gemma3, true);
  EXPECT_EQ(g3.slots, 8);
  EXPECT_EQ(g3.group_window, (std::vector<int>{0, 1024, 1024, 1024, 1024, 1024}));
  EXPECT_EQ(g3.layer_group[5], 0);
  EXPECT_EQ(g3.layer_slot[11], 1);
  EXPECT_EQ(g3.layer_group[0], 1);
  expect_consistent(g3, gemma3);
  // Gemma 2: alternating, 2 groups of 21.
  std::vector<int64_t> gemma2(42, 0);
  for (size_t l = 0; l < 42; l += 2) gemma2[l] = 4096;
  const KvLayout g2 = KvLayout::plan(gemma2, true);
  EXPECT_EQ(g2.slots, 21);
  EXPECT_EQ(g2.group_window, (std::vector<int>{0, 4096}));
  expect_consistent(g2, gemma2);
  // Every layer sliding (Mistral v0.1): one sliding group.
  const KvLayout mistral = KvLayout::plan(std::vector<int64_t>(32, 4096), true);
  EXPECT_EQ(mistral.group_window, std::vector<int>{4096});
  EXPECT_TRUE(mistral.hybrid());
  // One global layer among 61 sliding: slots grow until at most kMaxKvGroups groups remain;
  // the last sliding group is partly empty (padding slots).
  std::vector<int64_t> lopsided(62, 128);
  lopsided[30] = 0;
  const KvLayout lop = KvLayout::plan(lopsided, true);
  EXPECT_EQ(lop.num_groups(), kMaxKvGroups);
  EXPECT_EQ(lop.slots, 9);  // 1 + ceil(61 / 9) = 8 groups
  expect_consistent(lop, lopsided);
  // Two windows and full attention.
  const std::vector<int64_t> three{0, 64, 128, 64, 128, 0};
  const KvLayout t = KvLayout::plan(three, true);
  EXPECT_EQ(t.slots, 2);
  EXPECT_EQ(t.group_window, (std::vector<int>{0, 64, 128}));
  expect_consistent(t, three);
  EXPECT_THROW(KvLayout::plan(std::vector<int64_t>{-1, 0}, true), Error);
}

// Group 0 full attention, group 1 a window of 8 tokens; blocks of 4 tokens.
KVCacheConfig two_groups(int num_blocks, bool caching = true, int swap = 0) {
  return KVCacheConfig{num_blocks, 4, caching, swap, {0, 8}};
}

int zeros(std::span<const int32_t> table) {
  return static_cast<int>(std::count(table.begin(), table.end(), 0));
}

// Decodes one token at a time from `from` to `to` tokens, as the scheduler would.
void decode(KVCacheManager& kv, const SeqRef& seq, int from, int to) {
  BlockPairs copies;
  for (int c = from; c < to; ++c) {
    ASSERT_TRUE(kv.allocate_slots(seq, c, 1, nullptr, copies));
    kv.cache_computed_blocks(seq, c + 1);
  }
  EXPECT_TRUE(copies.empty());
}

TEST(KvGroups, SlidingGroupGivesBackWhatTheWindowHasPassed) {
  KVCacheManager kv(two_groups(64));
  EXPECT_EQ(kv.num_blocks(), 63) << "block 0 is the null block";
  const auto t = tokens(40);
  const SeqRef seq{1, t, 0};
  BlockPairs copies;
  ComputedBlocks none = kv.get_computed_blocks(seq);
  ASSERT_TRUE(kv.allocate_slots(seq, 0, 12, &none, copies));  // a 12-token prompt
  kv.cache_computed_blocks(seq, 12);
  EXPECT_EQ(kv.block_table(1, 0).size(), 3u);
  EXPECT_EQ(zeros(kv.block_table(1, 1)), 0);
  decode(kv, seq, 12, 40);
  // The query at position 39 reads keys 32..39: blocks 8 and 9; blocks 0..7 went back. (The
  // allocation for position 39 ran with 39 computed tokens: keys from 32 on.)
  const auto sliding = kv.block_table(1, 1);
  ASSERT_EQ(sliding.size(), 10u);
  EXPECT_EQ(zeros(sliding), 8);
  EXPECT_NE(sliding[8], 0);
  EXPECT_EQ(zeros(kv.block_table(1, 0)), 0) << "the full group keeps every block";
  EXPECT_EQ(kv.num_held_blocks(1), 12);
  EXPECT_EQ(kv.num_free_blocks(), 63 - 12);
  EXPECT_EQ(kv.peak_used_blocks(), 10 + 3) << "positions 36..38: sliding blocks 7, 8 and 9";
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
}

TEST(KvGroups, PrefixHitNeedsOnlyTheWindowsBlocks) {
  KVCacheManager kv(two_groups(64));
  const auto t = tokens(40);
  BlockPairs copies;
  ComputedBlocks none = kv.get_computed_blocks({1, t, 0});
  ASSERT_TRUE(kv.allocate_slots({1, t, 0}, 0, 8, &none, copies));
  kv.cache_computed_blocks({1, t, 0}, 8);
  decode(kv, {1, t, 0}, 8, 32);  // sliding blocks 0..5 given back, still cached while free
  // A second sequence with the same 40 tokens hits the 8 full blocks seq 1 computed; its sliding
  // table has the window's blocks only (query 32 reads keys 25..: blocks 6 and 7).
  ComputedBlocks hit = kv.get_computed_blocks({2, t, 0});
  EXPECT_EQ(hit.num_computed_tokens(), 32);
  kv.free(1);
  hit = kv.get_computed_blocks({2, t, 0});
  ASSERT_EQ(hit.num_computed_tokens(), 32) << "freed blocks stay findable";
  ASSERT_TRUE(kv.allocate_slots({2, t, 0}, 32, 8, &hit, copies));
  const auto sliding = kv.block_table(2, 1);
  ASSERT_EQ(sliding.size(), 10u);
  EXPECT_EQ(zeros(sliding), 6);
  EXPECT_EQ(kv.num_held_blocks(2), 10 + 4);
  EXPECT_EQ(kv.prefix_cache_hits(), 32u);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
}

TEST(KvGroups, HitStopsWhereTheSlidingGroupLostItsWindow) {
  // Seq 1 computes 32 tokens with caching; then the pool is drained so that every free block is
  // evicted. Seq 1 still holds its full blocks 0..7 and sliding blocks 6..7: a hit of h blocks
  // needs sliding blocks from (4h - 7) / 4 on, so h = 8 works, and h = 1..7 would need a block
  // that is gone.
  KVCacheManager kv(two_groups(25));
  const auto t = tokens(32);
  BlockPairs copies;
  ComputedBlocks none = kv.get_computed_blocks({1, t, 0});
  ASSERT_TRUE(kv.allocate_slots({1, t, 0}, 0, 4, &none, copies));
  kv.cache_computed_blocks({1, t, 0}, 4);
  decode(kv, {1, t, 0}, 4, 32);
  ASSERT_EQ(kv.num_held_blocks(1), 8 + 2);
  const int free_now = kv.num_free_blocks();
  ASSERT_EQ(free_now, 14);
  ASSERT_TRUE(
      kv.allocate_slots({9, tokens(2 * free_now, 1000), 0}, 0, 2 * free_now, nullptr, copies));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  kv.free(9);  // the drained blocks come back holding seq 9's content, not seq 1's
  EXPECT_EQ(kv.get_computed_blocks({2, tokens(44), 0}).num_computed_tokens(), 32);
  EXPECT_EQ(kv.get_computed_blocks({3, tokens(30), 0}).num_computed_tokens(), 0);
  kv.free(2);
  kv.free(3);
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
}

TEST(KvGroups, SwapKeepsTheGivenBackBlocksGoneAndForkSharesTheRest) {
  KVCacheManager kv(two_groups(32, false, 16));
  const auto t = tokens(24);
  BlockPairs copies;
  ASSERT_TRUE(kv.allocate_slots({1, t, 0}, 0, 4, nullptr, copies));
  decode(kv, {1, t, 0}, 4, 24);
  const std::vector<int32_t> before(kv.block_table(1, 1).begin(), kv.block_table(1, 1).end());
  EXPECT_EQ(zeros(before), 4) << "query 23 reads keys 16..23";
  ASSERT_TRUE(kv.can_swap_out(1));
  BlockPairs out, in;
  kv.swap_out(1, out);
  EXPECT_EQ(out.size(), 6u + 2u);
  EXPECT_EQ(kv.num_held_blocks(1), 0);
  EXPECT_EQ(kv.num_free_swap_blocks(), 16 - 8);
  ASSERT_TRUE(kv.can_swap_in(1));
  kv.swap_in(1, 24, in);
  EXPECT_EQ(in.size(), 8u);
  EXPECT_EQ(zeros(kv.block_table(1, 1)), 4);
  EXPECT_EQ(kv.num_free_swap_blocks(), 16);
  // A fork shares every held block; the child takes new blocks only for what it writes (blocks
  // 6 and 7 of both groups) and drops its reference to sliding block 4 (seq 1 keeps it).
  kv.fork(1, 2);
  EXPECT_EQ(kv.num_held_blocks(2), 8);
  const int free_before = kv.num_free_blocks();
  decode(kv, {2, tokens(30), 0}, 24, 30);
  EXPECT_EQ(kv.num_free_blocks(), free_before - 4);
  EXPECT_EQ(zeros(kv.block_table(2, 1)), 5);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
}

TEST(KvGroups, PeakBlocksCountTheWindowAndTheStep) {
  KVCacheManager kv(two_groups(1000));
  // 400 tokens in steps of at most 16: full 100 blocks; sliding (8 - 1 + 16) / 4 rounded up + 1.
  EXPECT_EQ(kv.peak_blocks_for(400, 16), 100 + 7);
  EXPECT_EQ(kv.peak_blocks_for(10, 2048), 3 + 3) << "short sequences hold every block";
  KVCacheManager full({100, 4, true, 0});
  EXPECT_EQ(full.peak_blocks_for(400, 16), 100);
  EXPECT_EQ(full.num_blocks(), 100) << "no null block without a sliding group";
  EXPECT_THROW(KVCacheManager(KVCacheConfig{1, 4, true, 0, {0, 8}}), Error);
  EXPECT_THROW(KVCacheManager(KVCacheConfig{8, 4, true, 0, {}}), Error);
  EXPECT_THROW(KVCacheManager(KVCacheConfig{8, 4, true, 0, std::vector<int>(kMaxKvGroups + 1, 0)}),
               Error);
}

}  // namespace
}  // namespace pagellm::kv
