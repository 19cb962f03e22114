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
  while (capacity < num_entries * 2) capacity <<= 1;  // load factor <= 0.5
  return capacity;
}

// uint64 key -> uint64 value. The key ~0 is reserved as the empty marker.
class U64Map {
 public:
  static constexpr uint64_t kEmpty = ~0ull;

  void reserve(size_t num_entries) {
    keys_.assign(table_capacity_for(num_entries), kEmpty);
    values_.assign(keys_.size(), 0);
    mask_ = keys_.size() - 1;
  }
  // Inserts or overwrites; grows the table as needed (reserve() up front avoids rehashing).
  void insert(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t i = slot(key);
    while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
    if (keys_[i] == kEmpty) ++size_;
    keys_[i] = key;
    values_[i] = value;
  }
  // Inserts only when absent; returns false when the key was present.
  bool insert_if_absent(uint64_t key, uint64_t value) {
    if ((size_ + 1) * 2 > keys_.size()) grow();
    size_t i = slot(key);
    while (keys_[i] != kEmpty) {
      if (keys_[i] == key) return false;
      i = (i + 1) & mask_;
    }
    keys_[i] = key;
    values_[i] = value;
    ++size_;
    return true;
  }
  const uint64_t* find(uint64_t key) const {
    if (keys_.empty()) return nullptr;
    size_t i = slot(key);
    while (true) {
      const uint64_t k = keys_[i];
      if (k == key) return &values_[i];
      if (k == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t size() const { return size_; }

 private:
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 17) & mask_; }
  void grow() {
    std::vector<uint64_t> old_keys = std::move(keys_), old_values = std::move(values_);
    keys_.assign(table_capacity_for(size_ + 1) * 2, kEmpty);
    values_.assign(keys_.size(), 0);
    mask_ = keys_.size() - 1;
    for (size_t j = 0; j < old_keys.size(); ++j) {
      if (old_keys[j] == kEmpty) continue;
      size_t i = slot(old_keys[j]);
      while (keys_[i] != kEmpty) i = (i + 1) & mask_;
      keys_[i] = old_keys[j];
      values_[i] = old_values[j];
    }
  }

  std::vector<uint64_t> keys_;    // [capacity]
  std::vector<uint64_t> values_;  // [capacity]
  size_t mask_ = 0;
  size_t size_ = 0;
};

// string -> int32 id. Keys are copied into one arena.
class StringIdMap {
 public:
  void reserve(size_t num_entries, size_t num_key_bytes) {
    slots_.assign(table_capacity_for(num_entries), Slot{});
    mask_ = slots_.size() - 1;
    arena_.reserve(num_key_bytes);
  }
  // Inserts or overwrites the id of `key`; grows the table as needed.
  void insert(std::string_view key, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const uint64_t hash = hash_of(key);
    size_t i = hash & mask_;
    while (slots_[i].length != kEmptyLength) {
      if (slots_[i].hash == hash && view(slots_[i]) == key) {
        slots_[i].id = id;
        return;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{hash, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), id};
    arena_.append(key);
    ++size_;
  }
  std::optional<int32_t> find(std::string_view key) const {
    if (slots_.empty()) return std::nullopt;
    const uint64_t hash = hash_of(key);
    size_t i = hash & mask_;
    while (slots_[i].length != kEmptyLength) {
      if (slots_[i].hash == hash && view(slots_[i]) == key) return slots_[i].id;
      i = (i + 1) & mask_;
    }
    return std::nullopt;
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmptyLength = ~0u;
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t length = kEmptyLength;
    int32_t id = -1;
  };
  static uint64_t hash_of(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(table_capacity_for(size_ + 1) * 2, Slot{});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.length == kEmptyLength) continue;
      size_t i = s.hash & mask_;
      while (slots_[i].length != kEmptyLength) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::string_view view(const Slot& s) const { return std::string_view(arena_).substr(s.offset, s.length); }

  std::vector<Slot> slots_;  // [capacity]
  std::string arena_;        // all keys, concatenated
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace pagellm::tok
