// A byte-level pushdown automaton for a Grammar, simulated Thompson-style: a state is the SET of
// parse stacks alive after the bytes read so far (each stack a list of grammar positions, top at
// the back, its top always a byte-set element; the empty stack means "the input so far is a
// complete match"). Sets are deduplicated, so matching is linear in the input for any grammar and
// never backtracks. States are interned and byte transitions memoized: for a regular grammar this
// is a lazily built DFA; for a recursive one, the states that generation actually visits.
//
// Not thread-safe: the owner (CompiledGrammar) serializes access.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace pagellm::structured {

class Automaton {
 public:
  static constexpr int32_t kDead = -1;
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
  bool accepting(int32_t state) const { return states_[size_t(state)].accepting; }
  // Bytes that some stack of `state` can read next (empty: nothing may follow).
  const ByteSet& next_bytes(int32_t state) const { return states_[size_t(state)].next; }
  size_t num_states() const { return states_.size(); }
  const Grammar& grammar() const { return *grammar_; }

 private:
  using Stack = std::vector<uint32_t>;
  struct State {
    std::vector<Stack> stacks;  // sorted, unique
    ByteSet next;
    bool accepting = false;
  };
  // Expands `stack` until every resulting stack's top is a byte-set element (or it is empty).
  void expand(Stack stack, std::vector<Stack>& out);
  // The id of `stacks`, a new one if it is new; kDead when new and the automaton is full.
  int32_t intern(std::vector<Stack> stacks);

  std::shared_ptr<const Grammar> grammar_;
  size_t max_states_;
  std::vector<std::vector<uint32_t>> alternatives_;  // [num_rules] start positions
  std::vector<State> states_;
  std::unordered_multimap<uint64_t, int32_t> by_hash_;
  std::unordered_map<uint64_t, int32_t> transitions_;  // (state << 8 | byte) -> state
};

}  // namespace pagellm::structured
