// Structured-output specs → compiled grammars, with a cache keyed by the spec. One per engine (it
// owns the engine's vocabulary view); thread-safe, so requests compile on the caller's thread,
// before they reach the step loop.
#pragma once

#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagellm/sampling_params.h"
#include "structured/matcher.h"

namespace pagellm::tok {
class Tokenizer;
}

namespace pagellm::structured {

// The grammar of a spec (no vocabulary): what the compiler caches and the fuzz target exercises.
// Throws kInvalidArgument naming the problem or the limit hit.
Grammar build_grammar(const StructuredOutputs& spec, const Limits& limits);

class GrammarCompiler {
 public:
  static constexpr size_t kDefaultCapacity = 32;
  // A cached grammar whose automaton has more states than this is recompiled for new requests.
  static constexpr size_t kMaxCachedStates = 100000;

  // eos_ids: the engine's EOS ids; vocab_size: the model's (mask width).
  GrammarCompiler(std::shared_ptr<const tok::Tokenizer> tokenizer, std::vector<int32_t> eos_ids,
                  size_t vocab_size, Limits limits = {}, size_t capacity = kDefaultCapacity);
  // A vocabulary given directly (tests).
  GrammarCompiler(std::shared_ptr<const Vocab> vocab, Limits limits = {},
                  size_t capacity = kDefaultCapacity);

  std::shared_ptr<CompiledGrammar> compile(const StructuredOutputs& spec);
  // The vocabulary view (decoded tokens, their trie), built on first use, or by a background
  // thread that build_vocab_in_background() started (the engine does at startup, so that its first
  // structured request does not wait ~0.1 s at a 128k vocabulary).
  std::shared_ptr<const Vocab> vocab();
  void build_vocab_in_background();
  size_t num_cached() const;

 private:
  std::shared_ptr<const tok::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_ids_;
  size_t vocab_size_ = 0;
  Limits limits_;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Vocab> vocab_;  // built on first use
  std::future<std::shared_ptr<const Vocab>> vocab_building_;  // valid while the thread owns it
  std::list<std::string> lru_;          // most recent first
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<CompiledGrammar>, std::list<std::string>::iterator>>
      cache_;
};

}  // namespace pagellm::structured
