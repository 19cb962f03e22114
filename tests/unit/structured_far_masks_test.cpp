// Masks built from a far class's mask: a state whose counts sit near their bounds takes the bits of
// every token no longer than its horizon from the cached mask of the same stacks with the counts
// far from the bounds, and walks only the longer tokens. These masks must equal the whole-trie
// walk's bit for bit: random walks drive a grammar built with the reuse and one without it through
// the same tokens and compare every mask, on JSON schemas (bounded strings, arrays, enums), regexes
// and GBNF grammars.
#include <gtest/gtest.h>

#include <bit>
#include <random>

#include "structured/compiler.h"
#include "structured_test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::structured {
namespace {

using namespace test;

struct Compared {
  CompiledGrammar::MaskStats stats;  // of the grammar with the reuse
  int num_masks = 0;                 // masks compared
};

// Seeded random walks through `spec` on a grammar with far-mask reuse and one without; every
// mask of the first must equal the second's. Short tokens are preferred now and then, so that the
// walks pass through every count near a bound.
Compared compare_walks(const std::shared_ptr<const Vocab>& vocab, const StructuredOutputs& spec,
                       int num_walks, int max_steps) {
  auto grammar = std::make_shared<const Grammar>(build_grammar(spec, {}));
  auto reusing = std::make_shared<CompiledGrammar>(grammar, vocab, true);
  auto walking = std::make_shared<CompiledGrammar>(grammar, vocab, false);
  std::mt19937 rng(77);
  std::vector<uint32_t> fast(vocab->num_words()), full(vocab->num_words());
  Compared out;
  for (int walk = 0; walk < num_walks; ++walk) {
    Matcher a(reusing), b(walking);
    for (int step = 0; step < max_steps && !a.finished(); ++step) {
      a.fill_mask(fast);
      b.fill_mask(full);
      ++out.num_masks;
      for (size_t w = 0; w < fast.size(); ++w) {
        if (fast[w] == full[w]) continue;
        const int32_t t = int32_t(w * 32 + size_t(std::countr_zero(fast[w] ^ full[w])));
        ADD_FAILURE() << "walk " << walk << " step " << step << ": token " << t << " '"
                      << vocab->bytes(t) << "' reuse " << bit(fast, t) << ", full walk "
                      << bit(full, t);
        return out;
      }
      std::vector<int32_t> allowed, short_ones;
      for (int32_t t = 0; t < int32_t(vocab->size()); ++t) {
        if (!bit(full, t) || vocab->is_eos(t)) continue;
        allowed.push_back(t);
        if (vocab->bytes(t).size() <= 2) short_ones.push_back(t);
      }
      if (allowed.empty()) break;
      const std::vector<int32_t>& from =
          short_ones.empty() || rng() % 3 == 0 ? allowed : short_ones;
      const int32_t t = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
      EXPECT_TRUE(a.advance(t));
      EXPECT_TRUE(b.advance(t));
    }
  }
  out.stats = reusing->mask_stats();
  EXPECT_EQ(walking->mask_stats().num_partial_walks, 0u);
  return out;
}

TEST(StructuredFarMasks, VocabIndexesTokenLengths) {
  const Vocab v({"</s>", "a", "ab", "abcd", "b", "bcd", "xyzzy"}, {0}, 8);
  EXPECT_EQ(v.tokens_longer_than(0).size(), 6u);
  EXPECT_EQ(v.tokens_longer_than(2).size(), 3u);  // abcd, bcd, xyzzy
  EXPECT_EQ(v.tokens_longer_than(4).size(), 1u);
  EXPECT_EQ(v.tokens_longer_than(5).size(), 0u);
  EXPECT_EQ(v.tokens_longer_than(100).size(), 0u);
  for (const Vocab::Node& n : v.nodes()) {
    uint32_t longest = 0;  // recomputed from the node's subtree
    for (uint32_t i = uint32_t(&n - v.nodes().data()); i < n.subtree_end; ++i) {
      const Vocab::Node& m = v.nodes()[i];
      if (m.tokens_begin < m.tokens_end) longest = std::max(longest, m.depth);
    }
    EXPECT_EQ(n.max_len, longest);
  }
}

// A vocabulary whose longest token (24 bytes) keeps the far distance small, with quotes and
// escapes at every offset, so that partial walks decide long tokens that close the string.
TEST(StructuredFarMasks, BoundedStringOnASmallVocabulary) {
  std::vector<std::string> tokens{"</s>", "{\"s\":\"", "\"", "\"}", "}", "\\", "\\n", "\xC3\xA9"};
  for (int k = 1; k <= 24; ++k) {
    tokens.push_back(std::string(size_t(k), 'a'));
    tokens.push_back(std::string(size_t(k - 1), 'a') + "\"");
    tokens.push_back(std::string(size_t(k - 1), 'a') + "\"}");
    tokens.push_back(std::string(size_t(k / 2), 'b') + "\\n" + std::string(size_t(k / 2), 'b'));
  }
  auto vocab = std::make_shared<const Vocab>(tokens, std::vector<int32_t>{0}, tokens.size());
  const Compared c = compare_walks(
      vocab,
      json_spec(R"({"type":"object","properties":{"s":{"type":"string","minLength":60,)"
                R"("maxLength":140}},"required":["s"]})"),
      6, 300);
  EXPECT_GT(c.stats.num_partial_walks, 10u) << c.num_masks << " masks compared";
}

TEST(StructuredFarMasks, BoundedStringOnARealVocabulary) {
  const Compared c = compare_walks(
      pycode_vocab(),
      json_spec(R"({"type":"object","properties":{"text":{"type":"string","minLength":300,)"
                R"("maxLength":420}},"required":["text"]})"),
      3, 400);
  EXPECT_GT(c.stats.num_partial_walks, 0u) << c.num_masks << " masks compared";
}

TEST(StructuredFarMasks, ArraysWithItemBounds) {
  const Compared c = compare_walks(
      pycode_vocab(),
      json_spec(R"({"type":"array","items":{"enum":["x","yy",7]},"minItems":60,"maxItems":90})"), 3,
      400);
  EXPECT_GT(c.stats.num_partial_walks, 0u) << c.num_masks << " masks compared";
}

TEST(StructuredFarMasks, NestedObjectsWithSeveralBounds) {
  compare_walks(pycode_vocab(), json_spec(R"({"type":"object","properties":{
                  "a":{"type":"string","maxLength":150},
                  "b":{"type":"array","maxItems":4,
                       "items":{"type":"string","minLength":5,"maxLength":200}},
                  "c":{"enum":["red","green","blue"]}},"required":["a","b","c"]})"),
                3, 400);
}

TEST(StructuredFarMasks, EnumsHaveNoCountsToReuse) {
  const Compared c = compare_walks(
      pycode_vocab(), json_spec(R"({"enum":["alpha","beta","gamma delta",12,null]})"), 4, 50);
  EXPECT_EQ(c.stats.num_partial_walks, 0u);
}

TEST(StructuredFarMasks, RegexRepetitions) {
  const Compared c = compare_walks(
      pycode_vocab(), regex_spec(R"([a-z ]{40,160}\.[0-9]{2,60}(,[a-c]{3})*)"), 3, 400);
  EXPECT_GT(c.stats.num_partial_walks, 0u) << c.num_masks << " masks compared";
}

TEST(StructuredFarMasks, GbnfRepetitions) {
  const std::string grammar = R"g(root ::= "<" [a-z ]{50,220} ">" item{2,40}
item ::= "(" [0-9]+ ")"
)g";
  const Compared c = compare_walks(pycode_vocab(), grammar_spec(grammar), 3, 400);
  EXPECT_GT(c.stats.num_partial_walks, 0u) << c.num_masks << " masks compared";
}

}  // namespace
}  // namespace pagellm::structured
