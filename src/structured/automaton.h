// A byte-level pushdown automaton for a Grammar, simulated Thompson-style: a state is the SET of
// parse stacks alive after the bytes read so far (each stack a list of grammar positions, top at
// the back, its top always a byte-set element; the empty stack means "the input so far is a
// complete match"). Sets are deduplicated, so matching is linear in the input for any grammar and
// never backtracks. States are interned and byte transitions memoized: for a regular grammar this
// is a lazily built DFA; for a recursive one, the states that generation actually visits.
//
// Not thread-safe: the owner (CompiledGrammar) serializes writers; the const members may run
// concurrently with each other.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

// GCC 12 at -O3 warns (-Wstringop-overread) on a copy in Boost.Container it cannot prove in bounds.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overread"
#endif
#include <boost/container/small_vector.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include "structured/grammar.h"

namespace pagellm::structured {

// The automaton's memoized transitions: transition_key -> state, open addressing with linear
// probing in one array, so a lookup touches one cache line (matching advances through a few
// transitions per token, and walks through many).
class TransitionTable {
 public:
  static constexpr int32_t kAbsent = -2;  // = Automaton::kUnknown
  int32_t find(uint64_t key) const {
    if (slots_.empty()) return kAbsent;
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return slots_[i].to;
      if (slots_[i].key == kEmpty) return kAbsent;
    }
  }
  // Adds key -> to unless key is there already.
  void emplace(uint64_t key, int32_t to);

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // never a key: states are 32-bit
  struct Slot {
    uint64_t key = kEmpty;
    int32_t to = 0;
  };
  size_t slot_of(uint64_t key) const {
    return size_t((key * 0x9e3779b97f4a7c15ULL) >> (64 - bits_));
  }
  std::vector<Slot> slots_;  // a power of two, at most half full
  int bits_ = 0;
  size_t size_ = 0;
};

class Automaton {
 public:
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kUnknown = -2;  // known_step: the transition is not built yet
  // Stacks per state and positions per stack beyond which stacks are dropped (ambiguous or
  // deeply nested input; a dropped stack only narrows what may follow).
  static constexpr size_t kMaxStacks = 4096;
  static constexpr size_t kMaxDepth = 512;
  // States per automaton. A regex like (a|b)*a(a|b){20} has millions of DFA states; past the cap a
  // transition that needs a new state is dead, so memory stays bounded and the output ends early
  // (the matcher offers EOS when nothing else is allowed) instead of growing without limit.
  static constexpr size_t kDefaultMaxStates = 500000;

  explicit Automaton(std::shared_ptr<const Grammar> grammar, size_t max_states = kDefaultMaxStates);

  int32_t initial() const { return 0; }
  // The state after reading `byte` in `state`, or kDead.
  int32_t step(int32_t state, uint8_t byte);
  // step() without building anything: kUnknown where the transition is not memoized yet.
  int32_t known_step(int32_t state, uint8_t byte) const;
  // States whose stacks are equal once every counting position is replaced by its canonical one
  // (Grammar::canonical with `window`) share a class: they accept the same byte strings of up to
  // `window` bytes, hence the same tokens of up to `window` bytes. Pass the same window every time.
  // While nothing was truncated (see truncated()), a mask may be kept per class.
  int32_t mask_class(int32_t state, uint32_t window);
  // A class that agrees with `state`'s on all short byte strings, for a state whose counts are
  // near their bounds: the class of its stacks with every count within window + 1 of its bound
  // moved to the run's farthest distance up to window + 1 (where the class's counts already are,
  // far from the bound). By Grammar::canonical, the two accept the same byte strings of up to
  // `horizon` = (the smallest distance moved) - 2 bytes, so the far class's mask holds for every
  // token that short. cls is -1 when no such class was met yet, nothing moves or the horizon is 0.
  struct FarClass {
    int32_t cls = -1;
    uint32_t horizon = 0;
  };
  FarClass far_class(int32_t state, uint32_t window) const;
  // mask_class() if already computed, else -1.
  int32_t known_class(int32_t state) const { return states_[size_t(state)].mask_class; }
  // A cap was hit (stacks dropped, or a state refused because the automaton is full): states of
  // one class may no longer behave alike, so masks must be kept per state from then on.
  bool truncated() const { return truncated_; }
  void mark_truncated() { truncated_ = true; }

