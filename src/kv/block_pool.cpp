#include "kv/block_pool.h"

#include <string>

#include "common/error.h"

namespace pagellm::kv {

FreeBlockQueue::FreeBlockQueue() {
  head_.next_free = &tail_;
  tail_.prev_free = &head_;
}

KVBlock* FreeBlockQueue::pop_front() {
  if (num_free_ == 0) throw_error(ErrorKind::kInternal, "kv: pop from an empty free-block queue");
  KVBlock* b = head_.next_free;
  remove(b);
  return b;
}

void FreeBlockQueue::append(KVBlock* block) {
  KVBlock* last = tail_.prev_free;
  last->next_free = block;
  block->prev_free = last;
  block->next_free = &tail_;
  tail_.prev_free = block;
  ++num_free_;
}

void FreeBlockQueue::remove(KVBlock* block) {
  block->prev_free->next_free = block->next_free;
  block->next_free->prev_free = block->prev_free;
  block->prev_free = nullptr;
  block->next_free = nullptr;
  --num_free_;
}

BlockPool::BlockPool(int num_blocks, bool enable_caching)
    : blocks_(static_cast<size_t>(num_blocks)), enable_caching_(enable_caching) {
  for (int i = 0; i < num_blocks; ++i) {
    blocks_[static_cast<size_t>(i)].block_id = i;
    free_queue_.append(&blocks_[static_cast<size_t>(i)]);
  }
  cached_.reserve(static_cast<size_t>(num_blocks));
}

double BlockPool::usage() const {
  if (blocks_.empty()) return 0.0;
  return 1.0 - static_cast<double>(free_queue_.size()) / static_cast<double>(blocks_.size());
}

void BlockPool::evict(KVBlock* block) {
  if (!block->has_hash) return;
  auto it = cached_.find(block->hash);
  if (it != cached_.end() && it->second == block) cached_.erase(it);
  block->has_hash = false;
  block->hash = 0;
}

void BlockPool::get_new_blocks(int n, std::vector<KVBlock*>& out) {
  if (n > free_queue_.size()) {
    throw_error(ErrorKind::kInternal, "kv: asked for " + std::to_string(n) + " blocks with only " +
                                          std::to_string(free_queue_.size()) + " free");
  }
  for (int i = 0; i < n; ++i) {
    KVBlock* b = free_queue_.pop_front();
    evict(b);
    b->ref_cnt = 1;
    out.push_back(b);
  }
}

KVBlock* BlockPool::get_cached_block(BlockHash hash) const {
  auto it = cached_.find(hash);
  return it == cached_.end() ? nullptr : it->second;
}

void BlockPool::touch(std::span<KVBlock* const> blocks) {
  for (KVBlock* b : blocks) {
    if (b->ref_cnt == 0) free_queue_.remove(b);
    ++b->ref_cnt;
  }
}

void BlockPool::cache_full_block(KVBlock* block, BlockHash hash) {
  if (!enable_caching_ || block->has_hash) return;
  auto [it, inserted] = cached_.try_emplace(hash, block);
  if (!inserted) return;
  block->has_hash = true;
  block->hash = hash;
}

void BlockPool::free_block(KVBlock* b) {
  if (b->ref_cnt <= 0) {
    throw_error(ErrorKind::kInternal, "kv: double free of block " + std::to_string(b->block_id));
  }
  if (--b->ref_cnt == 0) free_queue_.append(b);
}

void BlockPool::free_blocks(std::span<KVBlock* const> blocks) {
  for (KVBlock* b : blocks) free_block(b);
}

bool BlockPool::reset_prefix_cache() {
  if (free_queue_.size() != num_blocks()) return false;
  for (KVBlock& b : blocks_) {
    b.has_hash = false;
    b.hash = 0;
  }
  cached_.clear();
  return true;
}

}  // namespace pagellm::kv
