// Token-level matching on real vocabularies (pycode-25M: 32k SentencePiece tokens with byte
// fallback; stories260K: 512): the vocabulary's bytes, masks that agree with token-by-token
// advancing, random walks through the mask that always end in valid output, and the mask cost.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "structured/compiler.h"
#include "structured_test_util.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::structured {
namespace {

using namespace test;

TEST(StructuredVocab, DecodesSentencePieceAndByteFallbackTokens) {
  auto tok = tok::Tokenizer::from_dir(kPycode);
  const Vocab& v = *pycode_vocab();
  const int32_t nl = *tok->token_to_id("<0x0A>");
  EXPECT_EQ(v.bytes(nl), "\n");
  const int32_t e2 = *tok->token_to_id("<0xE2>");
  EXPECT_EQ(v.bytes(e2), "\xE2");  // a lone byte of a multi-byte character
  // SentencePiece's dummy prefix makes "return x" the pieces "▁return" "▁x": bytes " return x".
  const std::vector<int32_t> ids = tok->encode("return x", false);
  std::string joined;
  for (int32_t id : ids) joined += v.bytes(id);
  EXPECT_EQ(joined, " return x");
  EXPECT_TRUE(v.bytes(*tok->bos_token_id()).empty());  // special: never offered
  EXPECT_EQ(v.num_words(), (size_t(tok->vocab_size()) + 31) / 32);
}

TEST(StructuredVocab, ModelVocabularyBoundsTheMask) {
  // A model smaller than its tokenizer: ids past the model never appear in a mask.
  const Vocab small({"a", "b", "ab", "c"}, {1}, 2);
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.num_words(), 1u);
  EXPECT_TRUE(small.bytes(2).empty());
  // A padded model: the extra ids exist in the mask, never allowed.
  const Vocab padded({"a", "b"}, {}, 70);
  EXPECT_EQ(padded.num_words(), 3u);
}

// Every token's mask bit equals "advancing by this token succeeds", in several grammar states.
TEST(StructuredMatcher, MaskAgreesWithAdvancingOnEveryToken) {
  GrammarCompiler compiler(pycode_vocab());
  auto grammar = compiler.compile(json_spec(
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer"}},"required":["name","n"]})"));
  const Vocab& v = *pycode_vocab();
  const int32_t eos = v.eos_ids().front();
  auto tok = tok::Tokenizer::from_dir(kPycode);
  Matcher m(grammar);
  std::vector<uint32_t> mask(v.num_words());
  for (const char* piece : {"{\"", "name\":", " \"ab", "c\", \"n\"", ":", " -12", "}"}) {
    m.fill_mask(mask);
    for (int32_t t = 0; t < int32_t(v.size()); ++t) {
      Matcher probe = m;
      const bool ok = probe.advance(t);
      ASSERT_EQ(bit(mask, t), t == eos ? m.accepting() : ok)
          << "token " << t << " before '" << piece << "'";
    }
    for (char c : std::string(piece)) {
      const auto ids = tok->encode(std::string(1, c), false);
      bool advanced = false;
      for (int32_t id : ids) {
        if (v.bytes(id) == std::string(1, c)) advanced = m.advance(id);
      }
      if (!advanced) {
        // Single characters always have a token (byte fallback); find it by bytes.
        for (int32_t t = 0; t < int32_t(v.size()) && !advanced; ++t) {
          if (v.bytes(t) == std::string(1, c)) advanced = m.advance(t);
        }
      }
      ASSERT_TRUE(advanced) << "could not feed '" << c << "'";
    }
  }
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.finished());  // nothing may follow the closing brace
  m.fill_mask(mask);
  EXPECT_TRUE(bit(mask, eos));
}