  // For walks that must not build states (several threads walking at once, see matcher.cpp):
  // Inline up to 8 positions: most stacks are that shallow, and building a state copies stacks
  // several times.
  using Stack = boost::container::small_vector<uint32_t, 8>;
  using Stacks = std::vector<Stack>;
  const Stacks& stacks(int32_t state) const { return states_[size_t(state)].stacks; }
  // The sorted, unique stacks after reading `byte` from `stacks` (empty: dead); sets `truncated`
  // where a cap dropped stacks. Reads the grammar only.
  Stacks successor(const Stacks& stacks, uint8_t byte, bool& truncated) const;
  // The id of the built state with exactly `stacks`, or kUnknown.
  int32_t find(const Stacks& stacks) const;
  // The bytes some stack can read next.
  ByteSet next_bytes_of(const Stacks& stacks) const;
  // What such a walk found, added: the state with `stacks` (kDead when the automaton is full),
  // and a transition step() would have made (kept only if none is memoized yet).
  int32_t add_state(Stacks stacks) { return intern(std::move(stacks)); }
  void add_transition(uint64_t key, int32_t to) { transitions_.emplace(key, to); }
  // Transitions are kept per byte class: bytes that every byte set of the grammar holds alike
  // (all of them in it, or none) lead from any state to the same state, so one successor serves
  // them all (in a JSON string, every plain character is one class). The key of a transition:
  uint64_t transition_key(int32_t state, uint8_t byte) const {
    return (uint64_t(uint32_t(state)) << 8) | byte_class_[byte];
  }
  // The same transition from another state.
  static uint64_t rekey(uint64_t key, int32_t state) {
    return (uint64_t(uint32_t(state)) << 8) | (key & 0xff);
  }
  static int32_t key_state(uint64_t key) { return int32_t(uint32_t(key >> 8)); }
  size_t num_byte_classes() const { return num_byte_classes_; }
  static uint64_t hash(const Stacks& stacks);
  bool accepting(int32_t state) const { return states_[size_t(state)].accepting; }
  // Bytes that some stack of `state` can read next (empty: nothing may follow).
  const ByteSet& next_bytes(int32_t state) const { return states_[size_t(state)].next; }
  size_t num_states() const { return states_.size(); }
  size_t max_states() const { return max_states_; }
  const Grammar& grammar() const { return *grammar_; }

 private:
  struct State {
    std::vector<Stack> stacks;  // sorted, unique
    ByteSet next;
    bool accepting = false;
    int32_t mask_class = -1;
  };
  // Expands `stack` until every resulting stack's top is a byte-set element (or it is empty);
  // sets `truncated` where a cap dropped stacks.
  void expand(Stack stack, std::vector<Stack>& out, bool& truncated) const;
  // The id of `stacks`, a new one if it is new; kDead when new and the automaton is full.
  int32_t intern(std::vector<Stack> stacks);
  // The class with canonical stacks `canon` (sorted, unique), or -1.
  int32_t find_class(const Stacks& canon, uint64_t hash) const;

  std::shared_ptr<const Grammar> grammar_;
  size_t max_states_;
  std::vector<std::vector<uint32_t>> alternatives_;  // [num_rules] start positions
  std::vector<State> states_;
  std::unordered_multimap<uint64_t, int32_t> by_hash_;
  std::array<uint8_t, 256> byte_class_{};
  size_t num_byte_classes_ = 1;
  TransitionTable transitions_;
  std::vector<std::vector<Stack>> classes_;            // canonical stacks of each mask class
  std::unordered_multimap<uint64_t, int32_t> class_by_hash_;
  bool truncated_ = false;
};

}  // namespace pagellm::structured
