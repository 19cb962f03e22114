// The scheduler's only view of KV memory (vLLM V1's KVCacheManager). Each sequence owns a block table
// (its logical blocks → physical block ids); blocks are taken on demand as the sequence grows, shared by
// reference between forked samples and prefix-cache hits, and copied on write when a sequence is about
// to write into a block someone else still references.
//
// Prefix caching: full block i of a sequence is identified by
//   hash_i = XXH3_64(hash_{i-1} ‖ tokens[i*bs, (i+1)*bs) ‖ extra)   (hash_{-1} = 0)
// where `extra` is the request's cache-salt hash, so equal prefixes with different salts never share.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"

namespace pagellm::kv {

struct KVCacheConfig {
  int num_blocks = 0;       // device (or CPU) KV blocks
  int block_size = 16;      // tokens per block
  bool enable_prefix_caching = true;
  int num_swap_blocks = 0;  // host blocks for swapping; 0 = swapping unavailable
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
  int num_blocks() const { return static_cast<int>(blocks_.size()); }

 private:
  friend class KVCacheManager;
  std::vector<KVBlock*> blocks_;
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

  // Physical block ids of the sequence, in logical order (empty for unknown ids).
  std::span<const int32_t> block_table(int64_t seq_id) const;
  // Blocks a sequence of `num_tokens` tokens needs.
  int blocks_for(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  int block_size() const { return block_size_; }
  int num_blocks() const { return pool_.num_blocks(); }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  int num_swap_blocks() const { return static_cast<int>(num_swap_blocks_); }
  int num_free_swap_blocks() const { return static_cast<int>(free_swap_blocks_.size()); }
  int num_seqs() const { return static_cast<int>(seqs_.size()); }
  double usage() const { return pool_.usage(); }
  bool reset_prefix_cache() { return pool_.reset_prefix_cache(); }
  const BlockPool& pool() const { return pool_; }

  // Prefix-cache counters, in tokens, over admitted sequences.
  uint64_t prefix_cache_queries() const { return num_queried_tokens_; }
  uint64_t prefix_cache_hits() const { return num_hit_tokens_; }

 private:
  struct SeqBlocks {
    std::vector<KVBlock*> blocks;        // [num_blocks] logical → physical
    std::vector<int32_t> block_ids;      // [num_blocks] the same, as ids for the runner
    std::vector<BlockHash> hashes;       // chain hashes of the full blocks computed so far
    std::vector<int32_t> host_blocks;    // swapped-out copies, in logical order
    int num_cached_blocks = 0;           // leading blocks already offered to the prefix cache
  };

  SeqBlocks& state(int64_t seq_id);
  void extend_hashes(SeqBlocks& s, const SeqRef& seq, int num_full_blocks) const;
  void cache_full_blocks(SeqBlocks& s, const SeqRef& seq, int num_tokens);
  void push_block(SeqBlocks& s, KVBlock* b);

  BlockPool pool_;
  int block_size_;
  bool enable_caching_;
  size_t num_swap_blocks_;
  std::vector<int32_t> free_swap_blocks_;  // host block ids
  std::unordered_map<int64_t, SeqBlocks> seqs_;
  std::vector<KVBlock*> scratch_;  // reused by allocate_slots
  uint64_t num_queried_tokens_ = 0;
  uint64_t num_hit_tokens_ = 0;
};

}  // namespace pagellm::kv
