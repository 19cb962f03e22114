// The BPE model of tokenizer.json: vocab, ranked merges, byte_fallback / unk handling, ignore_merges,
// and a cache of encoded words (pre-tokenizer pieces repeat a lot in real text).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/flat_map.h"
#include "tokenizer/tokenizer_json.h"

namespace pagellm::tok {

class BpeModel {
 public:
  // Builds the model from the parsed file (spec = the "model" object; vocab and merges come from `file`).
  BpeModel(const nlohmann::json& spec, const TokenizerJson& file, const std::string& where);
  ~BpeModel();

  // Appends the ids of one pre-tokenized word. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const { return vocab_.find(token); }
  // Empty view for ids that are not in the model's vocab.
  std::string_view id_to_token(int32_t id) const;
  int32_t id_limit() const { return static_cast<int32_t>(id_to_offset_.size()) - 1; }  // highest id + 1
  size_t num_merges() const { return merges_.size(); }

 private:
  struct Symbol {
    int32_t id;
    uint32_t length;  // bytes of word covered
  };
  void load_vocab(const TokenizerJson& file, const std::string& where);
  void load_merges(const TokenizerJson& file, const std::string& where);
  void encode_uncached(std::string_view word, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_short(std::vector<Symbol>& symbols) const;
  void merge_long(std::vector<Symbol>& symbols) const;
  const uint64_t* find_merge(int32_t left, int32_t right) const {
    return merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right));
  }

  StringIdMap vocab_;                  // token -> id
  std::string token_bytes_;            // all tokens, indexed by id_to_offset_
  std::vector<uint32_t> id_to_offset_; // [id_limit + 1]; token of id i = [off[i], off[i+1]) when present
  std::vector<uint8_t> id_present_;    // [id_limit]
  U64Map merges_;                      // (left id << 32 | right id) -> (rank << 32 | merged id)
  std::array<int32_t, 0x400> small_char_id_{};  // id of a single code point < 0x400, or -1
  std::array<int32_t, 256> byte_fallback_id_{}; // id of "<0xXX>", or -1
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;

  // Encoded-word cache: sharded so concurrent encoders rarely contend; each shard is bounded.
  // Transparent hashing lets a string_view look up a std::string key without a copy.
  struct WordHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, WordHash, std::equal_to<>> words;
  };
  static constexpr size_t kNumCacheShards = 16;
  static constexpr size_t kMaxCachedPerShard = 8192;
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable std::array<CacheShard, kNumCacheShards> cache_;
};

}  // namespace pagellm::tok
