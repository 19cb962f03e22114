// Open-addressing hash tables for the tokenizer's hot lookups (token -> id, merge pair -> rank). They
// are built once at load and then only read, so lookups need no locking; linear probing over flat
// arrays keeps a lookup to one or two cache misses, far fewer than std::unordered_map's nodes.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pagellm::tok {

inline size_t table_capacity_for(size_t num_entries) {
  size_t capacity = 16;
  while (capacity * 5 < num_entries * 8) capacity <<= 1;  // load factor <= 0.625: short probes, less memory
  return capacity;
}

// uint64 key -> uint64 value. The key ~0 is reserved as the empty marker. Key and value share a
// slot so a hit costs one cache miss.
class U64Map {
 public:
  static constexpr uint64_t kEmpty = ~0ull;

  void reserve(size_t num_entries) {
    slots_.assign(table_capacity_for(num_entries), Slot{});
    mask_ = slots_.size() - 1;
  }
  // Inserts or overwrites; grows the table as needed (reserve() up front avoids rehashing).
  void insert(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 8 > slots_.size() * 5) grow();
    size_t i = slot(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == kEmpty) ++size_;
    slots_[i] = Slot{key, value};
  }
  void prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[slot(key)]);
  }
  const uint64_t* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    size_t i = slot(key);
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    uint64_t value = 0;
  };
  // Both halves of a key (left id << 32 | right id) must reach the low bits: a full 64-bit mix.
  size_t slot(uint64_t key) const {
    key ^= key >> 33;
    key *= 0xFF51AFD7ED558CCDull;
    key ^= key >> 33;
    return static_cast<size_t>(key) & mask_;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(table_capacity_for(size_ + 1) * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = slot(s.key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;  // [capacity]
  size_t mask_ = 0;
  size_t size_ = 0;
};

// string -> int32 id. Keys are copied into one arena; a 16-byte slot holds the hash tag, id and key
// location, so a hit costs two cache misses (slot, key bytes). Callers doing many lookups can hash
// and prefetch ahead (hash_of + prefetch + find(key, hash)).
class StringIdMap {
 public:
  void reserve(size_t num_entries, size_t num_key_bytes) {
    slots_.assign(table_capacity_for(num_entries), Slot{});
    mask_ = slots_.size() - 1;
    arena_.reserve(num_key_bytes);
  }
  // Inserts or overwrites the id of `key`; grows the table as needed.
  void insert(std::string_view key, int32_t id) {
    if ((size_ + 1) * 8 > slots_.size() * 5) grow();
    const uint64_t hash = hash_of(key);
    const auto tag = static_cast<uint32_t>(hash >> 32);
    size_t i = hash & mask_;
    while (slots_[i].length != kEmptyLength) {
      if (slots_[i].tag == tag && equal(slots_[i], key)) {
        slots_[i].id = id;
        return;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{tag, id, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size())};
    arena_.append(key);
    ++size_;
  }
  static uint64_t hash_of(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }
  void prefetch(uint64_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & mask_]);
  }
  std::optional<int32_t> find(std::string_view key) const { return find(key, hash_of(key)); }
  std::optional<int32_t> find(std::string_view key, uint64_t hash) const {
    if (slots_.empty()) return std::nullopt;
    const auto tag = static_cast<uint32_t>(hash >> 32);
    size_t i = hash & mask_;
    while (slots_[i].length != kEmptyLength) {
      if (slots_[i].tag == tag && equal(slots_[i], key)) return slots_[i].id;
      i = (i + 1) & mask_;
    }
    return std::nullopt;
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmptyLength = ~0u;
  struct Slot {
    uint32_t tag = 0;  // high half of the key's hash
    int32_t id = -1;
    uint32_t offset = 0;
    uint32_t length = kEmptyLength;
  };
  bool equal(const Slot& s, std::string_view key) const {
    return s.length == key.size() && std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(table_capacity_for(size_ + 1) * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.length == kEmptyLength) continue;
      const uint64_t hash = hash_of(std::string_view(arena_).substr(s.offset, s.length));
      size_t i = hash & mask_;
      while (slots_[i].length != kEmptyLength) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }

  std::vector<Slot> slots_;  // [capacity]
  std::string arena_;        // all keys, concatenated
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pagellm::tok
