#include "structured/automaton.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace pagellm::structured {
namespace {

uint64_t hash_stack(const Automaton::Stack& s) {
  uint64_t h = 0xcbf29ce484222325ULL ^ s.size();
  for (uint32_t x : s) h = (h ^ x) * 0x100000001b3ULL;
  return h;
}

uint64_t hash_stacks(const Automaton::Stacks& stacks) {
  uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (const auto& s : stacks) h = (h ^ hash_stack(s)) * 0xbf58476d1ce4e5b9ULL;
  return h;
}

struct StackHash {
  size_t operator()(const Automaton::Stack& s) const { return size_t(hash_stack(s)); }
};

}  // namespace

static_assert(TransitionTable::kAbsent == Automaton::kUnknown);

void TransitionTable::emplace(uint64_t key, int32_t to) {
  if (2 * (size_ + 1) > slots_.size()) {  // grow to keep the table at most half full
    std::vector<Slot> old = std::move(slots_);
    bits_ = std::max(bits_ + 1, 4);
    slots_.assign(size_t{1} << bits_, Slot{});
    size_ = 0;
    for (const Slot& slot : old)
      if (slot.key != kEmpty) emplace(slot.key, slot.to);
  }
  for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].key == key) return;
    if (slots_[i].key == kEmpty) {
      slots_[i] = {key, to};
      ++size_;
      return;
    }
  }
}

Automaton::Automaton(std::shared_ptr<const Grammar> grammar, size_t max_states)
    : grammar_(std::move(grammar)), max_states_(std::max<size_t>(max_states, 1)) {
  for (size_t r = 0; r < grammar_->rule_start.size(); ++r) {
    alternatives_.push_back(grammar_->alternatives(int32_t(r)));
  }
  // The byte classes: the partition of the 256 bytes refined by every byte set.
  for (const ByteSet& set : grammar_->byte_sets) {
    std::array<int16_t, 512> renumber;  // (class, in the set) -> the refined class
    renumber.fill(-1);
    int16_t next = 0;
    for (int b = 0; b < 256; ++b) {
      int16_t& to = renumber[size_t(byte_class_[size_t(b)]) * 2 + set.test(uint8_t(b))];
      if (to < 0) to = next++;
      byte_class_[size_t(b)] = uint8_t(to);
    }
    num_byte_classes_ = size_t(next);
  }
  std::vector<Stack> start;
  for (uint32_t pos : alternatives_[size_t(grammar_->root)]) expand(Stack{pos}, start, truncated_);
  std::sort(start.begin(), start.end());
  start.erase(std::unique(start.begin(), start.end()), start.end());
  intern(std::move(start));
}

void Automaton::expand(Stack stack, std::vector<Stack>& out, bool& truncated) const {
  const Grammar& g = *grammar_;
  // Worklist instead of recursion: rule chains may be long. Expanding each stack once
  // (first_visit) stops epsilon cycles (a nullable repetition, a tail-recursive rule) from
  // expanding the same stack forever; the stacks met are scanned while few (the usual case), kept
  // in a hash set past that.
  boost::container::small_vector<Stack, 8> work{std::move(stack)};
  constexpr size_t kFew = 16;
  boost::container::small_vector<Stack, kFew> seen_few;
  std::unordered_set<Stack, StackHash> seen_many;
  auto first_visit = [&](const Stack& s) {
    if (seen_many.empty()) {
      if (std::find(seen_few.begin(), seen_few.end(), s) != seen_few.end()) return false;
      if (seen_few.size() < kFew) {
        seen_few.push_back(s);
        return true;
      }
      seen_many.insert(seen_few.begin(), seen_few.end());
    }
    return seen_many.insert(s).second;
  };
  while (!work.empty()) {
    Stack s = std::move(work.back());
    work.pop_back();
    if (s.size() > kMaxDepth || out.size() >= kMaxStacks) {
      truncated = true;
      continue;
    }
    if (!first_visit(s)) continue;
    if (s.empty()) {
      out.push_back(std::move(s));
      continue;
    }
    const uint32_t pos = s.back();
    const Element& el = g.elements[pos];
    if (el.type == Element::kBytes) {
      out.push_back(std::move(s));
      continue;
    }
    s.pop_back();
    if (g.is_end(pos)) {  // end of an alternative: return to the caller
      work.push_back(std::move(s));
      continue;
    }
    // A reference: the caller resumes after it (dropped when that is the end: tail call).
    if (!g.is_end(pos + 1)) s.push_back(pos + 1);
    for (uint32_t start : alternatives_[el.value]) {
      Stack next = s;
      if (!g.is_end(start)) next.push_back(start);
      work.push_back(std::move(next));
    }
  }
}

uint64_t Automaton::hash(const Stacks& stacks) { return hash_stacks(stacks); }

