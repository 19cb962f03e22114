// KVCacheManager: block tables, prefix-cache hits / misses / eviction / salt, copy-on-write, swap.
// Every test ends with all blocks free.
#include <numeric>

#include <gtest/gtest.h>

#include "kv/kv_cache_manager.h"
#include "kv_test_util.h"

namespace pagellm::kv {
namespace {

using testing::tokens;

// Allocates and "computes" the whole sequence, as a step would.
void run_prefill(KVCacheManager& kv, const SeqRef& seq) {
  BlockPairs copies;
  ComputedBlocks hit = kv.get_computed_blocks(seq);
  const int n = static_cast<int>(seq.token_ids.size());
  ASSERT_TRUE(kv.allocate_slots(seq, hit.num_computed_tokens(), n - hit.num_computed_tokens(), &hit, copies));
  kv.cache_computed_blocks(seq, n);
}

void expect_all_free(const KVCacheManager& kv) {
  EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
  EXPECT_EQ(kv.num_seqs(), 0);
}

TEST(KVCache, HashChainsOverParentTokensAndSalt) {
  const auto t = tokens(4);
  const BlockHash h = KVCacheManager::hash_block(0, t, 0);
  EXPECT_EQ(h, KVCacheManager::hash_block(0, t, 0));
  EXPECT_NE(h, KVCacheManager::hash_block(1, t, 0));
  EXPECT_NE(h, KVCacheManager::hash_block(0, t, KVCacheManager::hash_salt("a")));
  EXPECT_NE(h, KVCacheManager::hash_block(0, tokens(4, 1), 0));
  EXPECT_EQ(KVCacheManager::hash_salt(""), 0u);
  EXPECT_NE(KVCacheManager::hash_salt("a"), KVCacheManager::hash_salt("b"));
}

TEST(KVCache, AllocatesOnDemandAndFreesEverything) {
  KVCacheManager kv({8, 4, true, 0});
  const auto t = tokens(10);
  BlockPairs copies;
  ComputedBlocks hit = kv.get_computed_blocks({1, t, 0});
  EXPECT_EQ(hit.num_computed_tokens(), 0);
  ASSERT_TRUE(kv.allocate_slots({1, t, 0}, 0, 6, &hit, copies));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate_slots({1, t, 0}, 6, 2, nullptr, copies));  // fits in block 1
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  ASSERT_TRUE(kv.allocate_slots({1, t, 0}, 8, 2, nullptr, copies));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_FALSE(kv.allocate_slots({2, tokens(30), 0}, 0, 30, nullptr, copies));  // 8 blocks > 5 free
  EXPECT_EQ(kv.num_free_blocks(), 5) << "a failed allocation changes nothing";
  EXPECT_TRUE(copies.empty());
  kv.free(1);
  kv.free(2);
  kv.free(99);  // unknown: ignored
  expect_all_free(kv);
}

TEST(KVCache, PrefixHitMissSaltAndTheLastTokenRule) {
  KVCacheManager kv({16, 4, true, 0});
  const auto t = tokens(12);
  run_prefill(kv, {1, t, 0});
  // Same 12 tokens: 3 full blocks cached, but the last token must be computed → 2 blocks hit.
  ComputedBlocks hit = kv.get_computed_blocks({2, t, 0});
  EXPECT_EQ(hit.num_computed_tokens(), 8);
  // A longer sequence with the same prefix hits all 3.
  auto longer = tokens(15);
  EXPECT_EQ(kv.get_computed_blocks({3, longer, 0}).num_computed_tokens(), 12);
  // A different second block stops the chain after the first block.
  auto diverged = t;
  diverged[5] = 999;
  EXPECT_EQ(kv.get_computed_blocks({4, diverged, 0}).num_computed_tokens(), 4);
  // A salt isolates the request.
  EXPECT_EQ(kv.get_computed_blocks({5, t, KVCacheManager::hash_salt("tenant")}).num_computed_tokens(), 0);
  // Hits are shared by reference.
  BlockPairs copies;
  ASSERT_TRUE(kv.allocate_slots({2, t, 0}, 8, 4, &hit, copies));
  EXPECT_EQ(kv.block_table(2)[0], kv.block_table(1)[0]);
  EXPECT_EQ(kv.block_table(2)[1], kv.block_table(1)[1]);
  EXPECT_NE(kv.block_table(2)[2], kv.block_table(1)[2]);
  EXPECT_EQ(kv.prefix_cache_queries(), 24u);  // two admitted sequences of 12
  EXPECT_EQ(kv.prefix_cache_hits(), 8u);
  for (int64_t id : {1, 2, 3, 4, 5}) kv.free(id);
  expect_all_free(kv);
}

TEST(KVCache, FreedBlocksStayCachedUntilEvictedLruFirst) {
  KVCacheManager kv({4, 4, true, 0});
  const auto a = tokens(9);        // 3 blocks (2 full + 1 partial)
  run_prefill(kv, {1, a, 0});
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.get_computed_blocks({2, a, 0}).num_computed_tokens(), 8);
  kv.free(2);
  // Another sequence needs 3 blocks: the never-used block, then a's blocks tail first, so a's first
  // full block survives and its second is evicted.
  run_prefill(kv, {3, tokens(12, 100), 0});
  EXPECT_EQ(kv.get_computed_blocks({4, a, 0}).num_computed_tokens(), 4);
  kv.free(3);
  kv.free(4);
  // Filling the whole pool evicts everything of a.
  run_prefill(kv, {5, tokens(16, 200), 0});
  EXPECT_EQ(kv.get_computed_blocks({6, a, 0}).num_computed_tokens(), 0);
  kv.free(5);
  kv.free(6);
  expect_all_free(kv);
}

