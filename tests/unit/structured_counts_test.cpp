// Masks shared across counts, and masks built concurrently: bounded repetitions (minLength /
// maxLength, {m,n}) share a mask between counts far from the bound, and every mask bit must still
// equal "advancing by this token succeeds" at every count, the bounds included; matchers of one
// grammar working on several threads, and the engine's MaskBuilder, give the masks a serial run
// gives.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <thread>

#include "engine/mask_builder.h"
#include "structured/automaton.h"
#include "structured/compiler.h"
#include "structured_test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::structured {
namespace {

using namespace test;

// Every bit of m's mask against probing each token (EOS: allowed iff the text may end here).
void expect_exact_mask(const Matcher& m, const Vocab& v, const std::string& where) {
  std::vector<uint32_t> mask(v.num_words());
  m.fill_mask(mask);
  bool any = false;
  for (int32_t t = 0; t < int32_t(v.size()); ++t) {
    if (v.is_eos(t)) continue;
    Matcher probe = m;
    const bool ok = probe.advance(t);
    any = any || ok;
    ASSERT_EQ(bit(mask, t), ok) << "token " << t << " '" << v.bytes(t) << "' " << where;
  }
  for (int32_t eos : v.eos_ids()) ASSERT_EQ(bit(mask, eos), m.accepting() || !any) << where;
}

int32_t token_of(const Vocab& v, const std::string& bytes) {
  for (int32_t t = 0; t < int32_t(v.size()); ++t)
    if (v.bytes(t) == bytes) return t;
  ADD_FAILURE() << "no token '" << bytes << "'";
  return -1;
}

TEST(StructuredCounts, BoundedRepetitionsBecomeCountingRuns) {
  const Grammar g =
      build_grammar(json_spec(R"({"type":"string","minLength":5,"maxLength":9})"), {});
  ASSERT_EQ(g.runs.size(), 2u);  // the head (5 needed) and the chain (4 more allowed)
  ASSERT_EQ(g.counts.size(), g.elements.size());
  for (const std::vector<uint32_t>& run : g.runs) {
    for (uint32_t d = 1; d < run.size(); ++d) {
      EXPECT_EQ(g.counts[run[d]].dist, d);
      // With a window of w bytes, distances past w + 1 stand for w + 1; nearer ones for themselves.
      EXPECT_EQ(g.canonical(run[d], 1), d > 2 ? run[2] : run[d]);
      EXPECT_EQ(g.canonical(run[d], 100), run[d]);
    }
  }
  // An item that may match nothing could repeat without reading: its count is not bounded by the
  // bytes ahead, so it gets no run.
  StructuredOutputs nullable;
  nullable.regex = "(a?){3,8}";
  EXPECT_TRUE(build_grammar(nullable, {}).runs.empty());
}

// States of one class behave alike only while no cap cut the automaton short: a full automaton
// (or dropped stacks) says so, and masks are then kept per state (CompiledGrammar::mask_key).
TEST(StructuredCounts, AFullAutomatonReportsItselfTruncated) {
  auto g = std::make_shared<const Grammar>(
      build_grammar(json_spec(R"({"type":"string","minLength":20})"), {}));
  Automaton big(g);
  int32_t s = big.initial();
  for (char c : std::string("\"aaaaaaaa")) s = big.step(s, uint8_t(c));
  ASSERT_NE(s, Automaton::kDead);
  EXPECT_FALSE(big.truncated());
  // Far from the bound, counts differ in their states but share a class (window 2: counts more
  // than 3 from minLength).
  const int32_t a4 = [&] {
    int32_t t = big.initial();
    for (char c : std::string("\"aaaa")) t = big.step(t, uint8_t(c));
    return t;
  }();
  EXPECT_NE(a4, s);
  EXPECT_EQ(big.mask_class(a4, 2), big.mask_class(s, 2));
  Automaton small(g, 4);
  int32_t t = small.initial();
  for (char c : std::string("\"aaaaaaaa"))
    t = t == Automaton::kDead ? t : small.step(t, uint8_t(c));
  EXPECT_EQ(t, Automaton::kDead);
  EXPECT_TRUE(small.truncated());
}

// A small vocabulary whose longest token is 6 bytes: counts 7 or more from a bound share masks.
TEST(StructuredCounts, BoundedStringMasksAreExactAtEveryCount) {
  auto vocab = std::make_shared<const Vocab>(
      std::vector<std::string>{"</s>",  "a",   "aa",  "aaa",       "aaaa",     "\"",     "a\"",
                               "aa\"",  "\"}", "}",   "{\"s\":\"", "\xC3\xA9", "\xC3",   "\xA9",
                               "a\xC3", "\\",  "\\n", "aaaaaa",    "aaaaa\"",  "\"}aaaa"},
      std::vector<int32_t>{0}, 20);
  GrammarCompiler compiler(vocab);
  auto grammar = compiler.compile(json_spec(
      R"({"type":"object","properties":{"s":{"type":"string","minLength":12,"maxLength":25}},"required":["s"]})"));
  const int32_t open = token_of(*vocab, "{\"s\":\""), a = token_of(*vocab, "a");
  // First walk: four characters a token, so masks are made at counts 0, 4, 8, ...
  Matcher fast(grammar);
  ASSERT_TRUE(fast.advance(open));
  for (int c = 0; c + 4 <= 25; c += 4) {
    expect_exact_mask(fast, *vocab, "fast walk at count " + std::to_string(c));
    ASSERT_TRUE(fast.advance(token_of(*vocab, "aaaa")));
  }
  // Second walk: one at a time, every count from 0 to the maximum and past it; most masks now
  // come from the class cache, made at another count.
  Matcher slow(grammar);
  ASSERT_TRUE(slow.advance(open));
  const int32_t quote = token_of(*vocab, "\"");
  std::vector<uint32_t> mask(vocab->num_words());
  for (int c = 0; c <= 25; ++c) {
    expect_exact_mask(slow, *vocab, "count " + std::to_string(c));
    slow.fill_mask(mask);
    EXPECT_EQ(bit(mask, quote), c >= 12) << c;  // the string may close from minLength on
    EXPECT_EQ(bit(mask, a), c < 25) << c;       // and grow up to maxLength
    if (c < 25) {
      ASSERT_TRUE(slow.advance(a)) << c;
    }
  }
  // 26 counts, but those 7 or more from both bounds share: fewer masks than counts.
  EXPECT_LT(grammar->num_cached_masks(), 26u);
}

// On a real vocabulary: random walks inside a length-bounded string, every mask bit checked at
// every step (including the steps that cross minLength and reach maxLength).
TEST(StructuredCounts, BoundedStringMasksAreExactOnARealVocabulary) {
  const Vocab& v = *pycode_vocab();
  GrammarCompiler compiler(pycode_vocab());
  auto grammar = compiler.compile(json_spec(
      R"({"type":"object","properties":{"s":{"type":"string","minLength":40,"maxLength":70}},"required":["s"]})"));
  std::mt19937 rng(5);
  std::vector<uint32_t> mask(v.num_words());
  for (int walk = 0; walk < 3; ++walk) {
    Matcher m(grammar);
    for (int step = 0; step < 80 && !m.finished(); ++step) {
      expect_exact_mask(m, v, "walk " + std::to_string(walk) + " step " + std::to_string(step));
      m.fill_mask(mask);
      // Prefer short tokens, so that the walk passes every count near the bounds.
      std::vector<int32_t> allowed, short_ones;
      for (int32_t t = 0; t < int32_t(v.size()); ++t) {
        if (!bit(mask, t)) continue;
        allowed.push_back(t);
        if (v.bytes(t).size() <= 2) short_ones.push_back(t);
      }
      const std::vector<int32_t>& from =
          short_ones.empty() || rng() % 4 == 0 ? allowed : short_ones;
      ASSERT_TRUE(m.advance(from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)]));
    }
  }
}

