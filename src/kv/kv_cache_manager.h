// The scheduler's only view of KV memory (vLLM V1's KVCacheManager). Each sequence owns a block
// table (its logical blocks → physical block ids); blocks are taken on demand as the sequence
// grows, shared by reference between forked samples and prefix-cache hits, and copied on write when
// a sequence is about to write into a block someone else still references.
//
// Prefix caching: full block i of a sequence is identified by
//   hash_i = XXH3_64(hash_{i-1} ‖ tokens[i*bs, (i+1)*bs) ‖ extra)   (hash_{-1} = 0)
// where `extra` is the request's cache-salt hash, so equal prefixes with different salts never
// share.
//
// KV cache groups (kv/kv_layout.h): a sequence has one block table per group, all drawn from the
// one pool. A sliding-window group gives its blocks back once every later query's window has passed
// them: the table keeps their place with id 0 (a block held for that, never written; a kernel tile
// may load it masked, never use it), and the
// cached content stays findable until the block is handed out again, as any free block's. A prefix
// hit needs every full group's blocks of the prefix and each sliding group's blocks of the window
// before the first token left to compute. Group 0's keys are the chain hashes themselves.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_layout.h"

namespace pagellm::kv {

struct KVCacheConfig {
  int num_blocks = 0;       // device (or CPU) KV blocks
  int block_size = 16;      // tokens per block
  bool enable_prefix_caching = true;
  int num_swap_blocks = 0;  // host blocks for swapping; 0 = swapping unavailable
  // One entry per KV cache group: 0 = full attention, else its sliding window (tokens).
  std::vector<int> group_windows = {0};
};

// Identifies the sequence and its tokens in every call. token_ids must stay the same sequence of
// tokens between calls (it only grows).
struct SeqRef {
  int64_t seq_id = 0;
  std::span<const int32_t> token_ids;  // [num_tokens]: prompt + generated
  BlockHash extra_hash = 0;            // cache salt (0 = none)
};

// Opaque result of a prefix-cache lookup, consumed by allocate_slots.
class ComputedBlocks {
 public:
  int num_computed_tokens() const { return num_computed_tokens_; }
  int num_blocks() const { return num_blocks_; }

 private:
  friend class KVCacheManager;
  std::vector<std::vector<KVBlock*>> blocks_;  // [group][num_blocks]; null: outside the window
  int num_blocks_ = 0;
  int num_computed_tokens_ = 0;
  int num_queried_tokens_ = 0;
};

using BlockPairs = std::vector<std::pair<int32_t, int32_t>>;  // (src, dst) block ids

class KVCacheManager {
 public:
  explicit KVCacheManager(const KVCacheConfig& config);

  static BlockHash hash_salt(std::string_view salt);  // 0 for an empty salt
  // One link of the chain (exposed for tests).
  static BlockHash hash_block(BlockHash parent, std::span<const int32_t> tokens, BlockHash extra);

  // The longest run of cached full blocks at the start of the sequence. At least the last token is
  // always left to compute (its logits are needed), so a fully cached prompt hits one block less.
  ComputedBlocks get_computed_blocks(const SeqRef& seq);

  // Makes room for `num_new_tokens` tokens after the first `num_computed_tokens` (which, when
  // `new_computed` is given, are the prefix hit and the sequence has no blocks yet). Appends
  // copy-on-write pairs to `blocks_to_copy`. Returns false, changing nothing, when the pool cannot
  // supply the blocks.
  bool allocate_slots(const SeqRef& seq, int num_computed_tokens, int num_new_tokens,
                      const ComputedBlocks* new_computed, BlockPairs& blocks_to_copy);
  // Offers the blocks filled by the first `num_computed_tokens` tokens to the prefix cache. Called
  // after the step has written them: a block is never findable before its KV exists.
  void cache_computed_blocks(const SeqRef& seq, int num_computed_tokens);

  // Releases every block of the sequence (tail first, so its last blocks are evicted first) and
  // forgets it. Unknown ids are ignored.
  void free(int64_t seq_id);
  // `child` starts with `parent`'s block table, sharing every block.
  void fork(int64_t parent_seq_id, int64_t child_seq_id);

