#include "structured/grammar.h"

#include <algorithm>
#include <functional>

#include "common/error.h"

namespace pagellm::structured {

ExprPtr bytes_expr(const ByteSet& set) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kBytes;
  e->bytes = set;
  return e;
}

ExprPtr byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  s.set_range(lo, hi);
  return bytes_expr(s);
}

ExprPtr literal(std::string_view text) {
  std::vector<ExprPtr> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte_range(uint8_t(c), uint8_t(c)));
  return seq(std::move(items));
}

namespace {

// texts[begin, end): sorted, unique, all sharing their first `depth` bytes.
ExprPtr trie_expr(const std::vector<std::string>& texts, size_t begin, size_t end, size_t depth) {
  size_t stop = depth;  // extend the shared prefix as far as every text agrees
  for (bool agree = true; agree; stop += agree) {
    for (size_t k = begin; k < end && agree; ++k) {
      agree = texts[k].size() > stop && texts[k][stop] == texts[begin][stop];
    }
  }
  std::vector<ExprPtr> alts;
  size_t i = begin;
  if (texts[i].size() == stop) alts.push_back(seq({})), ++i;  // the text that ends here sorts first
  while (i < end) {
    size_t j = i + 1;
    while (j < end && texts[j][stop] == texts[i][stop]) ++j;
    alts.push_back(trie_expr(texts, i, j, stop));
    i = j;
  }
  return seq(
      {literal(std::string_view(texts[begin]).substr(depth, stop - depth)), alt(std::move(alts))});
}

}  // namespace

ExprPtr literal_set(std::vector<std::string> texts) {
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  if (texts.empty()) return alt({});
  return trie_expr(texts, 0, texts.size(), 0);
}

ExprPtr seq(std::vector<ExprPtr> items) {
  if (items.size() == 1) return items.front();
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kSeq;
  e->items = std::move(items);
  return e;
}

ExprPtr alt(std::vector<ExprPtr> items) {
  if (items.empty()) return bytes_expr(ByteSet{});  // no alternative: matches nothing
  if (items.size() == 1) return items.front();
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kAlt;
  e->items = std::move(items);
  return e;
}

ExprPtr ref(int32_t rule) {
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kRef;
  e->rule = rule;
  return e;
}

ExprPtr repeat(ExprPtr item, int32_t min, int32_t max) {
  if (min == 1 && max == 1) return item;
  auto e = std::make_shared<Expr>();
  e->kind = Expr::Kind::kRepeat;
  e->items.push_back(std::move(item));
  e->min = min;
  e->max = max;
  return e;
}

