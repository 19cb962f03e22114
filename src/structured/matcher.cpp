#include "structured/matcher.h"

#include <algorithm>
#include <ctime>
#include <mutex>
#include <optional>

namespace pagellm::structured {
namespace {

// CPU time of the calling thread: a walk runs on one thread, and on a loaded machine its wall time
// also counts the time other work held the core.
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

}  // namespace

// A vocabulary walk's view of the automaton: its built states (read under the shared lock) plus
// the states this walk reaches that are not built yet, kept here with ids kFirstLocal - k, so that
// walks on several threads run at once and none changes the automaton.
class WalkStates {
 public:
  explicit WalkStates(const Automaton& a)
      : a_(a), max_local_(a.max_states() > a.num_states() ? a.max_states() - a.num_states() : 0) {}

  // As Automaton::step.
  int32_t step(int32_t state, uint8_t byte) {
    const uint64_t key = a_.transition_key(state, byte);  // local states' ids are negative
    Recent& slot = recent_[(key * 0x9e3779b97f4a7c15ULL) >> (64 - kRecentBits)];
    if (slot.key == key) return slot.to;
    const int32_t to = find_or_build(state, byte, key);
    slot = {key, to};
    return to;
  }
  bool truncated() const { return truncated_; }

  // Adds the walk's states and transitions to the automaton (exclusive lock held), so that later
  // walks and matchers find them built.
  void merge_into(Automaton& a) {
    std::vector<int32_t> global(local_.size());
    for (size_t k = 0; k < local_.size(); ++k) global[k] = a.add_state(std::move(local_[k].stacks));
    auto to_global = [&](int32_t id) {
      return id <= kFirstLocal ? global[size_t(kFirstLocal - id)] : id;
    };
    for (const auto& [key, to] : transitions_) {
      const int32_t from = to_global(Automaton::key_state(key)), target = to_global(to);
      // A state the full automaton refused: step() decides those transitions itself.
      if (from == Automaton::kDead || (to != Automaton::kDead && target == Automaton::kDead))
        continue;
      a.add_transition(Automaton::rekey(key, from), target);
    }
  }

 private:
  // step() past the recent transitions: the automaton's, this walk's, or a new one.
  int32_t find_or_build(int32_t state, uint8_t byte, uint64_t key) {
    if (!(state >= 0 ? a_.next_bytes(state) : local(state).next).test(byte))
      return Automaton::kDead;
    if (state >= 0) {
      const int32_t next = a_.known_step(state, byte);
      if (next != Automaton::kUnknown) return next;
    }
    auto it = transitions_.find(key);
    if (it != transitions_.end()) return it->second;
    Automaton::Stacks next =
        a_.successor(state >= 0 ? a_.stacks(state) : local(state).stacks, byte, truncated_);
    int32_t id = next.empty() ? Automaton::kDead : a_.find(next);
    if (id == Automaton::kUnknown) id = intern(std::move(next));
    transitions_.emplace(key, id);
    return id;
  }

  static constexpr int32_t kFirstLocal = -3;  // below kDead and kUnknown
  struct Local {
    Automaton::Stacks stacks;
    ByteSet next;
  };
  Local& local(int32_t id) { return local_[size_t(kFirstLocal - id)]; }

  int32_t intern(Automaton::Stacks stacks) {
    const uint64_t h = Automaton::hash(stacks);
    auto [lo, hi] = by_hash_.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      if (local(it->second).stacks == stacks) return it->second;
    }
    if (local_.size() >= max_local_) {  // as the automaton when full: dead, and truncated
      truncated_ = true;
      return Automaton::kDead;
    }
    const ByteSet next = a_.next_bytes_of(stacks);
    local_.push_back({std::move(stacks), next});
    const int32_t id = kFirstLocal - int32_t(local_.size() - 1);
    by_hash_.emplace(h, id);
    return id;
  }

  // The walk's recent transitions, direct-mapped: a trie walk asks the same few states (a string's
  // body) for the same bytes over and over, and this is cheaper than the automaton's hash map.
  static constexpr int kRecentBits = 12;
  struct Recent {
    uint64_t key = ~uint64_t{0};  // a transition_key; never a real one (states are 32-bit)
    int32_t to = 0;
  };
  std::vector<Recent> recent_ = std::vector<Recent>(size_t{1} << kRecentBits);

  const Automaton& a_;
  size_t max_local_;  // the automaton's room left: a walk never goes past its cap
  std::vector<Local> local_;
  std::unordered_multimap<uint64_t, int32_t> by_hash_;
  std::unordered_map<uint64_t, int32_t> transitions_;  // (state << 8 | byte) -> state
  bool truncated_ = false;
};

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const Vocab> vocab, bool reuse_far_masks)
    : vocab_(std::move(vocab)), reuse_far_masks_(reuse_far_masks), automaton_(std::move(grammar)) {}

bool CompiledGrammar::compute_mask(int32_t state, std::span<uint32_t> words,
                                   WalkStates& walk) const {
  std::fill(words.begin(), words.end(), 0u);
  return walk_longer_than(0, state, words, walk);
}

