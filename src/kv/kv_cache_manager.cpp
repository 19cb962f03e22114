#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/error.h"

namespace pagellm::kv {

KVCacheManager::KVCacheManager(const KVCacheConfig& config)
    : pool_(config.num_blocks, config.enable_prefix_caching),
      block_size_(config.block_size),
      enable_caching_(config.enable_prefix_caching),
      num_swap_blocks_(static_cast<size_t>(std::max(config.num_swap_blocks, 0))) {
  if (config.num_blocks < 1 || config.block_size < 1) {
    invalid_argument("kv cache: need at least one block of at least one token (got " +
                     std::to_string(config.num_blocks) + " blocks of " +
                     std::to_string(config.block_size) + ")");
  }
  // Highest id on top so that pop_back hands out low ids first (easier to read in tests).
  for (size_t i = num_swap_blocks_; i > 0; --i) free_swap_blocks_.push_back(static_cast<int32_t>(i - 1));
}

BlockHash KVCacheManager::hash_salt(std::string_view salt) {
  if (salt.empty()) return 0;
  // Never 0, so a salted request cannot collide with the unsalted chain by construction.
  return XXH3_64bits(salt.data(), salt.size()) | 1;
}

BlockHash KVCacheManager::hash_block(BlockHash parent, std::span<const int32_t> tokens,
                                     BlockHash extra) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &parent, sizeof(parent));
  XXH3_64bits_update(&st, tokens.data(), tokens.size_bytes());
  XXH3_64bits_update(&st, &extra, sizeof(extra));
  return XXH3_64bits_digest(&st);
}

KVCacheManager::SeqBlocks& KVCacheManager::state(int64_t seq_id) { return seqs_[seq_id]; }

void KVCacheManager::extend_hashes(SeqBlocks& s, const SeqRef& seq, int num_full_blocks) const {
  const size_t bs = static_cast<size_t>(block_size_);
  while (static_cast<int>(s.hashes.size()) < num_full_blocks) {
    const size_t i = s.hashes.size();
    const BlockHash parent = i == 0 ? 0 : s.hashes[i - 1];
    s.hashes.push_back(hash_block(parent, seq.token_ids.subspan(i * bs, bs), seq.extra_hash));
  }
}

ComputedBlocks KVCacheManager::get_computed_blocks(const SeqRef& seq) {
  ComputedBlocks out;
  const int num_tokens = static_cast<int>(seq.token_ids.size());
  out.num_queried_tokens_ = num_tokens;
  if (!enable_caching_ || num_tokens <= 1) return out;
  const int max_hit_blocks = (num_tokens - 1) / block_size_;
  SeqBlocks& s = state(seq.seq_id);
  for (int i = 0; i < max_hit_blocks; ++i) {
    extend_hashes(s, seq, i + 1);
    KVBlock* b = pool_.get_cached_block(s.hashes[static_cast<size_t>(i)]);
    if (b == nullptr) break;
    out.blocks_.push_back(b);
  }
  out.num_computed_tokens_ = out.num_blocks() * block_size_;
  return out;
}

void KVCacheManager::push_block(SeqBlocks& s, KVBlock* b) {
  s.blocks.push_back(b);
  s.block_ids.push_back(b->block_id);
}

void KVCacheManager::cache_full_blocks(SeqBlocks& s, const SeqRef& seq, int num_tokens) {
  const int num_full = std::min(num_tokens / block_size_, static_cast<int>(s.blocks.size()));
  if (!enable_caching_) {
    s.num_cached_blocks = std::max(s.num_cached_blocks, num_full);
    return;
  }
  if (s.num_cached_blocks >= num_full) return;
  extend_hashes(s, seq, num_full);
  for (int i = s.num_cached_blocks; i < num_full; ++i) {
    pool_.cache_full_block(s.blocks[static_cast<size_t>(i)], s.hashes[static_cast<size_t>(i)]);
  }
  s.num_cached_blocks = num_full;
}