namespace {

// UTF-8 encodings of [lo, hi] where every code point has the same encoded length: split until each
// piece is a product of byte ranges (the classic utf8-ranges construction).
void utf8_pieces(uint32_t lo, uint32_t hi, std::vector<ExprPtr>& out) {
  static constexpr uint32_t kMaxOfLen[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int n = 0; n < 3; ++n) {  // split at encoded-length boundaries first
    if (lo <= kMaxOfLen[n] && hi > kMaxOfLen[n]) {
      utf8_pieces(lo, kMaxOfLen[n], out);
      utf8_pieces(kMaxOfLen[n] + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back(byte_range(uint8_t(lo), uint8_t(hi)));
    return;
  }
  const int len = hi <= 0x7FF ? 2 : hi <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < len; ++i) {  // split where a continuation byte range is not full
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_pieces(lo, lo | m, out);
        utf8_pieces((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_pieces(lo, (hi & ~m) - 1, out);
        utf8_pieces(hi & ~m, hi, out);
        return;
      }
    }
  }
  auto encode = [len](uint32_t cp, uint8_t* b) {
    for (int i = len - 1; i > 0; --i) b[i] = uint8_t(0x80 | (cp & 0x3F)), cp >>= 6;
    b[0] = uint8_t((len == 2 ? 0xC0 : len == 3 ? 0xE0 : 0xF0) | cp);
  };
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  std::vector<ExprPtr> items;
  for (int i = 0; i < len; ++i) items.push_back(byte_range(a[i], b[i]));
  out.push_back(seq(std::move(items)));
}

}  // namespace

ExprPtr utf8_range(uint32_t lo, uint32_t hi) {
  std::vector<ExprPtr> out;
  hi = std::min<uint32_t>(hi, 0x10FFFF);
  if (lo <= 0xD7FF && hi >= 0xD800) {  // no surrogates
    if (lo <= 0xD7FF) utf8_pieces(lo, 0xD7FF, out);
    if (hi >= 0xE000) utf8_pieces(0xE000, hi, out);
  } else if (lo <= hi && !(lo >= 0xD800 && hi <= 0xDFFF)) {
    utf8_pieces(std::max(lo, lo >= 0xD800 && lo <= 0xDFFF ? 0xE000u : lo), hi, out);
  }
  return alt(std::move(out));
}

std::vector<uint32_t> Grammar::alternatives(int32_t rule) const {
  std::vector<uint32_t> starts;
  uint32_t pos = rule_start[static_cast<size_t>(rule)];
  starts.push_back(pos);
  for (;; ++pos) {
    if (elements[pos].type == Element::kEnd) break;
    if (elements[pos].type == Element::kAlt) starts.push_back(pos + 1);
  }
  return starts;
}

void Deadline::check() {
  if ((++calls_ & 255) != 0) return;  // the clock is read every 256th call
  if (std::chrono::steady_clock::now() > end_) {
    invalid_argument("structured output: compile time limit (" + std::to_string(max_ms_) +
                     " ms) exceeded");
  }
}

int32_t GrammarBuilder::rule(const std::string& name) {
  auto it = by_name_.find(name);
  if (it != by_name_.end()) return it->second;
  const int32_t id = new_rule(name);
  by_name_[name] = id;
  return id;
}

int32_t GrammarBuilder::new_rule(const std::string& hint) {
  if (names_.size() >= limits_.max_rules) {
    invalid_argument("structured output: grammar has more than " +
                     std::to_string(limits_.max_rules) + " rules (limit)");
  }
  names_.push_back(by_name_.count(hint) ? hint + "_" + std::to_string(names_.size()) : hint);
  bodies_.push_back(nullptr);
  return static_cast<int32_t>(names_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, ExprPtr body) {
  bodies_[static_cast<size_t>(rule)] = std::move(body);
}

void GrammarBuilder::count(size_t num_elements) {
  num_elements_ += num_elements;
  if (num_elements_ > limits_.max_elements) {
    invalid_argument("structured output: grammar larger than " +
                     std::to_string(limits_.max_elements) + " elements (limit)");
  }
  deadline_.check();
}

namespace {

uint32_t intern_set(Grammar& g, const ByteSet& s) {
  for (size_t i = 0; i < g.byte_sets.size(); ++i) {
    if (g.byte_sets[i] == s) return static_cast<uint32_t>(i);
  }
  g.byte_sets.push_back(s);
  return static_cast<uint32_t>(g.byte_sets.size() - 1);
}

}  // namespace

int32_t GrammarBuilder::aux_rule(Grammar& g, const ExprPtr& body,
                                 std::vector<std::vector<Element>>& pending) {
  const int32_t id = new_rule("aux");
  bodies_[static_cast<size_t>(id)] = body;
  pending.resize(names_.size());
  std::vector<Element> out;
  const std::vector<ExprPtr> single{body};
  const std::vector<ExprPtr>& alts = body->kind == Expr::Kind::kAlt ? body->items : single;
  for (size_t i = 0; i < alts.size(); ++i) {
    lower_seq(g, alts[i], out, pending);
    out.push_back(Element{i + 1 < alts.size() ? Element::kAlt : Element::kEnd, 0});
  }
  count(out.size());
  pending[static_cast<size_t>(id)] = std::move(out);
  return id;
}

// Rule repeating e.item between e.min and e.max times, as right recursion.
int32_t GrammarBuilder::repeat_rule(Grammar& g, const Expr& e,
                                    std::vector<std::vector<Element>>& pending) {
  const Element x = Element{Element::kRef, lower_item(g, e.items.front(), pending)};
  auto make = [&](std::vector<Element> body) {
    const int32_t id = new_rule("repeat");
    pending.resize(names_.size());
    count(body.size());
    pending[static_cast<size_t>(id)] = std::move(body);
    return id;
  };
  Repetition rep{x.value, 0, e.min, {}};
  std::vector<Element> head(static_cast<size_t>(e.min), x);
  if (e.max < 0) {  // R ::= x R | ε ; head R
    const int32_t r = static_cast<int32_t>(names_.size());
    make({x, Element{Element::kRef, uint32_t(r)}, Element{Element::kAlt, 0},
          Element{Element::kEnd, 0}});
    head.push_back(Element{Element::kRef, uint32_t(r)});
  } else if (e.max > e.min) {  // R1 ::= x | ε ; Rk ::= x R(k-1) | ε
    int32_t prev = make({x, Element{Element::kAlt, 0}, Element{Element::kEnd, 0}});
    rep.chain.push_back(prev);
    for (int32_t k = 1; k < e.max - e.min; ++k) {
      prev = make({x, Element{Element::kRef, uint32_t(prev)}, Element{Element::kAlt, 0},
                   Element{Element::kEnd, 0}});
      rep.chain.push_back(prev);
    }
    head.push_back(Element{Element::kRef, uint32_t(prev)});
  }
  head.push_back(Element{Element::kEnd, 0});
  rep.head = make(std::move(head));
  repetitions_.push_back(std::move(rep));
  return rep.head;
}

// The rule id standing for `e` (a named rule for a reference, else an aux rule).
uint32_t GrammarBuilder::lower_item(Grammar& g, const ExprPtr& e,
                                    std::vector<std::vector<Element>>& pending) {
  if (e->kind == Expr::Kind::kRef) return static_cast<uint32_t>(e->rule);
  auto it = aux_of_.find(e.get());
  if (it != aux_of_.end()) return static_cast<uint32_t>(it->second);
  const int32_t id =
      e->kind == Expr::Kind::kRepeat ? repeat_rule(g, *e, pending) : aux_rule(g, e, pending);
  aux_of_[e.get()] = id;
  return static_cast<uint32_t>(id);
}

void GrammarBuilder::lower_seq(Grammar& g, const ExprPtr& e, std::vector<Element>& out,
                               std::vector<std::vector<Element>>& pending) {
  switch (e->kind) {
    case Expr::Kind::kBytes:
      out.push_back(Element{Element::kBytes, intern_set(g, e->bytes)});
      break;
    case Expr::Kind::kRef:
      out.push_back(Element{Element::kRef, static_cast<uint32_t>(e->rule)});
      break;
    case Expr::Kind::kSeq:
      for (const ExprPtr& item : e->items) lower_seq(g, item, out, pending);
      break;
    case Expr::Kind::kAlt:
    case Expr::Kind::kRepeat:
      out.push_back(Element{Element::kRef, lower_item(g, e, pending)});
      break;
  }
  count(1);
}

Grammar GrammarBuilder::build(int32_t root) {
  Grammar g;
  std::vector<std::vector<Element>> pending(names_.size());
  const size_t num_named = names_.size();
  for (size_t r = 0; r < num_named; ++r) {
    if (!bodies_[r]) invalid_argument("grammar: rule '" + names_[r] + "' is used but not defined");
    const ExprPtr body = bodies_[r];
    const std::vector<ExprPtr> single{body};
    const std::vector<ExprPtr>& alts = body->kind == Expr::Kind::kAlt ? body->items : single;
    std::vector<Element> out;
    for (size_t i = 0; i < alts.size(); ++i) {
      lower_seq(g, alts[i], out, pending);
      out.push_back(Element{i + 1 < alts.size() ? Element::kAlt : Element::kEnd, 0});
    }
    pending.resize(names_.size());
    pending[r] = std::move(out);
  }
  for (size_t r = 0; r < pending.size(); ++r) {
    g.rule_start.push_back(static_cast<uint32_t>(g.elements.size()));
    g.elements.insert(g.elements.end(), pending[r].begin(), pending[r].end());
  }
  g.rule_names = names_;
  g.root = root;
  check_grammar(g);
  add_counting_runs(g);
  return g;
}

namespace {

// Rules that derive the empty string (fixpoint).
std::vector<bool> nullable_rules(const Grammar& g) {
  const size_t n = g.rule_start.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (uint32_t pos : g.alternatives(int32_t(r))) {
        bool all = true;
        for (; !g.is_end(pos); ++pos) {
          const Element& el = g.elements[pos];
          if (el.type == Element::kBytes || !nullable[el.value]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// Rules that derive at least one finite string (fixpoint).
std::vector<bool> productive_rules(const Grammar& g) {
  const size_t n = g.rule_start.size();
  std::vector<bool> productive(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (uint32_t pos : g.alternatives(int32_t(r))) {
        bool all = true;
        for (; !g.is_end(pos); ++pos) {
          const Element& el = g.elements[pos];
          if (el.type == Element::kRef && !productive[el.value]) {
            all = false;
            break;
          }
        }
        if (all) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  return productive;
}

}  // namespace

void GrammarBuilder::add_counting_runs(Grammar& g) const {
  const std::vector<bool> nullable = nullable_rules(g);
  auto add_run = [&g](std::vector<uint32_t> by_dist) {
    if (by_dist.size() < 3) return;  // distances 1 and 2 only: nothing to merge
    if (g.counts.empty()) g.counts.resize(g.elements.size());
    const uint32_t run = uint32_t(g.runs.size());
    for (uint32_t d = 1; d < by_dist.size(); ++d) g.counts[by_dist[d]] = {run, d};
    g.runs.push_back(std::move(by_dist));
  };
  for (const Repetition& rep : repetitions_) {
    // An x that may read nothing could repeat without reading a byte: its count is not bounded
    // by the bytes ahead, so its positions stay distinct.
    if (nullable[rep.item]) continue;
    // Head position start + j (x number j + 1 next) still needs min - j x.
    const uint32_t start = g.rule_start[size_t(rep.head)];
    std::vector<uint32_t> head(size_t(rep.min) + 1);
    for (int32_t d = 0; d <= rep.min; ++d) head[size_t(d)] = start + uint32_t(rep.min - d);
    add_run(std::move(head));
    // In R_k, the return point after its x (the reference to R_(k-1)) allows k - 1 more.
    std::vector<uint32_t> chain(rep.chain.size());
    for (size_t k = 2; k <= rep.chain.size(); ++k)
      chain[k - 1] = g.rule_start[size_t(rep.chain[k - 1])] + 1;
    if (!chain.empty()) chain[0] = g.rule_start[size_t(rep.chain[0])] + 1;
    add_run(std::move(chain));
  }
}

void check_grammar(const Grammar& g) {
  const size_t n = g.rule_start.size();
  for (const Element& el : g.elements) {
    if (el.type == Element::kRef && el.value >= n)
      invalid_argument("grammar: reference to an unknown rule");
  }
  if (!productive_rules(g)[static_cast<size_t>(g.root)]) {
    invalid_argument("grammar: rule '" + g.rule_names[size_t(g.root)] +
                     "' matches no finite string");
  }
  // Left recursion: a cycle in "rule A may begin with rule B" (through nullable prefixes). The
  // pushdown simulation would expand such a rule forever.
  const std::vector<bool> nullable = nullable_rules(g);
  std::vector<std::vector<uint32_t>> starts_with(n);
  for (size_t r = 0; r < n; ++r) {
    for (uint32_t pos : g.alternatives(int32_t(r))) {
      for (; !g.is_end(pos); ++pos) {
        const Element& el = g.elements[pos];
        if (el.type == Element::kBytes) break;
        // A reference in tail position replaces its caller on the stack instead of growing it, so
        // a cycle through it terminates in the automaton (which never re-expands a stack it has
        // seen): only growing references count.
        if (!g.is_end(pos + 1)) starts_with[r].push_back(el.value);
        if (!nullable[el.value]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the DFS stack, 2 done
  std::vector<std::pair<uint32_t, size_t>> stack;
  for (uint32_t r0 = 0; r0 < n; ++r0) {
    if (color[r0]) continue;
    stack.push_back({r0, 0});
    color[r0] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == starts_with[r].size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      const uint32_t next = starts_with[r][i++];
      if (color[next] == 1) {
        invalid_argument("grammar: left recursion through rule '" + g.rule_names[next] +
                         "' (it can derive itself without consuming input)");
      }
      if (color[next] == 0) {
        color[next] = 1;
        stack.push_back({next, 0});
      }
    }
  }
}

}  // namespace pagellm::structured