int32_t Automaton::find(const Stacks& stacks) const {
  auto [lo, hi] = by_hash_.equal_range(hash_stacks(stacks));
  for (auto it = lo; it != hi; ++it) {
    if (states_[size_t(it->second)].stacks == stacks) return it->second;
  }
  return kUnknown;
}

ByteSet Automaton::next_bytes_of(const Stacks& stacks) const {
  ByteSet next;
  for (const Stack& s : stacks) {
    if (!s.empty()) next.merge(grammar_->byte_sets[grammar_->elements[s.back()].value]);
  }
  return next;
}

int32_t Automaton::intern(std::vector<Stack> stacks) {
  const int32_t known = find(stacks);
  if (known != kUnknown) return known;
  if (states_.size() >= max_states_) {
    truncated_ = true;
    return kDead;
  }
  const uint64_t h = hash_stacks(stacks);
  State st;
  st.next = next_bytes_of(stacks);
  st.accepting =
      std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.empty(); });
  st.stacks = std::move(stacks);
  states_.push_back(std::move(st));
  const int32_t id = int32_t(states_.size() - 1);
  by_hash_.emplace(h, id);
  return id;
}

int32_t Automaton::step(int32_t state, uint8_t byte) {
  if (!states_[size_t(state)].next.test(byte)) return kDead;
  const uint64_t key = transition_key(state, byte);
  const int32_t known = transitions_.find(key);
  if (known != kUnknown) return known;
  std::vector<Stack> out = successor(states_[size_t(state)].stacks, byte, truncated_);
  const int32_t id = out.empty() ? kDead : intern(std::move(out));
  transitions_.emplace(key, id);
  return id;
}

Automaton::Stacks Automaton::successor(const Stacks& stacks, uint8_t byte, bool& truncated) const {
  const Grammar& g = *grammar_;
  Stacks out;
  for (const Stack& s : stacks) {
    if (s.empty()) continue;
    const uint32_t pos = s.back();
    if (!g.byte_sets[g.elements[pos].value].test(byte)) continue;
    Stack next = s;
    next.back() = pos + 1;
    expand(std::move(next), out, truncated);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int32_t Automaton::known_step(int32_t state, uint8_t byte) const {
  // The table first: a byte that leads somewhere is found without touching the state.
  const int32_t known = transitions_.find(transition_key(state, byte));
  if (known != kUnknown) return known;
  return states_[size_t(state)].next.test(byte) ? kUnknown : kDead;
}

int32_t Automaton::mask_class(int32_t state, uint32_t window) {
  State& st = states_[size_t(state)];
  if (st.mask_class >= 0) return st.mask_class;
  if (grammar_->counts.empty()) return st.mask_class = state;  // no counts: a class per state
  std::vector<Stack> canon = st.stacks;
  for (Stack& s : canon)
    for (uint32_t& pos : s) pos = grammar_->canonical(pos, window);
  std::sort(canon.begin(), canon.end());
  canon.erase(std::unique(canon.begin(), canon.end()), canon.end());
  const uint64_t h = hash_stacks(canon);
  const int32_t known = find_class(canon, h);
  if (known >= 0) return st.mask_class = known;
  classes_.push_back(std::move(canon));
  st.mask_class = int32_t(classes_.size() - 1);
  class_by_hash_.emplace(h, st.mask_class);
  return st.mask_class;
}

int32_t Automaton::find_class(const Stacks& canon, uint64_t hash) const {
  auto [lo, hi] = class_by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    if (classes_[size_t(it->second)] == canon) return it->second;
  }
  return -1;
}

Automaton::FarClass Automaton::far_class(int32_t state, uint32_t window) const {
  const Grammar& g = *grammar_;
  if (g.counts.empty()) return {};
  uint32_t nearest = std::numeric_limits<uint32_t>::max();  // the smallest distance moved
  std::vector<Stack> far = states_[size_t(state)].stacks;
  for (Stack& s : far) {
    for (uint32_t& pos : s) {
      pos = g.canonical(pos, window);
      const Grammar::Count c = g.counts[pos];
      if (c.run == Grammar::kNoRun) continue;
      const std::vector<uint32_t>& run = g.runs[c.run];
      const uint32_t far_dist = std::min<uint32_t>(window + 1, uint32_t(run.size() - 1));
      if (c.dist >= far_dist) continue;
      nearest = std::min(nearest, c.dist);
      pos = run[far_dist];
    }
  }
  if (nearest == std::numeric_limits<uint32_t>::max() || nearest <= 2) return {};
  std::sort(far.begin(), far.end());
  far.erase(std::unique(far.begin(), far.end()), far.end());
  return {find_class(far, hash_stacks(far)), nearest - 2};
}

}  // namespace pagellm::structured