// A seeded random walk of `steps` masks; returns a hash of every mask and token.
uint64_t walk_hash(const std::shared_ptr<CompiledGrammar>& grammar, const Vocab& v, uint64_t seed,
                   int steps) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> mask(v.num_words());
  uint64_t h = seed;
  auto m = std::make_unique<Matcher>(grammar);
  for (int step = 0; step < steps; ++step) {
    m->fill_mask(mask);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < int32_t(v.size()); ++t) {
      if (!bit(mask, t)) continue;
      allowed.push_back(t);
      h = (h ^ uint64_t(t)) * 0x100000001b3ULL;
    }
    if (allowed.empty()) return h;
    const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (!m->advance(t) || m->finished()) m = std::make_unique<Matcher>(grammar);
  }
  return h;
}

// Matchers of one grammar on 8 threads at once build its states and masks concurrently; each
// walk's masks equal those of the same walk run alone on a grammar of its own.
TEST(StructuredCounts, ConcurrentMatchersOfOneGrammarAgreeWithSerialOnes) {
  const Vocab& v = *pycode_vocab();
  for (
      const char* schema :
      {R"({"type":"array","items":{"type":"string"}})",
       R"({"type":"object","properties":{"text":{"type":"string","minLength":300}},"required":["text"]})"}) {
    constexpr int kThreads = 8;
    GrammarCompiler shared_compiler(pycode_vocab());
    auto shared = shared_compiler.compile(json_spec(schema));
    std::vector<uint64_t> concurrent(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back(
          [&, i] { concurrent[size_t(i)] = walk_hash(shared, v, uint64_t(i), 60); });
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < kThreads; ++i) {
      GrammarCompiler own(pycode_vocab());
      EXPECT_EQ(concurrent[size_t(i)],
                walk_hash(own.compile(json_spec(schema)), v, uint64_t(i), 60))
          << schema << " walk " << i;
    }
  }
}