bool KVCacheManager::allocate_slots(const SeqRef& seq, int num_computed_tokens, int num_new_tokens,
                                    const ComputedBlocks* new_computed, BlockPairs& blocks_to_copy) {
  SeqBlocks& s = state(seq.seq_id);
  const int num_hit_blocks = new_computed ? new_computed->num_blocks() : 0;
  const int total_tokens = num_computed_tokens + num_new_tokens;
  const int num_have = static_cast<int>(s.blocks.size()) + num_hit_blocks;
  const int num_new_blocks = std::max(0, blocks_for(total_tokens) - num_have);

  // Copy-on-write: the first token written lands in a partially filled block that another sequence
  // (a forked sample) still references.
  const size_t write_block = static_cast<size_t>(num_computed_tokens / block_size_);
  const bool needs_cow = num_new_tokens > 0 && num_computed_tokens % block_size_ != 0 &&
                         write_block < s.blocks.size() && s.blocks[write_block]->ref_cnt > 1;
  // Hit blocks that sit in the free queue stop being free once referenced.
  int num_evictable_hits = 0;
  if (new_computed) {
    for (const KVBlock* b : new_computed->blocks_) num_evictable_hits += b->ref_cnt == 0;
  }
  if (num_new_blocks + (needs_cow ? 1 : 0) + num_evictable_hits > pool_.num_free_blocks()) return false;

  if (new_computed) {
    pool_.touch(new_computed->blocks_);
    for (KVBlock* b : new_computed->blocks_) push_block(s, b);
    s.num_cached_blocks = static_cast<int>(s.blocks.size());
    num_queried_tokens_ += static_cast<uint64_t>(new_computed->num_queried_tokens_);
    num_hit_tokens_ += static_cast<uint64_t>(new_computed->num_computed_tokens_);
  }
  if (needs_cow) {
    scratch_.clear();
    pool_.get_new_blocks(1, scratch_);
    KVBlock* old = s.blocks[write_block];
    blocks_to_copy.emplace_back(old->block_id, scratch_[0]->block_id);
    pool_.free_block(old);
    s.blocks[write_block] = scratch_[0];
    s.block_ids[write_block] = scratch_[0]->block_id;
  }
  scratch_.clear();
  pool_.get_new_blocks(num_new_blocks, scratch_);
  for (KVBlock* b : scratch_) push_block(s, b);
  return true;
}

void KVCacheManager::cache_computed_blocks(const SeqRef& seq, int num_computed_tokens) {
  auto it = seqs_.find(seq.seq_id);
  if (it != seqs_.end()) cache_full_blocks(it->second, seq, num_computed_tokens);
}

void KVCacheManager::free(int64_t seq_id) {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return;
  SeqBlocks& s = it->second;
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b) pool_.free_block(*b);
  for (int32_t h : s.host_blocks) free_swap_blocks_.push_back(h);
  seqs_.erase(it);
}

void KVCacheManager::fork(int64_t parent_seq_id, int64_t child_seq_id) {
  SeqBlocks copy = state(parent_seq_id);
  if (!copy.host_blocks.empty()) {
    throw_error(ErrorKind::kInternal, "kv: cannot fork a swapped-out sequence");
  }
  pool_.touch(copy.blocks);
  seqs_[child_seq_id] = std::move(copy);
}

bool KVCacheManager::can_swap_out(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || num_swap_blocks_ == 0) return false;
  return it->second.blocks.size() <= free_swap_blocks_.size();
}

void KVCacheManager::swap_out(int64_t seq_id, BlockPairs& blocks_to_swap_out) {
  SeqBlocks& s = state(seq_id);
  if (s.blocks.size() > free_swap_blocks_.size()) {
    throw_error(ErrorKind::kInternal, "kv: swap_out without enough host blocks");
  }
  for (KVBlock* b : s.blocks) {
    const int32_t host = free_swap_blocks_.back();
    free_swap_blocks_.pop_back();
    blocks_to_swap_out.emplace_back(b->block_id, host);
    s.host_blocks.push_back(host);
  }
  for (auto b = s.blocks.rbegin(); b != s.blocks.rend(); ++b) pool_.free_block(*b);
  s.blocks.clear();
  s.block_ids.clear();
}

bool KVCacheManager::can_swap_in(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return false;
  return static_cast<int>(it->second.host_blocks.size()) <= pool_.num_free_blocks();
}

void KVCacheManager::swap_in(int64_t seq_id, int num_computed_tokens, BlockPairs& blocks_to_swap_in) {
  SeqBlocks& s = state(seq_id);
  scratch_.clear();
  pool_.get_new_blocks(static_cast<int>(s.host_blocks.size()), scratch_);
  for (size_t i = 0; i < scratch_.size(); ++i) {
    blocks_to_swap_in.emplace_back(s.host_blocks[i], scratch_[i]->block_id);
    push_block(s, scratch_[i]);
    free_swap_blocks_.push_back(s.host_blocks[i]);
  }
  s.host_blocks.clear();
  // The restored blocks are private copies; the originals may still be cached under the same hashes.
  s.num_cached_blocks = std::min(num_computed_tokens / block_size_, static_cast<int>(s.blocks.size()));
}

std::span<const int32_t> KVCacheManager::block_table(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return {};
  return it->second.block_ids;
}

}  // namespace pagellm::kv
