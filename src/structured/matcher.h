// Token-level matching: a CompiledGrammar pairs a grammar's automaton with a vocabulary and turns
// automaton states into allowed-token bitmasks (cached per state, since states repeat: inside a
// JSON string, after each comma of an array...). A Matcher is one sequence's position in it.
//
// Mask layout: uint32 words, token id t allowed iff words[t / 32] >> (t % 32) & 1.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/automaton.h"
#include "structured/vocab.h"

namespace pagellm::structured {

class CompiledGrammar {
 public:
  // Bytes of cached masks per grammar; past it masks are still computed, just not kept.
  static constexpr size_t kMaskCacheBytes = 8u << 20;

  CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocab> vocab);

  const Vocab& vocab() const { return *vocab_; }
  int32_t initial_state() const { return 0; }
  // Tokens whose bytes the grammar can read from `state` (EOS is the matcher's business).
  void fill_mask(int32_t state, std::span<uint32_t> words);
  // The state after reading `bytes`, or Automaton::kDead.
  int32_t advance(int32_t state, const std::string& bytes);
  bool accepting(int32_t state);
  // Nothing may follow: the match is complete.
  bool terminal(int32_t state);
  size_t num_states();

 private:
  void compute_mask(int32_t state, std::span<uint32_t> words);

  std::shared_ptr<const Vocab> vocab_;
  std::mutex mutex_;  // guards everything below (one engine thread per engine, but engines share)
  Automaton automaton_;
  std::unordered_map<int32_t, std::vector<uint32_t>> masks_;
  size_t mask_bytes_ = 0;
  std::vector<int32_t> path_;  // [max trie depth + 1] scratch: state at each depth of the walk
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
  // The output is complete: EOS was accepted, or nothing may follow the text.
  bool finished() const;
  bool accepting() const { return state_ >= 0 && grammar_->accepting(state_); }
  bool dead() const { return state_ < 0; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  int32_t state_;
  bool ended_ = false;  // EOS accepted
};

}  // namespace pagellm::structured
