#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "common/error.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {

namespace {

// Ids above this are rejected: they would make the id tables unboundedly large.
constexpr int64_t kMaxTokenId = 1 << 24;
// Words with more initial symbols than this use the heap-based merge; shorter ones a linear scan.
constexpr size_t kShortWordSymbols = 48;

constexpr uint32_t kNoMerge = ~0u;

std::string byte_fallback_token(int b) {
  static const char* kHex = "0123456789ABCDEF";
  std::string s = "<0x";
  s += kHex[b >> 4];
  s += kHex[b & 15];
  s += '>';
  return s;
}

bool optional_empty_string(const nlohmann::json& spec, const char* field) {
  if (!spec.contains(field) || spec[field].is_null()) return true;
  return spec[field].is_string() && spec[field].get<std::string>().empty();
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& spec, const TokenizerJson& file, const std::string& where) {
  // The loader streams model.vocab (an object) and model.merges (an array) out of the DOM; anything
  // left under those keys had the wrong shape.
  if (spec.contains("vocab") || !file.has_vocab) invalid_argument(where + ": model.vocab must be an object of ids");
  if (spec.contains("merges")) invalid_argument(where + ": model.merges must be an array");
  if (spec.contains("dropout") && !spec["dropout"].is_null() && spec["dropout"].get<double>() != 0.0) {
    unsupported(where + ": unsupported: BPE dropout");
  }
  if (!optional_empty_string(spec, "continuing_subword_prefix")) {
    unsupported(where + ": unsupported: BPE continuing_subword_prefix");
  }
  if (!optional_empty_string(spec, "end_of_word_suffix")) unsupported(where + ": unsupported: BPE end_of_word_suffix");
  byte_fallback_ = spec.value("byte_fallback", false);
  fuse_unk_ = spec.value("fuse_unk", false);
  ignore_merges_ = spec.value("ignore_merges", false);
  load_vocab(file, where);
  if (spec.contains("unk_token") && spec["unk_token"].is_string()) {
    unk_id_ = vocab_.find(spec["unk_token"].get<std::string>());
    if (!unk_id_) invalid_argument(where + ": model.unk_token '" + spec["unk_token"].get<std::string>() + "' is not in the vocab");
  }
  load_merges(file, where);
}

// Vocab: token -> id map, and tokens laid out by id for decoding.
void BpeModel::load_vocab(const TokenizerJson& file, const std::string& where) {
  int64_t max_id = -1;
  for (size_t i = 0; i < file.num_vocab(); ++i) {
    if (file.token_ids[i] >= kMaxTokenId) {
      invalid_argument(where + ": model.vocab id " + std::to_string(file.token_ids[i]) + " is too large");
    }
    max_id = std::max<int64_t>(max_id, file.token_ids[i]);
  }
  vocab_.reserve(file.num_vocab(), file.token_bytes.size());
  std::vector<int64_t> index_of_id(static_cast<size_t>(max_id + 1), -1);  // [id_limit] -> vocab entry
  for (size_t i = 0; i < file.num_vocab(); ++i) {
    vocab_.insert(file.token(i), file.token_ids[i]);
    index_of_id[static_cast<size_t>(file.token_ids[i])] = static_cast<int64_t>(i);
  }
  id_to_offset_.assign(index_of_id.size() + 1, 0);
  id_present_.assign(index_of_id.size(), 0);
  token_bytes_.reserve(file.token_bytes.size());
  for (size_t id = 0; id < index_of_id.size(); ++id) {
    if (index_of_id[id] >= 0) {
      token_bytes_ += file.token(static_cast<size_t>(index_of_id[id]));
      id_present_[id] = 1;
    }
    id_to_offset_[id + 1] = static_cast<uint32_t>(token_bytes_.size());
  }

  // Single-character and byte-fallback lookups are the first step of every word: keep them in arrays.
  small_char_id_.fill(-1);
  for (char32_t cp = 0; cp < small_char_id_.size(); ++cp) {
    std::string s;
    append_utf8(s, cp);
    if (auto id = vocab_.find(s)) small_char_id_[cp] = *id;
  }
  byte_fallback_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (auto id = vocab_.find(byte_fallback_token(b))) byte_fallback_id_[b] = *id;
  }
}