  // Swapping (only when num_swap_blocks > 0). swap_out moves the sequence's blocks to host blocks and
  // frees the device blocks; swap_in brings them back into fresh device blocks.
  bool can_swap_out(int64_t seq_id) const;
  void swap_out(int64_t seq_id, BlockPairs& blocks_to_swap_out);
  bool can_swap_in(int64_t seq_id) const;
  void swap_in(int64_t seq_id, int num_computed_tokens, BlockPairs& blocks_to_swap_in);

  // Physical block ids of the sequence's group `group`, in logical order (empty for unknown ids);
  // 0 where a sliding group gave the block back.
  std::span<const int32_t> block_table(int64_t seq_id, int group = 0) const;
  // Blocks a sequence of `num_tokens` tokens needs in one group of full attention.
  int blocks_for(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  // The most blocks of all groups a sequence of `num_tokens` tokens holds at once when each step
  // computes at most `max_step_tokens` of them.
  int peak_blocks_for(int num_tokens, int max_step_tokens) const;
  // Blocks the sequence holds now, over all groups (0 for unknown ids).
  int num_held_blocks(int64_t seq_id) const;
  int num_groups() const { return static_cast<int>(group_windows_.size()); }

  int block_size() const { return block_size_; }
  // Blocks sequences can get (the pool's, less the null block of a layout with a sliding group).
  int num_blocks() const { return pool_.num_blocks() - num_reserved_; }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  int num_swap_blocks() const { return static_cast<int>(num_swap_blocks_); }
  int num_free_swap_blocks() const { return static_cast<int>(free_swap_blocks_.size()); }
  int num_seqs() const { return static_cast<int>(seqs_.size()); }
  // Fraction of the blocks sequences can get that they hold now.
  double usage() const {
    return static_cast<double>(num_blocks() - num_free_blocks()) / num_blocks();
  }
  // The most blocks sequences held at once since construction.
  int peak_used_blocks() const { return peak_used_blocks_; }
  bool reset_prefix_cache() { return pool_.reset_prefix_cache(); }
  const BlockPool& pool() const { return pool_; }

  // Prefix-cache counters, in tokens, over admitted sequences.
  uint64_t prefix_cache_queries() const { return num_queried_tokens_; }
  uint64_t prefix_cache_hits() const { return num_hit_tokens_; }

 private:
  struct GroupBlocks {
    std::vector<KVBlock*> blocks;      // [num_blocks] logical → physical; null: given back
    std::vector<int32_t> block_ids;    // [num_blocks] the same, as ids for the runner (0 for null)
    std::vector<int32_t> host_blocks;  // swapped-out copies, in logical order (-1 for null)
    int num_released = 0;              // leading blocks a sliding group has given back
  };
  struct SeqBlocks {
    std::vector<GroupBlocks> groups;     // [num_groups]
    std::vector<BlockHash> hashes;       // chain hashes of the full blocks computed so far
    int num_cached_blocks = 0;           // leading blocks already offered to the prefix cache
    bool swapped_out = false;
  };
  // What allocate_slots will do in one group.
  struct GroupPlan {
    int num_new_blocks = 0;
    bool needs_cow = false;
  };

  SeqBlocks& state(int64_t seq_id);
  void extend_hashes(SeqBlocks& s, const SeqRef& seq, int num_full_blocks) const;
  void cache_full_blocks(SeqBlocks& s, const SeqRef& seq, int num_tokens);
  static void push_block(GroupBlocks& g, KVBlock* b);
  BlockHash group_key(BlockHash hash, int group) const;
  // The first block a query at `position` reads in group g (0 for full attention).
  int first_needed_block(int group, int position) const;
  // Longest hit whose blocks every group has, from each group's cached blocks [group][i].
  int longest_common_hit(const std::vector<std::vector<KVBlock*>>& found, int max_blocks) const;
  void release_passed_blocks(GroupBlocks& g, int group, int num_computed_tokens);

  BlockPool pool_;
  int block_size_;
  std::vector<int> group_windows_;
  int num_reserved_ = 0;
  int peak_used_blocks_ = 0;
  bool enable_caching_;
  size_t num_swap_blocks_;
  std::vector<int32_t> free_swap_blocks_;  // host block ids
  std::unordered_map<int64_t, SeqBlocks> seqs_;
  std::vector<KVBlock*> scratch_;  // reused by allocate_slots
  uint64_t num_queried_tokens_ = 0;
  uint64_t num_hit_tokens_ = 0;
};

}  // namespace pagellm::kv