// Random walks through the masks always produce output the grammar accepts and that parses.
void random_walks(const std::shared_ptr<const Vocab>& vocab, const StructuredOutputs& spec,
                  int num_walks, const std::function<void(const std::string&)>& check) {
  GrammarCompiler compiler(vocab);
  auto grammar = compiler.compile(spec);
  std::mt19937 rng(1234);
  std::vector<uint32_t> mask(vocab->num_words());
  for (int walk = 0; walk < num_walks; ++walk) {
    Matcher m(grammar);
    std::string text;
    for (int step = 0; step < 400 && !m.finished(); ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(vocab->size()); ++t) {
        if (bit(mask, t)) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty());
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.advance(t));
      if (!vocab->is_eos(t)) text += vocab->bytes(t);
    }
    ASSERT_TRUE(m.finished()) << "walk " << walk << " did not finish: " << text;
    check(text);
  }
}

TEST(StructuredMatcher, RandomWalksProduceValidJson) {
  const std::string schema = R"({"type":"object","properties":{
      "id":{"type":"integer","minimum":0,"maximum":99},
      "tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":3},
      "kind":{"enum":["a","b c","ü"]},
      "ok":{"type":["boolean","null"]}},"required":["id","kind"]})";
  for (const auto& vocab : {pycode_vocab(), load_vocab(kStories)}) {
    random_walks(vocab, json_spec(schema), 20, [](const std::string& text) {
      const nlohmann::json j = nlohmann::json::parse(text);
      EXPECT_TRUE(j.is_object()) << text;
      EXPECT_TRUE(j["id"].is_number_integer() && j["id"].get<int>() >= 0 &&
                  j["id"].get<int>() <= 99)
          << text;
      const std::string kind = j["kind"].get<std::string>();
      EXPECT_TRUE(kind == "a" || kind == "b c" || kind == "ü") << text;
      if (j.contains("tags")) {
        EXPECT_LE(j["tags"].size(), 3u) << text;
      }
    });
  }
}

TEST(StructuredMatcher, RandomWalksMatchRegexAndChoice) {
  StructuredOutputs re;
  re.regex = R"((\+1 )?\(\d{3}\) \d{3}-\d{4})";
  random_walks(pycode_vocab(), re, 20, [](const std::string& text) {
    EXPECT_TRUE(text.size() == 14 || text.size() == 17) << text;
  });
  StructuredOutputs choice;
  choice.choice = std::vector<std::string>{"positive", "negative", "neutral"};
  random_walks(pycode_vocab(), choice, 20, [](const std::string& text) {
    EXPECT_TRUE(text == "positive" || text == "negative" || text == "neutral") << text;
  });
}

// The engine's deferred advance: a matcher that defers each token and settles it before its next
// mask gives the masks of one that advances at once, says when the output is complete, and
// reports a token its grammar rejects.
TEST(StructuredMatcher, DeferredTokensSettleAsAdvancing) {
  const auto vocab = pycode_vocab();
  GrammarCompiler compiler(vocab);
  auto grammar = compiler.compile(
      json_spec(R"({"type":"object","properties":{"k":{"enum":["ab","cd"]}},"required":["k"]})"));
  std::mt19937 rng(7);
  std::vector<uint32_t> now(vocab->num_words()), deferred(vocab->num_words());
  for (int walk = 0; walk < 10; ++walk) {
    Matcher a(grammar), b(grammar);
    EXPECT_EQ(b.settle(), Matcher::Settled::kNothing);
    for (int step = 0; step < 200 && !a.finished(); ++step) {
      a.fill_mask(now);
      b.fill_mask(deferred);
      ASSERT_EQ(now, deferred) << "walk " << walk << " step " << step;
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(vocab->size()); ++t)
        if (bit(now, t)) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty());
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(a.advance(t));
      b.defer(t);
      const Matcher::Settled verdict = b.settle();
      EXPECT_EQ(verdict, a.finished() ? Matcher::Settled::kComplete : Matcher::Settled::kAccepted);
      EXPECT_EQ(b.take_settled(), verdict);
      EXPECT_EQ(b.take_settled(), Matcher::Settled::kNothing);  // taken once
    }
    ASSERT_TRUE(a.finished());
  }
  Matcher c(grammar);
  c.fill_mask(now);
  int32_t outside = 0;
  while (bit(now, outside)) ++outside;
  c.defer(outside);
  EXPECT_EQ(c.settle(), Matcher::Settled::kRejected);
  EXPECT_TRUE(c.dead());
}

