#include "structured/matcher.h"

#include <algorithm>
#include <mutex>

namespace pagellm::structured {

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const Vocab> vocab)
    : vocab_(std::move(vocab)), automaton_(std::move(grammar)) {
  path_.resize(vocab_->max_depth() + 1);
}

bool CompiledGrammar::compute_mask(int32_t state, std::span<uint32_t> words) {
  std::fill(words.begin(), words.end(), 0u);
  bool any = false;
  const std::vector<Vocab::Node>& nodes = vocab_->nodes();
  const std::vector<int32_t>& ids = vocab_->token_ids();
  path_[0] = state;
  // Preorder walk of the vocabulary trie; a rejected byte skips the node's whole subtree.
  for (size_t i = 1; i < nodes.size();) {
    const Vocab::Node& n = nodes[i];
    const int32_t from = path_[n.depth - 1];
    const int32_t to =
        automaton_.next_bytes(from).test(n.byte) ? automaton_.step(from, n.byte) : Automaton::kDead;
    if (to == Automaton::kDead) {
      i = n.subtree_end;
      continue;
    }
    path_[n.depth] = to;
    any = any || n.tokens_begin < n.tokens_end;
    for (uint32_t k = n.tokens_begin; k < n.tokens_end; ++k) {
      const uint32_t t = uint32_t(ids[k]);
      words[t >> 5] |= 1u << (t & 31);
    }
    ++i;
  }
  return any;
}

const CompiledGrammar::Mask* CompiledGrammar::cached_mask(int32_t state) const {
  uint64_t key = kPerState | uint32_t(state);
  if (!automaton_.truncated()) {
    const int32_t cls = automaton_.known_class(state);
    if (cls < 0) return nullptr;
    key = uint64_t(uint32_t(cls));
  }
  auto it = masks_.find(key);
  return it == masks_.end() ? nullptr : &it->second;
}

bool CompiledGrammar::fill_mask(int32_t state, std::span<uint32_t> words) {
  {
    std::shared_lock lock(mutex_);
    if (const Mask* mask = cached_mask(state)) {
      std::copy(mask->words.begin(), mask->words.end(), words.begin());
      return mask->any;
    }
  }
  std::unique_lock lock(mutex_);
  // The state's class is taken before the walk: a walk that truncates the automaton leaves a mask
  // that holds for this state only.
  const int32_t cls =
      automaton_.truncated() ? -1 : automaton_.mask_class(state, vocab_->max_depth());
  if (const Mask* mask = cached_mask(state)) {  // its class's, or built meanwhile
    std::copy(mask->words.begin(), mask->words.end(), words.begin());
    return mask->any;
  }
  const bool any = compute_mask(state, words);
  const uint64_t key =
      automaton_.truncated() ? kPerState | uint32_t(state) : uint64_t(uint32_t(cls));
  if (mask_bytes_ + words.size_bytes() <= kMaskCacheBytes) {
    masks_.emplace(key, Mask{std::vector<uint32_t>(words.begin(), words.end()), any});
    mask_bytes_ += words.size_bytes();
  }
  return any;
}

int32_t CompiledGrammar::advance(int32_t state, const std::string& bytes) {
  size_t i = 0;
  {
    std::shared_lock lock(mutex_);
    for (; i < bytes.size() && state != Automaton::kDead; ++i) {
      const int32_t next = automaton_.known_step(state, uint8_t(bytes[i]));
      if (next == Automaton::kUnknown) break;
      state = next;
    }
    if (i == bytes.size() || state == Automaton::kDead) return state;
  }
  std::unique_lock lock(mutex_);
  for (; i < bytes.size() && state != Automaton::kDead; ++i)
    state = automaton_.step(state, uint8_t(bytes[i]));
  return state;
}

bool CompiledGrammar::accepting(int32_t state) {
  std::shared_lock lock(mutex_);
  return automaton_.accepting(state);
}

bool CompiledGrammar::terminal(int32_t state) {
  std::shared_lock lock(mutex_);
  return automaton_.next_bytes(state).empty();
}

size_t CompiledGrammar::num_states() {
  std::shared_lock lock(mutex_);
  return automaton_.num_states();
}

size_t CompiledGrammar::num_cached_masks() {
  std::shared_lock lock(mutex_);
  return masks_.size();
}

void Matcher::fill_mask(std::span<uint32_t> words) const {
  if (ended_ || state_ < 0) {
    std::fill(words.begin(), words.end(), 0u);
    return;
  }
  const size_t num_words = grammar_->vocab().num_words();
  bool any = false;
  if (words.size() >= num_words) {
    any = grammar_->fill_mask(state_, words.first(num_words));
    std::fill(words.begin() + ptrdiff_t(num_words), words.end(), 0u);
  } else {  // a mask narrower than the vocabulary (never the engine's) keeps the words that fit
    std::vector<uint32_t> full(num_words);
    grammar_->fill_mask(state_, full);
    std::copy_n(full.begin(), words.size(), words.begin());
    any = std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
  }
  if (any && !grammar_->accepting(state_)) return;
  for (int32_t id : grammar_->vocab().eos_ids()) {
    if (id >= 0 && size_t(id) / 32 < words.size()) words[size_t(id) >> 5] |= 1u << (id & 31);
  }
}

bool Matcher::advance(int32_t token) {
  if (ended_ || state_ < 0) return false;
  if (grammar_->vocab().is_eos(token)) {
    ended_ = true;
    return true;  // the mask only offers EOS where it may end the output
  }
  const std::string& bytes = grammar_->vocab().bytes(token);
  state_ = bytes.empty() ? Automaton::kDead : grammar_->advance(state_, bytes);
  return state_ >= 0;
}

bool Matcher::finished() const { return ended_ || (state_ >= 0 && grammar_->terminal(state_)); }

}  // namespace pagellm::structured
