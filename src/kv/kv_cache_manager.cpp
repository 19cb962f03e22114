#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <array>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/error.h"

namespace pagellm::kv {

KVCacheManager::KVCacheManager(const KVCacheConfig& config)
    : pool_(config.num_blocks, config.enable_prefix_caching),
      block_size_(config.block_size),
      group_windows_(config.group_windows),
      enable_caching_(config.enable_prefix_caching),
      num_swap_blocks_(static_cast<size_t>(std::max(config.num_swap_blocks, 0))) {
  if (config.num_blocks < 1 || config.block_size < 1) {
    invalid_argument("kv cache: need at least one block of at least one token (got " +
                     std::to_string(config.num_blocks) + " blocks of " +
                     std::to_string(config.block_size) + ")");
  }
  if (group_windows_.empty() || num_groups() > kMaxKvGroups) {
    invalid_argument("kv cache: need 1 to " + std::to_string(kMaxKvGroups) + " groups (got " +
                     std::to_string(group_windows_.size()) + ")");
  }
  for (int w : group_windows_) {
    if (w < 0)
      invalid_argument("kv cache: a group's window must be >= 0 (got " + std::to_string(w) + ")");
  }
  // Blocks a sliding group gave back read as block 0 in its table: with a sliding group, block 0 is
  // held here for good, so nothing is ever written to it (the runners keep it zero).
  if (std::any_of(group_windows_.begin(), group_windows_.end(), [](int w) { return w > 0; })) {
    if (config.num_blocks < 2)
      invalid_argument("kv cache: a sliding-window group needs at least 2 blocks");
    pool_.get_new_blocks(1, scratch_);
    scratch_.clear();
    num_reserved_ = 1;
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

BlockHash KVCacheManager::group_key(BlockHash hash, int group) const {
  if (group == 0) return hash;
  const uint64_t parts[2] = {hash, static_cast<uint64_t>(group)};
  return XXH3_64bits(parts, sizeof(parts));
}

int KVCacheManager::first_needed_block(int group, int position) const {
  const int w = group_windows_[static_cast<size_t>(group)];
  return w == 0 ? 0 : std::max(0, position - w + 1) / block_size_;
}

int KVCacheManager::peak_blocks_for(int num_tokens, int max_step_tokens) const {
  const int all = blocks_for(num_tokens);
  int total = 0;
  for (int w : group_windows_) {
    // A step's queries [c, c + m) read keys from c - w + 1 on: w - 1 + m positions, unaligned.
    total +=
        w == 0 ? all : std::min(all, (w - 1 + max_step_tokens + block_size_ - 1) / block_size_ + 1);
  }
  return total;
}

int KVCacheManager::num_held_blocks(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return 0;
  int n = 0;
  for (const GroupBlocks& g : it->second.groups)
    for (const KVBlock* b : g.blocks) n += b != nullptr;
  return n;
}

KVCacheManager::SeqBlocks& KVCacheManager::state(int64_t seq_id) {
  SeqBlocks& s = seqs_[seq_id];
  if (s.groups.empty()) s.groups.resize(group_windows_.size());
  return s;
}

void KVCacheManager::extend_hashes(SeqBlocks& s, const SeqRef& seq, int num_full_blocks) const {
  const size_t bs = static_cast<size_t>(block_size_);
  while (static_cast<int>(s.hashes.size()) < num_full_blocks) {
    const size_t i = s.hashes.size();
    const BlockHash parent = i == 0 ? 0 : s.hashes[i - 1];
    s.hashes.push_back(hash_block(parent, seq.token_ids.subspan(i * bs, bs), seq.extra_hash));
  }
}

int KVCacheManager::longest_common_hit(const std::vector<std::vector<KVBlock*>>& found,
                                       int max_blocks) const {
  for (int h = max_blocks; h > 0; --h) {
    bool ok = true;
    for (int g = 0; g < num_groups() && ok; ++g) {
      const auto& blocks = found[static_cast<size_t>(g)];
      if (group_windows_[static_cast<size_t>(g)] == 0) {  // a run of hits: every block up to h
        ok = h <= static_cast<int>(blocks.size());
        continue;
      }
      for (int i = first_needed_block(g, h * block_size_); i < h && ok; ++i) {
        ok = i < static_cast<int>(blocks.size()) && blocks[static_cast<size_t>(i)] != nullptr;
      }
    }
    if (ok) return h;
  }
  return 0;
}

ComputedBlocks KVCacheManager::get_computed_blocks(const SeqRef& seq) {
  ComputedBlocks out;
  const int num_tokens = static_cast<int>(seq.token_ids.size());
  out.num_queried_tokens_ = num_tokens;
  out.blocks_.resize(group_windows_.size());
  if (!enable_caching_ || num_tokens <= 1) return out;
  SeqBlocks& s = state(seq.seq_id);
  // A full group's hit ends at its first miss; a sliding group's blocks are looked up as far.
  int max_hit_blocks = (num_tokens - 1) / block_size_;
  extend_hashes(s, seq, max_hit_blocks);
  std::vector<std::vector<KVBlock*>> found(group_windows_.size());
  for (int pass = 0; pass < 2; ++pass) {
    for (int g = 0; g < num_groups(); ++g) {
      if ((group_windows_[static_cast<size_t>(g)] == 0) != (pass == 0)) continue;
      auto& blocks = found[static_cast<size_t>(g)];
      for (int i = 0; i < max_hit_blocks; ++i) {
        KVBlock* b = pool_.get_cached_block(group_key(s.hashes[static_cast<size_t>(i)], g));
        if (b == nullptr && pass == 0) break;
        blocks.push_back(b);
      }
      if (pass == 0) max_hit_blocks = std::min(max_hit_blocks, static_cast<int>(blocks.size()));
    }
  }
  const int hit = longest_common_hit(found, max_hit_blocks);
  for (int g = 0; g < num_groups(); ++g) {
    auto& blocks = out.blocks_[static_cast<size_t>(g)];
    const int first = first_needed_block(g, hit * block_size_);
    for (int i = 0; i < hit; ++i)
      blocks.push_back(i < first ? nullptr : found[static_cast<size_t>(g)][static_cast<size_t>(i)]);
  }
  out.num_blocks_ = hit;
  out.num_computed_tokens_ = hit * block_size_;
  return out;
}

void KVCacheManager::push_block(GroupBlocks& g, KVBlock* b) {
  g.blocks.push_back(b);
  g.block_ids.push_back(b ? b->block_id : 0);
}

void KVCacheManager::cache_full_blocks(SeqBlocks& s, const SeqRef& seq, int num_tokens) {
  const int num_full =
      std::min(num_tokens / block_size_, static_cast<int>(s.groups[0].blocks.size()));
  if (!enable_caching_) {
    s.num_cached_blocks = std::max(s.num_cached_blocks, num_full);
    return;
  }
  if (s.num_cached_blocks >= num_full) return;
  extend_hashes(s, seq, num_full);
  for (int g = 0; g < num_groups(); ++g) {
    const GroupBlocks& gb = s.groups[static_cast<size_t>(g)];
    for (int i = s.num_cached_blocks; i < num_full; ++i) {
      KVBlock* b = gb.blocks[static_cast<size_t>(i)];
      if (b != nullptr) pool_.cache_full_block(b, group_key(s.hashes[static_cast<size_t>(i)], g));
    }
  }
  s.num_cached_blocks = num_full;
}

void KVCacheManager::release_passed_blocks(GroupBlocks& g, int group, int num_computed_tokens) {
  const int first =
      std::min(first_needed_block(group, num_computed_tokens), static_cast<int>(g.blocks.size()));
  for (int i = first - 1; i >= g.num_released; --i) {  // the later ones first: evicted last
    KVBlock*& b = g.blocks[static_cast<size_t>(i)];
    if (b == nullptr) continue;
    pool_.free_block(b);
    b = nullptr;
    g.block_ids[static_cast<size_t>(i)] = 0;
  }
  g.num_released = std::max(g.num_released, first);
}

bool KVCacheManager::allocate_slots(const SeqRef& seq, int num_computed_tokens, int num_new_tokens,
                                    const ComputedBlocks* new_computed, BlockPairs& blocks_to_copy) {
  SeqBlocks& s = state(seq.seq_id);
  const int num_hit_blocks = new_computed ? new_computed->num_blocks() : 0;
  const int total_tokens = num_computed_tokens + num_new_tokens;
  // Blocks every later query's window has passed are given back first: nothing reads them again.
  if (new_computed == nullptr) {
    for (int g = 0; g < num_groups(); ++g) {
      if (group_windows_[static_cast<size_t>(g)] > 0)
        release_passed_blocks(s.groups[static_cast<size_t>(g)], g, num_computed_tokens);
    }
  }
  std::array<GroupPlan, kMaxKvGroups> plans{};  // no allocation: this runs per sequence per step
  int num_needed = 0;
  const size_t write_block = static_cast<size_t>(num_computed_tokens / block_size_);
  for (int g = 0; g < num_groups(); ++g) {
    const GroupBlocks& gb = s.groups[static_cast<size_t>(g)];
    GroupPlan& p = plans[static_cast<size_t>(g)];
    p.num_new_blocks =
        std::max(0, blocks_for(total_tokens) - static_cast<int>(gb.blocks.size()) - num_hit_blocks);
    // Copy-on-write: the first token written lands in a partially filled block that another
    // sequence (a forked sample) still references.
    p.needs_cow = num_new_tokens > 0 && num_computed_tokens % block_size_ != 0 &&
                  write_block < gb.blocks.size() && gb.blocks[write_block] != nullptr &&
                  gb.blocks[write_block]->ref_cnt > 1;
    num_needed += p.num_new_blocks + (p.needs_cow ? 1 : 0);
  }
  // Hit blocks that sit in the free queue stop being free once referenced.
  if (new_computed) {
    for (const auto& blocks : new_computed->blocks_)
      for (const KVBlock* b : blocks) num_needed += b != nullptr && b->ref_cnt == 0;
  }
  if (num_needed > pool_.num_free_blocks()) return false;

  for (int g = 0; g < num_groups(); ++g) {
    GroupBlocks& gb = s.groups[static_cast<size_t>(g)];
    if (new_computed && static_cast<size_t>(g) < new_computed->blocks_.size()) {
      const auto& hit = new_computed->blocks_[static_cast<size_t>(g)];
      for (KVBlock* b : hit) {
        if (b != nullptr) pool_.touch(std::span<KVBlock* const>(&b, 1));
        push_block(gb, b);
      }
      while (gb.num_released < static_cast<int>(hit.size()) &&
             hit[static_cast<size_t>(gb.num_released)] == nullptr)
        ++gb.num_released;
    }
    if (plans[static_cast<size_t>(g)].needs_cow) {
      scratch_.clear();
      pool_.get_new_blocks(1, scratch_);
      KVBlock* old = gb.blocks[write_block];
      blocks_to_copy.emplace_back(old->block_id, scratch_[0]->block_id);
      pool_.free_block(old);
      gb.blocks[write_block] = scratch_[0];
      gb.block_ids[write_block] = scratch_[0]->block_id;
    }
    scratch_.clear();
    pool_.get_new_blocks(plans[static_cast<size_t>(g)].num_new_blocks, scratch_);
    for (KVBlock* b : scratch_) push_block(gb, b);
  }
  peak_used_blocks_ = std::max(peak_used_blocks_, num_blocks() - num_free_blocks());
  if (new_computed) {
    s.num_cached_blocks = num_hit_blocks;
    num_queried_tokens_ += static_cast<uint64_t>(new_computed->num_queried_tokens_);
    num_hit_tokens_ += static_cast<uint64_t>(new_computed->num_computed_tokens_);
  }
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
  for (GroupBlocks& g : s.groups) {
    for (auto b = g.blocks.rbegin(); b != g.blocks.rend(); ++b)
      if (*b != nullptr) pool_.free_block(*b);
    for (int32_t h : g.host_blocks)
      if (h >= 0) free_swap_blocks_.push_back(h);
  }
  seqs_.erase(it);
}

void KVCacheManager::fork(int64_t parent_seq_id, int64_t child_seq_id) {
  SeqBlocks copy = state(parent_seq_id);
  if (copy.swapped_out) throw_error(ErrorKind::kInternal, "kv: cannot fork a swapped-out sequence");
  for (const GroupBlocks& g : copy.groups)
    for (KVBlock* b : g.blocks)
      if (b != nullptr) pool_.touch(std::span<KVBlock* const>(&b, 1));
  seqs_[child_seq_id] = std::move(copy);
}

bool KVCacheManager::can_swap_out(int64_t seq_id) const {
  if (num_swap_blocks_ == 0 || seqs_.find(seq_id) == seqs_.end()) return false;
  return static_cast<size_t>(num_held_blocks(seq_id)) <= free_swap_blocks_.size();
}

void KVCacheManager::swap_out(int64_t seq_id, BlockPairs& blocks_to_swap_out) {
  if (static_cast<size_t>(num_held_blocks(seq_id)) > free_swap_blocks_.size()) {
    throw_error(ErrorKind::kInternal, "kv: swap_out without enough host blocks");
  }
  SeqBlocks& s = state(seq_id);
  for (GroupBlocks& g : s.groups) {
    for (KVBlock* b : g.blocks) {
      int32_t host = -1;
      if (b != nullptr) {
        host = free_swap_blocks_.back();
        free_swap_blocks_.pop_back();
        blocks_to_swap_out.emplace_back(b->block_id, host);
      }
      g.host_blocks.push_back(host);
    }
    for (auto b = g.blocks.rbegin(); b != g.blocks.rend(); ++b)
      if (*b != nullptr) pool_.free_block(*b);
    g.blocks.clear();
    g.block_ids.clear();
  }
  s.swapped_out = true;
}

bool KVCacheManager::can_swap_in(int64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) return false;
  int n = 0;
  for (const GroupBlocks& g : it->second.groups)
    for (int32_t h : g.host_blocks) n += h >= 0;
  return n <= pool_.num_free_blocks();
}

void KVCacheManager::swap_in(int64_t seq_id, int num_computed_tokens, BlockPairs& blocks_to_swap_in) {
  SeqBlocks& s = state(seq_id);
  for (GroupBlocks& g : s.groups) {
    for (int32_t host : g.host_blocks) {
      if (host < 0) {
        push_block(g, nullptr);
        continue;
      }
      scratch_.clear();
      pool_.get_new_blocks(1, scratch_);
      blocks_to_swap_in.emplace_back(host, scratch_[0]->block_id);
      push_block(g, scratch_[0]);
      free_swap_blocks_.push_back(host);
    }
    g.host_blocks.clear();
  }
  s.swapped_out = false;
  peak_used_blocks_ = std::max(peak_used_blocks_, num_blocks() - num_free_blocks());
  // The restored blocks are private copies; the originals may still be cached under the same hashes.
  s.num_cached_blocks =
      std::min(num_computed_tokens / block_size_, static_cast<int>(s.groups[0].blocks.size()));
}

std::span<const int32_t> KVCacheManager::block_table(int64_t seq_id, int group) const {
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end() || group < 0 || group >= num_groups()) return {};
  return it->second.groups[static_cast<size_t>(group)].block_ids;
}

}  // namespace pagellm::kv