// Merges: (left, right) -> (rank, merged id).
void BpeModel::load_merges(const TokenizerJson& file, const std::string& where) {
  // Lookups run a few merges ahead of their use (hash + prefetch) so cache misses overlap: vocab slots
  // are prefetched kLookahead merges ahead, the merge table slot kLookahead / 2 ahead.
  merges_.reserve(file.num_merges());
  constexpr size_t kLookahead = 16;
  struct Pending {
    std::string joined;
    uint64_t hashes[3];
    uint64_t key = 0, value = 0;
  };
  std::vector<Pending> pending(kLookahead);  // ring buffer of merges in flight
  const size_t num_merges = file.num_merges();
  auto prepare = [&](size_t i) {  // stage 1: hash the three tokens, prefetch their vocab slots
    Pending& p = pending[i % kLookahead];
    const auto [left, right] = file.merge(i);
    p.joined.assign(left);
    p.joined.append(right);
    p.hashes[0] = StringIdMap::hash_of(left);
    p.hashes[1] = StringIdMap::hash_of(right);
    p.hashes[2] = StringIdMap::hash_of(p.joined);
    for (uint64_t h : p.hashes) vocab_.prefetch(h);
  };
  auto resolve = [&](size_t i) {  // stage 2: look the ids up, prefetch the merge table slot
    Pending& p = pending[i % kLookahead];
    const auto [left, right] = file.merge(i);
    const auto left_id = vocab_.find(left, p.hashes[0]), right_id = vocab_.find(right, p.hashes[1]);
    const auto merged_id = vocab_.find(p.joined, p.hashes[2]);
    if (!left_id || !right_id || !merged_id) {
      invalid_argument(where + ": model.merges[" + std::to_string(i) + "] ('" + std::string(left) + "' '" +
                       std::string(right) + "') uses a token missing from the vocab");
    }
    p.key = (static_cast<uint64_t>(static_cast<uint32_t>(*left_id)) << 32) | static_cast<uint32_t>(*right_id);
    p.value = (static_cast<uint64_t>(i) << 32) | static_cast<uint32_t>(*merged_id);
    merges_.prefetch(p.key);
  };
  constexpr size_t kHalf = kLookahead / 2;
  for (size_t i = 0; i < num_merges + kLookahead; ++i) {
    if (i < num_merges) prepare(i);
    if (i >= kHalf && i - kHalf < num_merges) resolve(i - kHalf);
    if (i >= kLookahead - 1 && i - (kLookahead - 1) < num_merges) {
      // Stage 3. A later duplicate overwrites an earlier one, as in the reference's hash map.
      const Pending& p = pending[(i - (kLookahead - 1)) % kLookahead];
      merges_.insert(p.key, p.value);
    }
  }
}

BpeModel::~BpeModel() = default;