// The engine's MaskBuilder: masks built on a pool, in the background, equal build_mask's serial
// ones, for grammar masks with and without allowed_token_ids and allowed_token_ids alone.
TEST(StructuredCounts, ParallelMaskBuilderEqualsSerialMasks) {
  const Vocab& v = *pycode_vocab();
  GrammarCompiler compiler(pycode_vocab());
  auto grammar =
      compiler.compile(json_spec(R"({"type":"array","items":{"type":"string","maxLength":30}})"));
  constexpr size_t kSeqs = 64;
  std::mt19937 rng(9);
  std::vector<std::unique_ptr<Matcher>> matchers;
  std::vector<std::vector<uint32_t>> allowed(kSeqs), parallel(kSeqs), serial(kSeqs);
  for (size_t i = 0; i < kSeqs; ++i) {
    matchers.push_back(std::make_unique<Matcher>(grammar));
    if (i % 3 == 0) {
      allowed[i].resize(v.num_words());
      for (uint32_t& w : allowed[i]) w = uint32_t(rng());
    }
    parallel[i].assign(v.num_words(), 0xDEADBEEFu);
    serial[i].assign(v.num_words(), 0u);
  }
  engine::MaskBuilder builder(4);
  std::vector<uint32_t> scratch(v.num_words());
  for (int step = 0; step < 20; ++step) {
    std::vector<engine::MaskJob> jobs, reference;
    for (size_t i = 0; i < kSeqs; ++i) {
      structured::Matcher* m = i % 7 == 3 ? nullptr : matchers[i].get();
      if (m == nullptr && allowed[i].empty()) continue;  // nothing to build for this seq
      jobs.push_back({m, parallel[i], allowed[i]});
      reference.push_back({m, serial[i], allowed[i]});
    }
    builder.start(jobs);
    builder.wait();
    for (const engine::MaskJob& job : reference) engine::build_mask(job);
    for (size_t i = 0; i < kSeqs; ++i) {
      if (i % 7 == 3 && allowed[i].empty()) continue;
      ASSERT_EQ(parallel[i], serial[i]) << "seq " << i << " step " << step;
    }
    for (size_t i = 0; i < kSeqs; ++i) {  // every matcher takes a random token its mask allows
      matchers[i]->fill_mask(scratch);
      std::vector<int32_t> ok;
      for (int32_t t = 0; t < int32_t(v.size()); ++t)
        if (bit(scratch, t)) ok.push_back(t);
      const int32_t t = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
      if (!matchers[i]->advance(t) || matchers[i]->finished())
        matchers[i] = std::make_unique<Matcher>(grammar);
    }
  }
  builder.start({});  // nothing to build: wait returns at once
  builder.wait();
}

}  // namespace
}  // namespace pagellm::structured
