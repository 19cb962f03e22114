#include <gtest/gtest.h>

#include "common/error.h"
#include "kv/block_pool.h"

namespace pagellm::kv {
namespace {

std::vector<int32_t> ids(const std::vector<KVBlock*>& blocks) {
  std::vector<int32_t> out;
  for (const KVBlock* b : blocks) out.push_back(b->block_id);
  return out;
}

TEST(BlockPool, HandsOutBlocksInLruOrderAndRefCounts) {
  BlockPool pool(4, true);
  std::vector<KVBlock*> a;
  pool.get_new_blocks(3, a);
  EXPECT_EQ(ids(a), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_DOUBLE_EQ(pool.usage(), 0.75);
  pool.touch({&a[1], 1});
  pool.free_blocks(a);  // block 1 is still referenced
  EXPECT_EQ(pool.num_free_blocks(), 3);
  EXPECT_EQ(a[1]->ref_cnt, 1);
  pool.free_block(a[1]);
  // Free order: 3 (never used), 0, 2, 1.
  std::vector<KVBlock*> b;
  pool.get_new_blocks(4, b);
  EXPECT_EQ(ids(b), (std::vector<int32_t>{3, 0, 2, 1}));
  EXPECT_THROW(pool.get_new_blocks(1, b), Error);
  pool.free_blocks(b);
  EXPECT_THROW(pool.free_block(b[0]), Error);  // double free
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(BlockPool, CachedBlocksStayFindableUntilEvicted) {
  BlockPool pool(2, true);
  std::vector<KVBlock*> a;
  pool.get_new_blocks(2, a);
  pool.cache_full_block(a[0], 111);
  pool.cache_full_block(a[1], 111);  // same content computed twice: the first one wins
  EXPECT_EQ(pool.get_cached_block(111), a[0]);
  EXPECT_FALSE(a[1]->has_hash);
  pool.free_blocks(a);
  EXPECT_EQ(pool.get_cached_block(111), a[0]);  // free but cached
  pool.touch({&a[0], 1});                       // prefix hit pulls it out of the free queue
  EXPECT_EQ(pool.num_free_blocks(), 1);
  pool.free_block(a[0]);
  std::vector<KVBlock*> b;
  pool.get_new_blocks(1, b);  // LRU head is block 1 (freed before block 0 went back)
  EXPECT_EQ(b[0]->block_id, 1);
  EXPECT_EQ(pool.get_cached_block(111), a[0]);
  pool.get_new_blocks(1, b);  // now block 0 is evicted
  EXPECT_EQ(pool.get_cached_block(111), nullptr);
  EXPECT_FALSE(pool.reset_prefix_cache());  // blocks in use
  pool.free_blocks(b);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_EQ(pool.num_cached_blocks(), 0);
}

TEST(BlockPool, CachingDisabledNeverRegisters) {
  BlockPool pool(1, false);
  std::vector<KVBlock*> a;
  pool.get_new_blocks(1, a);
  pool.cache_full_block(a[0], 5);
  EXPECT_EQ(pool.get_cached_block(5), nullptr);
  pool.free_blocks(a);
}

}  // namespace
}  // namespace pagellm::kv
