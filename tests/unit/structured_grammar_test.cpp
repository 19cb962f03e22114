// The structured-output compilers (JSON schema, regex, choice, GBNF) and the byte automaton, with
// no tokenizer: which strings each compiled grammar accepts, and which inputs are rejected with
// which message.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include "common/error.h"
#include "structured/automaton.h"
#include "structured/compiler.h"
#include "structured_test_util.h"

namespace pagellm::structured {
namespace {

using namespace test;

class Accepts {
 public:
  explicit Accepts(const StructuredOutputs& spec)
      : automaton_(std::make_shared<const Grammar>(build_grammar(spec, Limits{}))) {}
  bool operator()(const std::string& text) {
    int32_t state = automaton_.initial();
    for (char c : text) {
      state = automaton_.step(state, uint8_t(c));
      if (state == Automaton::kDead) return false;
    }
    return automaton_.accepting(state);
  }
  Automaton& automaton() { return automaton_; }

 private:
  Automaton automaton_;
};

// The message of the kInvalidArgument error `spec` must fail with.
std::string error_of(const StructuredOutputs& spec, Limits limits = {}) {
  try {
    build_grammar(spec, limits);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "compiled without error";
  return "";
}

// Transitions are kept per byte class: one step on 'a' memoizes every byte the grammar's byte
// sets hold alike with it, so 'q' is known at once; '7' (another class here) is not.
TEST(StructuredAutomaton, TransitionsAreSharedByByteClass) {
  Accepts a(regex_spec(R"([a-z]+[0-9]?)"));
  Automaton& au = a.automaton();
  EXPECT_EQ(au.num_byte_classes(), 3u);  // letters, digits, the rest
  const int32_t s = au.initial();
  EXPECT_EQ(au.known_step(s, uint8_t('q')), Automaton::kUnknown);
  const int32_t after_a = au.step(s, uint8_t('a'));
  ASSERT_GE(after_a, 0);
  EXPECT_EQ(au.known_step(s, uint8_t('q')), after_a);
  EXPECT_EQ(au.known_step(s, uint8_t('7')), Automaton::kDead);  // not readable first
  EXPECT_EQ(au.known_step(after_a, uint8_t('7')), Automaton::kUnknown);
  EXPECT_TRUE(a("abc7"));
  EXPECT_TRUE(a("zz"));
  EXPECT_FALSE(a("7"));
  EXPECT_FALSE(a("a77"));
}

TEST(StructuredRegex, MatchesWholeOutput) {
  Accepts a(regex_spec(R"(\d{3}-[a-c]+(x|yz)?)"));
  EXPECT_TRUE(a("123-abc"));
  EXPECT_TRUE(a("123-ayz"));
  EXPECT_TRUE(a("000-cx"));
  EXPECT_FALSE(a("12-abc"));
  EXPECT_FALSE(a("123-"));
  EXPECT_FALSE(a("123-abd"));
  EXPECT_FALSE(a("123-ax "));
}

TEST(StructuredRegex, ClassesEscapesAndUnicode) {
  Accepts a(regex_spec(R"([^\d\s]\w*\.é{2}[α-ω]?)"));
  EXPECT_TRUE(a("a_1.éé"));
  EXPECT_TRUE(a("Zz.ééλ"));
  EXPECT_FALSE(a("1a.éé"));
  EXPECT_FALSE(a("a.é"));
  Accepts dot(regex_spec("a.c"));
  EXPECT_TRUE(dot("a€c"));
  EXPECT_FALSE(dot("a\nc"));
  EXPECT_FALSE(
      dot("a\xE2\x82"
          "c"));  // a truncated UTF-8 character is not a character
}

TEST(StructuredRegex, NestedNullableRepetitionsAreFine) {
  Accepts a(regex_spec("(a*)*b|(a?)+c"));
  EXPECT_TRUE(a("aaab"));
  EXPECT_TRUE(a("b"));
  EXPECT_TRUE(a("aac"));
  EXPECT_FALSE(a("aa"));
}

TEST(StructuredRegex, CatastrophicBacktrackingPatternIsLinear) {
  Accepts a(regex_spec("(a+)+$"));
  Accepts b(regex_spec("(x+x+)+y"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(a(std::string(5000, 'a')));
  EXPECT_FALSE(b(std::string(5000, 'x') + "z"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_LT(b.automaton().num_states(), 20u);
}

TEST(StructuredRegex, StateExplosionIsCapped) {
  // (a|b)*a(a|b){12} needs 2^13 DFA states; with a cap of 100 the automaton stops growing and
  // inputs that would need more states are rejected instead.
  auto grammar =
      std::make_shared<const Grammar>(build_grammar(regex_spec("(a|b)*a(a|b){12}"), Limits{}));
  Automaton capped(grammar, 100);
  std::mt19937 rng(3);
  int32_t state = capped.initial();
  int num_dead = 0;
  for (int i = 0; i < 2000; ++i) {
    const int32_t next = capped.step(state, std::bernoulli_distribution(0.5)(rng) ? 'a' : 'b');
    if (next == Automaton::kDead) {
      ++num_dead;
      continue;
    }
    state = next;
  }
  EXPECT_LE(capped.num_states(), 100u);
  EXPECT_GT(num_dead, 0);
  Automaton uncapped(grammar);
  state = uncapped.initial();
  for (char c : std::string(40, 'b') + "a" + std::string(12, 'b'))
    state = uncapped.step(state, uint8_t(c));
  EXPECT_TRUE(uncapped.accepting(state));
}

TEST(StructuredRegex, RejectsWhatIsNotLinearOrMalformed) {
  EXPECT_NE(error_of(regex_spec(R"((a)\1)")).find("backreferences"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("(?=a)a")).find("lookaround"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("(ab")).find("missing ')'"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("[a-")).find("regex"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("a{5,2}")).find("n < m"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("*a")).find("nothing to repeat"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("a{100000}")).find("limit"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("a\xff\xff\xff\xff")).find("invalid UTF-8"), std::string::npos);
  EXPECT_NE(error_of(regex_spec("\xc0\x80")).find("invalid UTF-8"), std::string::npos);  // overlong
  EXPECT_NE(error_of(regex_spec(std::string(100, '(') + "a" + std::string(100, ')')))
                .find("nested deeper"),
            std::string::npos);
  // Bounded repetitions that multiply stay within the element limit or fail naming it.
  EXPECT_NE(error_of(regex_spec("((a{1000}){1000}){1000}|b{9000}c{9000}d{9000}e{9000}f{9000}"),
                     Limits{.max_elements = 20000})
                .find("elements (limit)"),
            std::string::npos);
}

TEST(StructuredRegex, EmptyClassOfSurrogatesMatchesNothing) {
  Accepts a(regex_spec("x|\\uD800"));  // a lone surrogate is no character: only "x" matches
  EXPECT_TRUE(a("x"));
  EXPECT_FALSE(a("\xED\xA0\x80"));
}

TEST(StructuredChoice, AcceptsExactlyTheChoices) {
  StructuredOutputs s;
  s.choice = std::vector<std::string>{"yes", "no", "maybe so"};
  Accepts a(s);
  EXPECT_TRUE(a("yes"));
  EXPECT_TRUE(a("maybe so"));
  EXPECT_FALSE(a("ye"));
  EXPECT_FALSE(a("yess"));
  s.choice = std::vector<std::string>{};
  EXPECT_NE(error_of(s).find("at least one"), std::string::npos);
}

TEST(StructuredChoice, LongListsWithSharedPrefixesStayExact) {
  StructuredOutputs s;
  std::vector<std::string> choices;
  for (int i = 0; i < 4000; ++i)
    choices.push_back(std::string("item-").append(std::to_string(i * 7)));
  choices.push_back("item-");
  choices.push_back("");
  s.choice = choices;
  Accepts a(s);
  EXPECT_TRUE(a("item-0"));
  EXPECT_TRUE(a("item-27993"));  // the last one
  EXPECT_TRUE(a("item-7"));
  EXPECT_TRUE(a("item-"));
  EXPECT_TRUE(a(""));
  EXPECT_FALSE(a("item-1"));
  EXPECT_FALSE(a("item-28666"));
  EXPECT_FALSE(a("item"));
  EXPECT_LT(a.automaton().num_states(), 40u);
}

TEST(StructuredGbnf, ParsesAndMatches) {
  Accepts a(grammar_spec(R"G(# arithmetic
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= num | "(" expr ")"
num  ::= [0-9]+ ("." [0-9]{1,3})?
)G"));
  EXPECT_TRUE(a("1+2"));
  EXPECT_TRUE(a("(1.5-2)+30"));
  EXPECT_FALSE(a("1+"));
  EXPECT_FALSE(a("(1"));
  EXPECT_FALSE(a("1.2345"));
  Accepts multi(grammar_spec("root ::= \"a\"\n  | \"b\" x\nx ::= \"\\x41\" | \"\\u00e9\""));
  EXPECT_TRUE(multi("a"));
  EXPECT_TRUE(multi("bA"));
  EXPECT_TRUE(multi("bé"));
  EXPECT_FALSE(multi("b"));
}

TEST(StructuredGbnf, RejectsBadGrammars) {
  EXPECT_NE(
      error_of(grammar_spec("root ::= a \"x\"\na ::= root \"y\" | \"z\"")).find("left recursion"),
      std::string::npos);
  EXPECT_NE(error_of(grammar_spec("root ::= root \"x\" | \"y\"")).find("left recursion"),
            std::string::npos);
  EXPECT_NE(
      error_of(grammar_spec("root ::= undefined")).find("'undefined' is used but not defined"),
      std::string::npos);
  EXPECT_NE(error_of(grammar_spec("a ::= \"x\"")).find("no 'root'"), std::string::npos);
  EXPECT_NE(error_of(grammar_spec("root ::= \"x\" root")).find("matches no finite string"),
            std::string::npos);
  EXPECT_NE(error_of(grammar_spec("root ::= \"abc")).find("unterminated"), std::string::npos);
  EXPECT_NE(error_of(grammar_spec("root ::= ::=")).find("grammar"), std::string::npos);
  EXPECT_NE(error_of(grammar_spec("")).find("empty grammar"), std::string::npos);
}

TEST(StructuredJsonSchema, ObjectWithRequiredAndOptionalProperties) {
  Accepts a(json_spec(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":5},
      "age":{"type":"integer","minimum":0,"maximum":150},
      "tags":{"type":"array","items":{"enum":["a","b",null,3]},"minItems":1,"maxItems":2},
      "ok":{"type":"boolean"}},
    "required":["name","ok"]})"));
  EXPECT_TRUE(a(R"({"name":"bob","ok":true})"));
  EXPECT_TRUE(a(R"({ "name": "bob", "age": 42, "ok": false })"));
  EXPECT_TRUE(a(R"({"name":"","tags":["a",null],"ok":true})"));
  EXPECT_TRUE(a(R"({"name":"é\"\u00e9","age":0,"tags":[3],"ok":true})"));
  EXPECT_FALSE(a(R"({"ok":true})"));                       // name is required
  EXPECT_FALSE(a(R"({"name":"bob"})"));                    // ok is required
  EXPECT_FALSE(a(R"({"name":"bobbie","ok":true})"));       // maxLength
  EXPECT_FALSE(a(R"({"name":"b","age":151,"ok":true})"));  // maximum
  EXPECT_FALSE(a(R"({"name":"b","tags":[],"ok":true})"));  // minItems
  EXPECT_FALSE(a(R"({"name":"b","tags":["a","b","a"],"ok":true})"));
  EXPECT_FALSE(a(R"({"name":"b","ok":true,"extra":1})"));  // no additionalProperties
  EXPECT_FALSE(a(R"({"name":"b","ok":true,})"));
}

TEST(StructuredJsonSchema, RefsAnyOfConstAndAdditionalProperties) {
  Accepts tree(json_spec(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},
      "required":["v"]}},"$ref":"#/$defs/node"})"));
  EXPECT_TRUE(tree(R"({"v":1,"kids":[{"v":-2},{"v":3,"kids":[{"v":0}]}]})"));
  EXPECT_FALSE(tree(R"({"v":1,"kids":[{"w":2}]})"));
  Accepts any(json_spec(R"({"anyOf":[{"const":{"k":[1,"x"]}},{"type":["number","null"]}]})"));
  EXPECT_TRUE(any(R"({"k":[1,"x"]})"));
  EXPECT_TRUE(any("-1.5e+3"));
  EXPECT_TRUE(any("null"));
  EXPECT_FALSE(any("\"x\""));
  Accepts map(json_spec(R"({"type":"object","additionalProperties":{"type":"integer"}})"));
  EXPECT_TRUE(map(R"({})"));
  EXPECT_TRUE(map(R"({"a":1,"b":2})"));
  EXPECT_FALSE(map(R"({"a":"x"})"));
  Accepts fmt(json_spec(R"({"type":"string","format":"date"})"));
  EXPECT_TRUE(fmt(R"("2024-02-29")"));
  EXPECT_FALSE(fmt(R"("2024-13-01")"));
  Accepts pat(json_spec(R"({"type":"string","pattern":"^[A-Z]{2}\\d+$"})"));
  EXPECT_TRUE(pat(R"("AB12")"));
  EXPECT_FALSE(pat(R"("A12")"));
}

std::string int_schema(const std::string& bounds) { return R"({"type":"integer")" + bounds + "}"; }

TEST(StructuredJsonSchema, IntegerBoundsAreExact) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    int lo = std::uniform_int_distribution<int>(-1200, 1200)(rng);
    int hi = std::uniform_int_distribution<int>(-1200, 1200)(rng);
    if (lo > hi) std::swap(lo, hi);
    Accepts a(json_spec(
        int_schema(",\"minimum\":" + std::to_string(lo) + ",\"maximum\":" + std::to_string(hi))));
    for (int v = -1500; v <= 1500; ++v)
      ASSERT_EQ(a(std::to_string(v)), v >= lo && v <= hi)
          << v << " in [" << lo << ", " << hi << "]";
    EXPECT_FALSE(a("-0"));
    EXPECT_FALSE(a("007"));
  }
  Accepts min_only(json_spec(int_schema(R"(,"minimum":5)")));
  EXPECT_FALSE(min_only("4"));
  EXPECT_FALSE(min_only("-7"));
  EXPECT_TRUE(min_only("5"));
  EXPECT_TRUE(min_only("123456789"));
  Accepts max_only(json_spec(int_schema(R"(,"exclusiveMaximum":-2)")));
  EXPECT_FALSE(max_only("-2"));
  EXPECT_FALSE(max_only("0"));
  EXPECT_TRUE(max_only("-3"));
  EXPECT_TRUE(max_only("-99999999"));
  Accepts wide(
      json_spec(int_schema(R"(,"minimum":-9223372036854775808,"maximum":9007199254740993)")));
  EXPECT_TRUE(wide("9007199254740992"));
  EXPECT_FALSE(wide("9007199254740994"));
  EXPECT_TRUE(wide("-123"));
  EXPECT_NE(error_of(json_spec(int_schema(R"(,"minimum":3.5,"maximum":3.9)"))).find("no integer"),
            std::string::npos);
}

TEST(StructuredJsonSchema, AnyJsonObject) {
  StructuredOutputs s;
  s.json_object = true;
  Accepts a(s);
  EXPECT_TRUE(a(R"({})"));
  EXPECT_TRUE(a(R"({"a": [1, {"b": null}, "x", -0.5e3, true]})"));
  EXPECT_FALSE(a(R"([1])"));
  EXPECT_FALSE(a(R"({"a" 1})"));
  EXPECT_FALSE(a(R"({"a":01})"));
}

TEST(StructuredJsonSchema, HostileSchemasFailNamingTheLimit) {
  // A schema that only refers to itself describes no value.
  EXPECT_NE(error_of(json_spec(R"({"$ref":"#"})")).find("matches no finite string"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          json_spec(
              R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"))
          .find("matches no finite string"),
      std::string::npos);
  std::string deep = "true";
  for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(error_of(json_spec(deep)).find("nested deeper than 64 levels (limit)"),
            std::string::npos);
  std::string big_enum = R"({"enum":[)";
  for (int i = 0; i < 5000; ++i) big_enum.append(i ? "," : "").append(std::to_string(i));
  EXPECT_NE(error_of(json_spec(big_enum + "]}")).find("more than 4096 values (limit)"),
            std::string::npos);
  std::string huge = R"({"type":"object","description":")" + std::string(1 << 20, 'x') + "\"}";
  EXPECT_NE(error_of(json_spec(huge)).find("bytes (limit)"), std::string::npos);
  EXPECT_NE(error_of(json_spec("{not json")).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(json_spec(R"({"type":"strin"})")).find("unknown type 'strin'"),
            std::string::npos);
  EXPECT_NE(error_of(json_spec(R"({"not":{}})")).find("unsupported keyword 'not'"),
            std::string::npos);
  EXPECT_NE(error_of(json_spec(R"({"$ref":"http://x/y"})")).find("only local $ref"),
            std::string::npos);
  EXPECT_NE(error_of(json_spec(R"({"$ref":"#/nowhere"})")).find("points nowhere"),
            std::string::npos);
  EXPECT_NE(error_of(json_spec(R"({"type":"string","maxLength":1000000})")).find("(limit)"),
            std::string::npos);
  // Many wide properties: bounded by the element limit, not by memory or time.
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 3000; ++i) {
    wide.append(i ? ",\"p" : "\"p")
        .append(std::to_string(i))
        .append(R"(":{"type":"string","maxLength":100})");
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(error_of(json_spec(wide + "}}")).find("(limit)"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace pagellm::structured