TEST(StructuredMatcher, CompiledGrammarsAreCached) {
  GrammarCompiler compiler(pycode_vocab());
  compiler.compile(json_spec(R"({"type":"integer"})"));  // the vocabulary is built on first use
  const auto t0 = std::chrono::steady_clock::now();
  auto a = compiler.compile(json_spec(R"({"type":"string"})"));
  const auto t1 = std::chrono::steady_clock::now();
  auto b = compiler.compile(json_spec(R"({"type":"string"})"));
  const auto t2 = std::chrono::steady_clock::now();
  EXPECT_EQ(a.get(), b.get());
  std::printf(
      "compile {\"type\":\"string\"} at vocab 32000 (with its first mask): cold %.0f us, cached "
      "%.1f us\n",
      std::chrono::duration<double, std::micro>(t1 - t0).count(),
      std::chrono::duration<double, std::micro>(t2 - t1).count());
  StructuredOutputs obj;
  obj.json_object = true;
  EXPECT_NE(compiler.compile(obj).get(), a.get());
  EXPECT_EQ(compiler.num_cached(), 3u);
}

// Mask cost at the 32k vocabulary: the first walk meets mostly new automaton states (a trie walk
// each); later walks mostly hit the per-state mask cache. Printed for docs/PERF.md.
TEST(StructuredMatcher, MaskCostAt32kVocab) {
  GrammarCompiler compiler(pycode_vocab());
  StructuredOutputs obj;
  obj.json_object = true;
  auto grammar = compiler.compile(obj);
  const Vocab& v = *pycode_vocab();
  std::vector<uint32_t> mask(v.num_words());
  std::mt19937 rng(7);
  double cold_us = 0, warm_us = 0;
  int num_cold = 0, num_warm = 0;
  for (int walk = 0; walk < 8; ++walk) {
    Matcher m(grammar);
    for (int step = 0; step < 100 && !m.finished(); ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      m.fill_mask(mask);
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      (walk == 0 ? cold_us : warm_us) += us;
      ++(walk == 0 ? num_cold : num_warm);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(v.size()); ++t) {
        if (bit(mask, t)) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty());
      ASSERT_TRUE(
          m.advance(allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]));
    }
  }
  std::printf(
      "json_object masks at vocab %zu: first walk %.1f us/token (%d), later walks %.1f us/token "
      "(%d)\n",
      v.size(), cold_us / std::max(num_cold, 1), num_cold, warm_us / std::max(num_warm, 1),
      num_warm);
}

// The most expensive mask: inside a JSON string almost every token is allowed, so the first mask
// of that state walks nearly the whole vocabulary trie; the second is a cache copy.
TEST(StructuredMatcher, StringStateMaskCost) {
  GrammarCompiler compiler(pycode_vocab());
  auto grammar = compiler.compile(
      json_spec(R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]})"));
  Matcher m(grammar);
  const Vocab& v = *pycode_vocab();
  for (char c : std::string("{\"s\":\"")) {
    for (int32_t t = 0; t < int32_t(v.size()); ++t) {
      if (v.bytes(t) == std::string(1, c)) {
        ASSERT_TRUE(m.advance(t));
        break;
      }
    }
  }
  std::vector<uint32_t> mask(v.num_words());
  auto time_us = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    m.fill_mask(mask);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  const double cold = time_us();
  const double warm = time_us();
  size_t allowed = 0;
  for (int32_t t = 0; t < int32_t(v.size()); ++t) allowed += bit(mask, t);
  EXPECT_GT(allowed, v.size() / 2);
  std::printf(
      "string-content mask at vocab %zu (%zu tokens allowed): first %.0f us, cached %.1f us\n",
      v.size(), allowed, cold, warm);
}

}  // namespace
}  // namespace pagellm::structured