TEST(KVCache, HitOnFreeBlocksCountsAgainstTheFreePool) {
  KVCacheManager kv({3, 4, true, 0});
  const auto a = tokens(9);
  run_prefill(kv, {1, a, 0});
  kv.free(1);
  BlockPairs copies;
  ComputedBlocks hit = kv.get_computed_blocks({2, a, 0});
  ASSERT_EQ(hit.num_blocks(), 2);
  // The two hit blocks leave the free queue; one block remains for token 8, none for more.
  EXPECT_FALSE(kv.allocate_slots({2, tokens(13), 0}, 8, 5, &hit, copies));
  EXPECT_TRUE(kv.allocate_slots({2, a, 0}, 8, 1, &hit, copies));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  kv.free(2);
  expect_all_free(kv);
}

TEST(KVCache, DisabledCachingNeverHits) {
  KVCacheManager kv({8, 4, false, 0});
  const auto a = tokens(9);
  run_prefill(kv, {1, a, 0});
  EXPECT_EQ(kv.get_computed_blocks({2, a, 0}).num_computed_tokens(), 0);
  kv.free(1);
  kv.free(2);
  expect_all_free(kv);
}

TEST(KVCache, ForkSharesBlocksAndCopiesOnWrite) {
  KVCacheManager kv({8, 4, true, 0});
  auto t = tokens(6);
  run_prefill(kv, {1, t, 0});  // blocks: [0..3] full, [4,5] partial
  kv.fork(1, 2);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  auto t1 = t;
  t1.push_back(50);
  auto t2 = t;
  t2.push_back(60);
  BlockPairs copies;
  ASSERT_TRUE(kv.allocate_slots({2, t2, 0}, 6, 1, nullptr, copies));  // shared partial block: copy
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].first, kv.block_table(1)[1]);
  EXPECT_EQ(copies[0].second, kv.block_table(2)[1]);
  EXPECT_EQ(kv.block_table(1)[0], kv.block_table(2)[0]);  // the full block stays shared
  copies.clear();
  ASSERT_TRUE(kv.allocate_slots({1, t1, 0}, 6, 1, nullptr, copies));  // now sole owner: in place
  EXPECT_TRUE(copies.empty());
  kv.free(1);
  EXPECT_EQ(kv.num_free_blocks(), 6);  // block 0 still held by seq 2
  kv.free(2);
  expect_all_free(kv);
}

TEST(KVCache, SwapOutAndBackIn) {
  KVCacheManager kv({4, 4, true, 3});
  const auto t = tokens(10);
  run_prefill(kv, {1, t, 0});
  ASSERT_TRUE(kv.can_swap_out(1));
  BlockPairs out;
  const std::vector<int32_t> before(kv.block_table(1).begin(), kv.block_table(1).end());
  kv.swap_out(1, out);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].first, before[0]);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.num_free_swap_blocks(), 0);
  EXPECT_TRUE(kv.block_table(1).empty());
  run_prefill(kv, {2, tokens(4, 70), 0});
  EXPECT_TRUE(kv.can_swap_in(1));
  BlockPairs in;
  kv.swap_in(1, 10, in);
  ASSERT_EQ(in.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(in[i].first, out[i].second);
    EXPECT_EQ(in[i].second, kv.block_table(1)[i]);
  }
  EXPECT_TRUE(kv.can_swap_out(1));  // host blocks came back
  kv.free(1);
  kv.free(2);
  expect_all_free(kv);
  EXPECT_EQ(kv.num_free_swap_blocks(), 3);
}

}  // namespace
}  // namespace pagellm::kv
