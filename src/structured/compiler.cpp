#include "structured/compiler.h"

namespace pagellm::structured {
namespace {

std::string cache_key(const StructuredOutputs& spec) {
  // Appends only (GCC 12 warns falsely on "literal" + std::string&&).
  std::string key;
  auto with = [&key](const char* kind, const std::string& text) {
    key.append(kind).append(1, '\n').append(text);
    return key;
  };
  if (spec.json) return with("json", *spec.json);
  if (spec.json_object) return with("json_object", "");
  if (spec.regex) return with("regex", *spec.regex);
  if (spec.grammar) return with("grammar", *spec.grammar);
  key = "choice";
  for (const std::string& c : *spec.choice)
    key.append(1, '\n').append(std::to_string(c.size())).append(1, ':').append(c);
  return key;
}

}  // namespace

GrammarCompiler::GrammarCompiler(std::shared_ptr<const tok::Tokenizer> tokenizer,
                                 std::vector<int32_t> eos_ids, size_t vocab_size, Limits limits,
                                 size_t capacity)
    : tokenizer_(std::move(tokenizer)),
      eos_ids_(std::move(eos_ids)),
      vocab_size_(vocab_size),
      limits_(limits),
      capacity_(capacity) {}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocab> vocab, Limits limits, size_t capacity)
    : limits_(limits), capacity_(capacity), vocab_(std::move(vocab)) {}

std::shared_ptr<const Vocab> GrammarCompiler::vocab() {
  std::lock_guard lock(mutex_);
  if (vocab_building_.valid()) vocab_ = vocab_building_.get();  // rethrows the thread's error
  if (!vocab_) vocab_ = Vocab::from_tokenizer(*tokenizer_, eos_ids_, vocab_size_);
  return vocab_;
}

void GrammarCompiler::build_vocab_in_background() {
  std::lock_guard lock(mutex_);
  if (vocab_ || vocab_building_.valid() || !tokenizer_) return;
  vocab_building_ =
      std::async(std::launch::async, [tokenizer = tokenizer_, eos = eos_ids_, size = vocab_size_] {
        return Vocab::from_tokenizer(*tokenizer, eos, size);
      });
}

size_t GrammarCompiler::num_cached() const {
  std::lock_guard lock(mutex_);
  return cache_.size();
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::compile(const StructuredOutputs& spec) {
  const std::string key = cache_key(spec);
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.first->num_states() > kMaxCachedStates) {
      // Its automaton has grown large (many distinct nesting paths): new requests start afresh,
      // the ones using it keep it until they finish.
      lru_.erase(it->second.second);
      cache_.erase(it);
    } else if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  // Compiled outside the lock: a slow compile never holds up a cached one.
  auto grammar = std::make_shared<const Grammar>(build_grammar(spec, limits_));
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar), vocab());
  // The first mask (a walk of the vocabulary trie) is computed here, off the step loop.
  std::vector<uint32_t> first(compiled->vocab().num_words());
  compiled->fill_mask(compiled->initial_state(), first);
  std::lock_guard lock(mutex_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.first;  // another thread got there first
  lru_.push_front(key);
  cache_.emplace(key, std::make_pair(compiled, lru_.begin()));
  while (cache_.size() > capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace pagellm::structured
