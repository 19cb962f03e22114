// The one grammar representation every structured-output front end compiles to: a context-free
// grammar over bytes. Front ends (JSON schema, regex, choice, GBNF) build expression trees (Expr);
// GrammarBuilder lowers them into flat rules (llama.cpp's layout: each rule is its alternatives'
// element sequences, separated by kAlt and closed by kEnd) and checks the grammar (undefined rules,
// left recursion, an empty language) and the size limits. Repetition becomes right recursion, so
// the pushdown simulation in automaton.h stays bounded for regular languages.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace pagellm::structured {

// Limits on what a request may ask us to compile. Each one, when hit, is a kInvalidArgument error
// that names it.
struct Limits {
  size_t max_spec_bytes = 256 * 1024;  // schema / regex / grammar text, or all choices together
  int max_nesting = 64;                // schema depth, regex groups, grammar parentheses
  size_t max_elements = 200000;        // flat grammar elements after lowering repetitions
  size_t max_rules = 50000;
  int max_repeat = 10000;  // bounds of {m,n}, minLength/maxLength, minItems/maxItems
  size_t max_enum = 4096;  // values of one enum, or choices
  int max_compile_ms = 2000;
};

// 256-bit set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  void merge(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
  }
  void subtract(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] &= ~o.words[i];
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

// An expression tree node. kSeq with no items is the empty string.
struct Expr {
  enum class Kind { kBytes, kSeq, kAlt, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  ByteSet bytes;               // kBytes
  std::vector<ExprPtr> items;  // kSeq, kAlt; kRepeat: exactly one
  int32_t rule = -1;           // kRef
  int32_t min = 0;             // kRepeat
  int32_t max = -1;            // kRepeat; -1 = unbounded
};

ExprPtr bytes_expr(const ByteSet& set);
ExprPtr byte_range(uint8_t lo, uint8_t hi);
ExprPtr literal(std::string_view text);
ExprPtr seq(std::vector<ExprPtr> items);
ExprPtr alt(std::vector<ExprPtr> items);  // no items: matches nothing
ExprPtr ref(int32_t rule);
ExprPtr repeat(ExprPtr item, int32_t min, int32_t max);
// Any one of `texts`, as a trie (shared prefixes merged), so that a long list of choices keeps
// few parse stacks alive at once.
ExprPtr literal_set(std::vector<std::string> texts);
inline ExprPtr optional(ExprPtr item) { return repeat(std::move(item), 0, 1); }
inline ExprPtr empty_expr() { return seq({}); }
// One UTF-8 encoded code point in [lo, hi] (surrogates excluded), as byte-range sequences.
ExprPtr utf8_range(uint32_t lo, uint32_t hi);

// A flat grammar element. Positions (uint32 indices into Grammar::elements) identify a point inside
// one alternative of one rule.
struct Element {
  enum Type : uint8_t { kEnd, kAlt, kRef, kBytes };
  Type type = kEnd;
  uint32_t value = 0;  // kRef: rule id; kBytes: index into byte_sets
};

struct Grammar {
  std::vector<Element> elements;
  std::vector<uint32_t> rule_start;  // [num_rules] position of each rule's first element
  std::vector<ByteSet> byte_sets;
  std::vector<std::string> rule_names;
  int32_t root = 0;

  // Bounded repetitions x{m,n} whose x never matches the empty string lower to positions that
  // differ only in a count: in the head "x x ... x" how many x are still needed, in the chain of
  // "R_k ::= x R_(k-1) | ε" how many more are allowed. Such a position is in a counting run;
  // runs[r][d] is run r's position at distance d (d >= 1), and counts[pos] says which run and
  // distance pos has. Two positions of one run whose distances both exceed w + 1 behave alike for
  // the next w bytes (each x reads at least one byte, so the count cannot run out), which lets
  // masks be shared between counts far from the bound (canonical()).
  static constexpr uint32_t kNoRun = std::numeric_limits<uint32_t>::max();
  struct Count {
    uint32_t run = kNoRun;
    uint32_t dist = 0;
  };
  std::vector<Count> counts;                // [elements.size()], or empty when there are no runs
  std::vector<std::vector<uint32_t>> runs;  // [num_runs][max distance + 1]

  // The position that stands for `pos` when only the next `window` bytes matter: pos itself, or
  // for a counting position farther than window + 1 from its bound, the run's position at
  // distance window + 1.
  uint32_t canonical(uint32_t pos, uint32_t window) const {
    if (counts.empty() || counts[pos].run == kNoRun || counts[pos].dist <= window + 1) return pos;
    return runs[counts[pos].run][window + 1];
  }

  // True where an alternative's element sequence ends (kAlt or kEnd).
  bool is_end(uint32_t pos) const {
    return elements[pos].type == Element::kEnd || elements[pos].type == Element::kAlt;
  }
  // Start positions of rule r's alternatives.
  std::vector<uint32_t> alternatives(int32_t rule) const;
};

// Checks a compile deadline; the front ends call it in their loops.
class Deadline {
 public:
  explicit Deadline(int max_ms)
      : max_ms_(max_ms),
        end_(std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms)) {}
  void check();  // throws kInvalidArgument naming the limit once it has passed

 private:
  int max_ms_;
  std::chrono::steady_clock::time_point end_;
  uint32_t calls_ = 0;
};

class GrammarBuilder {
 public:
  GrammarBuilder(const Limits& limits, Deadline& deadline) : limits_(limits), deadline_(deadline) {}
  // The rule named `name`, created (undefined) on first use.
  int32_t rule(const std::string& name);
  // A fresh rule whose name starts with `hint`.
  int32_t new_rule(const std::string& hint);
  void define(int32_t rule, ExprPtr body);
  bool defined(int32_t rule) const { return bodies_[static_cast<size_t>(rule)] != nullptr; }
  const Limits& limits() const { return limits_; }
  Deadline& deadline() { return deadline_; }
  // Lowers every rule and checks the result; throws kInvalidArgument on an undefined rule, left
  // recursion, an empty language or a limit.
  Grammar build(int32_t root);

 private:
  uint32_t lower_item(Grammar& g, const ExprPtr& e, std::vector<std::vector<Element>>& pending);
  void lower_seq(Grammar& g, const ExprPtr& e, std::vector<Element>& out,
                 std::vector<std::vector<Element>>& pending);
  int32_t aux_rule(Grammar& g, const ExprPtr& body, std::vector<std::vector<Element>>& pending);
  int32_t repeat_rule(Grammar& g, const Expr& e, std::vector<std::vector<Element>>& pending);
  void count(size_t num_elements);
  // Fills g.counts and g.runs from the bounded repetitions lowered (after layout).
  void add_counting_runs(Grammar& g) const;

  // A bounded repetition as lowered by repeat_rule: x's rule, the head rule (min references to x
  // first) and the chain rules R_1, R_2, ... (R_k allows k more x).
  struct Repetition {
    uint32_t item = 0;
    int32_t head = 0;
    int32_t min = 0;
    std::vector<int32_t> chain;
  };

  const Limits& limits_;
  Deadline& deadline_;
  std::vector<std::string> names_;
  std::vector<ExprPtr> bodies_;
  std::unordered_map<std::string, int32_t> by_name_;
  std::unordered_map<const Expr*, int32_t> aux_of_;  // the rule made for a shared subexpression
  std::vector<Repetition> repetitions_;
  size_t num_elements_ = 0;
};

// Checks a lowered grammar: undefined rules, left recursion, an empty language.
void check_grammar(const Grammar& g);

}  // namespace pagellm::structured