std::string_view BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_present_.size() || !id_present_[id]) return {};
  return std::string_view(token_bytes_).substr(id_to_offset_[id], id_to_offset_[id + 1] - id_to_offset_[id]);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = vocab_.find(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    encode_uncached(word, out);
    return;
  }
  // The shard comes from high hash bits; the map inside uses the same hash's low bits.
  CacheShard& shard = cache_[(std::hash<std::string_view>{}(word) >> 56) % kNumCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  encode_uncached(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard<std::mutex> lock(shard.mutex);
  // A full shard starts over: cheap, bounded, and the working set refills it quickly.
  if (shard.words.size() >= kMaxCachedPerShard) shard.words.clear();
  shard.words.emplace(std::string(word), std::move(ids));
}

void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  std::optional<Symbol> unk;  // pending unknown run (fused when fuse_unk)
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t start = pos;
    const char32_t cp = next_code_point(word, pos);
    const auto length = static_cast<uint32_t>(pos - start);
    int32_t id = -1;
    if (cp < small_char_id_.size()) {
      id = small_char_id_[cp];
    } else if (auto found = vocab_.find(word.substr(start, length))) {
      id = *found;
    }
    if (id >= 0) {
      if (unk) symbols.push_back(*unk), unk.reset();
      symbols.push_back({id, length});
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t b = start; b < pos; ++b) all = all && byte_fallback_id_[static_cast<unsigned char>(word[b])] >= 0;
      if (all) {
        if (unk) symbols.push_back(*unk), unk.reset();
        for (size_t b = start; b < pos; ++b) symbols.push_back({byte_fallback_id_[static_cast<unsigned char>(word[b])], 1});
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as the reference does
    if (unk && fuse_unk_) {
      unk->length += length;
    } else {
      if (unk) symbols.push_back(*unk);
      unk = Symbol{*unk_id_, length};
    }
  }
  if (unk) symbols.push_back(*unk);
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  initial_symbols(word, symbols);
  if (symbols.size() > kShortWordSymbols) {
    merge_long(symbols);
  } else {
    merge_short(symbols);
  }
  for (const Symbol& s : symbols) out.push_back(s.id);
}

// Repeatedly applies the lowest-ranked merge (leftmost on ties); pair ranks are cached and only the
// two pairs around a merge are looked up again. O(n^2) compares, fine for short words.
void BpeModel::merge_short(std::vector<Symbol>& symbols) const {
  if (symbols.size() < 2) return;
  uint64_t pair[kShortWordSymbols];  // [num_symbols - 1]: (rank << 32 | merged id), or ~0 for none
  auto lookup = [&](size_t i) {
    const uint64_t* m = find_merge(symbols[i].id, symbols[i + 1].id);
    return m ? *m : ~0ull;
  };
  size_t n = symbols.size();
  for (size_t i = 0; i + 1 < n; ++i) pair[i] = lookup(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if ((pair[i] >> 32) < (pair[best] >> 32)) best = i;
    }
    if ((pair[best] >> 32) == kNoMerge) break;
    symbols[best].id = static_cast<int32_t>(pair[best] & 0xFFFFFFFFu);
    symbols[best].length += symbols[best + 1].length;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    for (size_t i = best + 1; i + 1 < n - 1; ++i) pair[i] = pair[i + 1];
    --n;
    if (best > 0) pair[best - 1] = lookup(best - 1);
    if (best + 1 < n) pair[best] = lookup(best);
  }
}

// Heap-based merging for long words: O(n log n). Entries are (rank, position) so the order of merges
// is the same as the linear scan's (lowest rank, then leftmost). Stale entries are skipped on pop.
void BpeModel::merge_long(std::vector<Symbol>& symbols) const {
  const size_t n = symbols.size();
  std::vector<int64_t> prev(n), next(n);  // [n] linked list over live symbols; -1 at the ends
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  }
  struct Entry {
    uint32_t rank;
    uint32_t pos;
    int32_t left_id, right_id;  // the pair this entry was made for, to detect staleness
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int64_t i) {
    if (i < 0 || next[i] < 0) return;
    const Symbol& a = symbols[i];
    const Symbol& b = symbols[next[i]];
    if (const uint64_t* m = find_merge(a.id, b.id)) {
      heap.push({static_cast<uint32_t>(*m >> 32), static_cast<uint32_t>(i), a.id, b.id});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
  std::vector<uint8_t> alive(n, 1);  // [n]
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int64_t i = e.pos;
    const int64_t j = next[i];
    if (!alive[i] || j < 0 || symbols[i].id != e.left_id || symbols[j].id != e.right_id) continue;
    const uint64_t* m = find_merge(e.left_id, e.right_id);
    symbols[i].id = static_cast<int32_t>(*m & 0xFFFFFFFFu);
    symbols[i].length += symbols[j].length;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

}  // namespace pagellm::tok
