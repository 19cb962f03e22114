// Token-level matching: a CompiledGrammar pairs a grammar's automaton with a vocabulary and turns
// automaton states into allowed-token bitmasks, cached per mask class (Automaton::mask_class):
// states repeat (inside a JSON string, after each comma of an array...), and states that differ
// only in a count far from its bound (a string's length under minLength / maxLength) share one
// mask. A class near a bound starts from its far class's mask: every token too short to reach the
// bound is decided alike there (its context-independent part), so only the longer tokens are
// walked (Automaton::far_class). A Matcher is one sequence's position in it.
//
// Thread-safe, and built for many matchers of one grammar working at once (the engine builds the
// masks of a step in parallel): what is already built (memoized transitions, cached masks) is read
// under a shared lock, and so are the vocabulary walks that make new masks (each keeps the states
// it needs and the automaton lacks to itself); only adding a state, transition or mask takes the
// lock exclusively, briefly. A mask being made is made once: other threads wanting it wait.
//
// Mask layout: uint32 words, token id t allowed iff words[t / 32] >> (t % 32) & 1.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "structured/automaton.h"
#include "structured/vocab.h"

namespace pagellm::structured {

class WalkStates;  // matcher.cpp

class CompiledGrammar {
 public:
  // Bytes of cached masks per grammar; past it masks are still computed, just not kept.
  static constexpr size_t kMaskCacheBytes = 8u << 20;

  // reuse_far_masks: build a near-bound class's mask from its far class's (far_class below);
  // false: every new mask walks the whole vocabulary (tests compare the two).
  CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocab> vocab,
                  bool reuse_far_masks = true);

  const Vocab& vocab() const { return *vocab_; }
  int32_t initial_state() const { return 0; }
  // Tokens whose bytes the grammar can read from `state` (EOS is the matcher's business), into
  // words [vocab().num_words()]. Returns whether any token is allowed.
  bool fill_mask(int32_t state, std::span<uint32_t> words);
  // The state after reading `bytes`, or Automaton::kDead.
  int32_t advance(int32_t state, const std::string& bytes);
  bool accepting(int32_t state);
  // Nothing may follow: the match is complete.
  bool terminal(int32_t state);
  size_t num_states();
  // Masks kept in the cache (one per mask class met, up to kMaskCacheBytes).
  size_t num_cached_masks();
  // The vocabulary walks that made new masks: whole ones, and partial ones (tokens longer than a
  // far class's horizon only), with their CPU time.
  struct MaskStats {
    size_t num_full_walks = 0;
    size_t num_partial_walks = 0;
    double full_walk_cpu_ms = 0;
    double partial_walk_cpu_ms = 0;
  };
  MaskStats mask_stats();

 private:
  struct Mask {
    std::vector<uint32_t> words;  // [vocab().num_words()]
    bool any = false;             // some token is allowed
  };
  // Walks the vocabulary trie from `state` (shared lock held), keeping the states it needs that
  // the automaton lacks in `walk`; returns whether any token is allowed.
  bool compute_mask(int32_t state, std::span<uint32_t> words, WalkStates& walk) const;
  // Sets the bits of the tokens longer than `horizon` bytes that the grammar can read from
  // `state` (leaves the other bits); returns whether it set any. horizon 0: the whole trie.
  bool walk_longer_than(uint32_t horizon, int32_t state, std::span<uint32_t> words,
                        WalkStates& walk) const;
  // The mask of a state near a count's bound, from the cached mask of its far class
  // (Automaton::far_class), which holds for every token of up to `horizon` bytes: only the longer
  // tokens are walked. Same lock and result as compute_mask.
  bool compute_from_far_mask(int32_t state, const Mask& far, uint32_t horizon,
                             std::span<uint32_t> words, WalkStates& walk) const;
  // Makes the mask of `state`, whose cache key `key` this thread has claimed (in building_), and
  // caches it; returns whether any token is allowed.
  bool build_mask(int32_t state, uint64_t key, std::span<uint32_t> words);
  // The walk build_mask runs under the shared lock: from the far class's cached mask where there is
  // one (`partial` set), else the whole trie.
  bool walk_for_mask(int32_t state, std::span<uint32_t> words, WalkStates& walk,
                     bool& partial) const;
  // The mask cache's key of `state` (exclusive lock held): its class, or the state itself once
  // the automaton is truncated.
  uint64_t mask_key(int32_t state);
  // The cached mask of `state`, or null. Needs the lock (shared or exclusive).
  const Mask* cached_mask(int32_t state) const;
  // The cached mask of mask class `cls` (while the automaton is not truncated), or null.
  const Mask* cached_class_mask(int32_t cls) const;

  std::shared_ptr<const Vocab> vocab_;
  const bool reuse_far_masks_;
  // Guards everything below: shared to read what is built, exclusive to build.
  mutable std::shared_mutex mutex_;
  Automaton automaton_;
  // By mask class while the automaton is not truncated; by state (kPerState | state) after.
  static constexpr uint64_t kPerState = uint64_t{1} << 32;
  std::unordered_map<uint64_t, Mask> masks_;
  size_t mask_bytes_ = 0;
  std::unordered_set<uint64_t> building_;  // keys whose mask some thread is walking for
  std::condition_variable_any built_;      // a walk ended
  MaskStats stats_;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<CompiledGrammar> grammar)
      : grammar_(std::move(grammar)), state_(grammar_->initial_state()) {}

  // The allowed tokens now: the grammar's mask, plus EOS when the text so far is a complete match
  // (or when no token can continue it, so that a sequence never gets stuck).
  void fill_mask(std::span<uint32_t> words) const;
  // Consumes a sampled token. False when the grammar rejects it (the matcher is then dead).
  bool advance(int32_t token);
  // The engine's deferred advance: defer() keeps the sampled token, and settle() consumes it
  // later, on a mask thread while the next forward pass runs (new automaton states cost
  // microseconds per byte), before the next fill_mask. settle() returns (and keeps until
  // take_settled()) whether the token was accepted, rejected, or completed the output.
  enum class Settled { kNothing, kAccepted, kRejected, kComplete };
  void defer(int32_t token) { pending_ = token; }
  Settled settle();
  Settled take_settled() { return std::exchange(settled_, Settled::kNothing); }
  // The output is complete: EOS was accepted, or nothing may follow the text.
  bool finished() const;
  bool accepting() const { return state_ >= 0 && grammar_->accepting(state_); }
  bool dead() const { return state_ < 0; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  int32_t state_;
  bool ended_ = false;  // EOS accepted
  int32_t pending_ = -1;  // a deferred token, or -1
  Settled settled_ = Settled::kNothing;
};

}  // namespace pagellm::structured
