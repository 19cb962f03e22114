// The physical KV block pool: ref-counted blocks, an LRU queue of free blocks, and the prefix cache's
// hash → block map. A free block keeps its hash (and stays findable) until it is handed out again, so
// the queue's head is always the least recently freed block and the first to lose its cached content.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace pagellm::kv {

using BlockHash = uint64_t;

struct KVBlock {
  int32_t block_id = 0;
  int32_t ref_cnt = 0;
  bool has_hash = false;  // registered in the prefix cache under `hash`
  BlockHash hash = 0;
  // Intrusive links of the free queue; both null while the block is in use.
  KVBlock* prev_free = nullptr;
  KVBlock* next_free = nullptr;
};

// Doubly-linked list threaded through the blocks themselves: O(1) pop-front, append, and removal from
// the middle (a cached free block reused by a prefix hit).
class FreeBlockQueue {
 public:
  FreeBlockQueue();
  FreeBlockQueue(const FreeBlockQueue&) = delete;
  FreeBlockQueue& operator=(const FreeBlockQueue&) = delete;
  KVBlock* pop_front();
  void append(KVBlock* block);
  void remove(KVBlock* block);
  int size() const { return num_free_; }

 private:
  KVBlock head_;  // sentinels
  KVBlock tail_;
  int num_free_ = 0;
};

class BlockPool {
 public:
  BlockPool(int num_blocks, bool enable_caching);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int num_free_blocks() const { return free_queue_.size(); }
  // Fraction of blocks referenced by a sequence (cached free blocks count as free).
  double usage() const;
  bool caching_enabled() const { return enable_caching_; }

  // Pops `n` blocks from the free queue (evicting their cached content) with ref count 1. The caller
  // checks num_free_blocks() first.
  void get_new_blocks(int n, std::vector<KVBlock*>& out);
  // The cached block holding `hash`, or null.
  KVBlock* get_cached_block(BlockHash hash) const;
  // Takes a reference on each block (a prefix hit), pulling free ones out of the queue.
  void touch(std::span<KVBlock* const> blocks);
  // Registers a full block under `hash`. A block already cached under the same hash wins and this one
  // stays unregistered (two sequences computed the same content in the same step).
  void cache_full_block(KVBlock* block, BlockHash hash);
  // Drops one reference from each block, in order; blocks reaching zero join the queue's tail, so
  // callers pass a sequence's blocks tail-first to have its last blocks evicted first.
  void free_blocks(std::span<KVBlock* const> blocks);
  void free_block(KVBlock* block);
  // Forgets every cached hash (blocks in use keep their content). Returns false when blocks are in use.
  bool reset_prefix_cache();

  KVBlock* block(int32_t id) { return &blocks_[static_cast<size_t>(id)]; }
  int num_cached_blocks() const { return static_cast<int>(cached_.size()); }

 private:
  void evict(KVBlock* block);

  std::vector<KVBlock> blocks_;  // [num_blocks]; never resized, so pointers stay valid
  FreeBlockQueue free_queue_;
  std::unordered_map<BlockHash, KVBlock*> cached_;
  bool enable_caching_;
};

}  // namespace pagellm::kv