bool CompiledGrammar::walk_longer_than(uint32_t horizon, int32_t state, std::span<uint32_t> words,
                                       WalkStates& walk) const {
  bool any = false;
  const std::vector<Vocab::Node>& nodes = vocab_->nodes();
  const std::vector<int32_t>& ids = vocab_->token_ids();
  std::vector<int32_t> path(vocab_->max_depth() + 1);  // the state at each depth of the walk
  path[0] = state;
  // Preorder walk of the vocabulary trie; a rejected byte skips the node's whole subtree, and so
  // does a subtree without a token longer than the horizon.
  for (size_t i = 1; i < nodes.size();) {
    const Vocab::Node& n = nodes[i];
    if (n.max_len <= horizon) {
      i = n.subtree_end;
      continue;
    }
    const int32_t to = walk.step(path[n.depth - 1], n.byte);
    if (to == Automaton::kDead) {
      i = n.subtree_end;
      continue;
    }
    path[n.depth] = to;
    if (n.depth > horizon) {
      any = any || n.tokens_begin < n.tokens_end;
      for (uint32_t k = n.tokens_begin; k < n.tokens_end; ++k) {
        const uint32_t t = uint32_t(ids[k]);
        words[t >> 5] |= 1u << (t & 31);
      }
    }
    ++i;
  }
  return any;
}

bool CompiledGrammar::compute_from_far_mask(int32_t state, const Mask& far, uint32_t horizon,
                                            std::span<uint32_t> words, WalkStates& walk) const {
  std::copy(far.words.begin(), far.words.end(), words.begin());
  for (int32_t t : vocab_->tokens_longer_than(horizon)) words[size_t(t) >> 5] &= ~(1u << (t & 31));
  walk_longer_than(horizon, state, words, walk);
  return std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
}

const CompiledGrammar::Mask* CompiledGrammar::cached_class_mask(int32_t cls) const {
  auto it = masks_.find(uint64_t(uint32_t(cls)));
  return it == masks_.end() ? nullptr : &it->second;
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

uint64_t CompiledGrammar::mask_key(int32_t state) {
  if (automaton_.truncated()) return kPerState | uint32_t(state);
  return uint64_t(uint32_t(automaton_.mask_class(state, vocab_->max_depth())));
}

bool CompiledGrammar::fill_mask(int32_t state, std::span<uint32_t> words) {
  {
    std::shared_lock lock(mutex_);
    if (const Mask* mask = cached_mask(state)) {
      std::copy(mask->words.begin(), mask->words.end(), words.begin());
      return mask->any;
    }
  }
  uint64_t key = 0;
  {
    std::unique_lock lock(mutex_);
    for (;;) {  // the class's mask may exist, or be in the making on another thread
      key = mask_key(state);
      if (const Mask* mask = cached_mask(state)) {
        std::copy(mask->words.begin(), mask->words.end(), words.begin());
        return mask->any;
      }
      if (building_.insert(key).second) break;
      built_.wait(lock);
    }
  }
  return build_mask(state, key, words);
}

bool CompiledGrammar::walk_for_mask(int32_t state, std::span<uint32_t> words, WalkStates& walk,
                                    bool& partial) const {
  const Mask* far = nullptr;
  Automaton::FarClass fc;
  if (reuse_far_masks_ && !automaton_.truncated()) {
    fc = automaton_.far_class(state, vocab_->max_depth());
    if (fc.cls >= 0) far = cached_class_mask(fc.cls);
  }
  partial = far != nullptr;
  return partial ? compute_from_far_mask(state, *far, fc.horizon, words, walk)
                 : compute_mask(state, words, walk);
}

bool CompiledGrammar::build_mask(int32_t state, uint64_t key, std::span<uint32_t> words) {
  bool any = false, partial = false;
  std::optional<WalkStates> walk;
  const double t0 = thread_cpu_ms();
  try {
    std::shared_lock lock(mutex_);
    walk.emplace(automaton_);
    any = walk_for_mask(state, words, *walk, partial);
  } catch (...) {  // the key is free again, for the next thread that wants it
    {
      std::unique_lock lock(mutex_);
      building_.erase(key);
    }
    built_.notify_all();
    throw;
  }
  const double ms = thread_cpu_ms() - t0;
  {
    std::unique_lock lock(mutex_);
    building_.erase(key);
    (partial ? stats_.num_partial_walks : stats_.num_full_walks) += 1;
    (partial ? stats_.partial_walk_cpu_ms : stats_.full_walk_cpu_ms) += ms;
    // A walk that hit a cap, or one the automaton was truncated under meanwhile, made a mask
    // that holds for this state only.
    if (walk->truncated()) automaton_.mark_truncated();
    walk->merge_into(automaton_);
    const uint64_t store = automaton_.truncated() ? kPerState | uint32_t(state) : key;
    if (mask_bytes_ + words.size_bytes() <= kMaskCacheBytes && !masks_.count(store)) {
      masks_.emplace(store, Mask{std::vector<uint32_t>(words.begin(), words.end()), any});
      mask_bytes_ += words.size_bytes();
    }
  }
  built_.notify_all();
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

CompiledGrammar::MaskStats CompiledGrammar::mask_stats() {
  std::shared_lock lock(mutex_);
  return stats_;
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

Matcher::Settled Matcher::settle() {
  if (pending_ < 0) return Settled::kNothing;
  const int32_t token = std::exchange(pending_, -1);
  settled_ = !advance(token) ? Settled::kRejected
             : finished()    ? Settled::kComplete
                             : Settled::kAccepted;
  return settled_;
}

bool Matcher::finished() const { return ended_ || (state_ >= 0 && grammar_->terminal(state_)); }

}  // namespace pagellm::structured
