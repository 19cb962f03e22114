#include "structured/json_schema.h"

#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "common/error.h"
#include "structured/int_range.h"
#include "structured/regex.h"

namespace pagellm::structured {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxDigits = 16;  // unbounded numbers: at most this many digits per part

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, GrammarBuilder& b) : root_(root), b_(b) {}

  int32_t compile() {
    const int32_t id = b_.rule("root");
    b_.define(id, node(root_, "#", 0));
    return id;
  }

  int32_t any_object() {
    const int32_t id = b_.rule("root");
    b_.define(id, ref(any_object_rule()));
    return id;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    invalid_argument("json schema: " + what + " at '" + where + "'");
  }
  [[noreturn]] void unsupported_keyword(const std::string& where, const std::string& key) const {
    fail(where, "unsupported keyword '" + key + "'");
  }

  ExprPtr ws() {
    static const ExprPtr kWs = optional(literal(" "));
    return kWs;
  }
  ExprPtr sep(char c) { return seq({ws(), literal(std::string(1, c)), ws()}); }

  int32_t shared(const std::string& name, const std::function<ExprPtr()>& make) {
    auto it = shared_.find(name);
    if (it != shared_.end()) return it->second;
    const int32_t id = b_.rule(name);
    shared_[name] = id;
    b_.define(id, make());
    return id;
  }

  ExprPtr string_char() {
    return ref(shared("char", [] {
      ByteSet plain;
      plain.set_range(0x20, 0x7F);
      plain.subtract([] {
        ByteSet q;
        q.set('"');
        q.set('\\');
        return q;
      }());
      ByteSet esc;
      for (char c : std::string("\"\\/bfnrt")) esc.set(uint8_t(c));
      ByteSet hex;
      hex.set_range('0', '9'), hex.set_range('a', 'f'), hex.set_range('A', 'F');
      const ExprPtr h = bytes_expr(hex);
      return alt({bytes_expr(plain), utf8_range(0x80, 0x10FFFF),
                  seq({literal("\\"), alt({bytes_expr(esc), seq({literal("u"), h, h, h, h})})})});
    }));
  }
  ExprPtr any_string() {
    return ref(shared("string", [this] {
      return seq({literal("\""), repeat(string_char(), 0, -1), literal("\"")});
    }));
  }
  ExprPtr digits(int min, int max) { return repeat(byte_range('0', '9'), min, max); }
  ExprPtr unsigned_int() {
    return alt({literal("0"), seq({byte_range('1', '9'), digits(0, kMaxDigits - 1)})});
  }
  ExprPtr integer(bool non_negative) {
    return non_negative ? unsigned_int() : seq({optional(literal("-")), unsigned_int()});
  }
  ExprPtr number(bool non_negative) {
    const ExprPtr frac = optional(seq({literal("."), digits(1, kMaxDigits)}));
    ByteSet e;
    e.set('e'), e.set('E');
    ByteSet sign;
    sign.set('+'), sign.set('-');
    const ExprPtr exp = optional(seq({bytes_expr(e), optional(bytes_expr(sign)), digits(1, 3)}));
    return seq({integer(non_negative), frac, exp});
  }
  ExprPtr any_value() {
    return ref(shared("value", [this] {
      return alt({ref(any_object_rule()), ref(any_array_rule()), any_string(), number(false),
                  literal("true"), literal("false"), literal("null")});
    }));
  }
  int32_t any_object_rule() {
    return shared("object", [this] {
      const ExprPtr pair = seq({any_string(), sep(':'), any_value()});
      return seq({literal("{"), ws(), optional(seq({pair, repeat(seq({sep(','), pair}), 0, -1)})),
                  ws(), literal("}")});
    });
  }
  int32_t any_array_rule() {
    return shared("array", [this] {
      const ExprPtr v = any_value();
      return seq({literal("["), ws(), optional(seq({v, repeat(seq({sep(','), v}), 0, -1)})), ws(),
                  literal("]")});
    });
  }

  int32_t bound(const json& s, const char* key, int32_t fallback, const std::string& where) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      fail(where, std::string(key) + " must be a non-negative integer");
    if (v.get<int64_t>() > b_.limits().max_repeat) {
      fail(where, std::string(key) + " larger than " + std::to_string(b_.limits().max_repeat) +
                      " (limit)");
    }
    return int32_t(v.get<int64_t>());
  }

  ExprPtr node(const json& s, const std::string& where, int depth);
  ExprPtr typed(const json& s, const std::string& type, const std::string& where, int depth);
  ExprPtr object(const json& s, const std::string& where, int depth);
  ExprPtr array(const json& s, const std::string& where, int depth);
  ExprPtr string(const json& s, const std::string& where);
  ExprPtr numeric(const json& s, bool is_integer, const std::string& where);
  ExprPtr schema_ref(const std::string& pointer, const std::string& where, int depth);
  ExprPtr values(const json& list, const std::string& where);

  const json& root_;
  GrammarBuilder& b_;
  std::map<std::string, int32_t> shared_;
  std::map<std::string, int32_t> refs_;
};

ExprPtr SchemaCompiler::values(const json& list, const std::string& where) {
  if (!list.is_array() || list.empty()) fail(where, "enum must be a non-empty array");
  if (list.size() > b_.limits().max_enum) {
    fail(where, "enum has more than " + std::to_string(b_.limits().max_enum) + " values (limit)");
  }
  std::vector<std::string> texts;
  for (const json& v : list)
    texts.push_back(v.dump(-1, ' ', false, json::error_handler_t::replace));
  return literal_set(std::move(texts));
}

ExprPtr SchemaCompiler::node(const json& s, const std::string& where, int depth) {
  b_.deadline().check();
  if (depth > b_.limits().max_nesting) {
    fail(where, "schema nested deeper than " + std::to_string(b_.limits().max_nesting) +
                    " levels (limit)");
  }
  if (s.is_boolean()) {
    if (!s.get<bool>()) fail(where, "schema 'false' matches nothing");
    return any_value();
  }
  if (!s.is_object()) fail(where, "a schema must be an object or a boolean");
  if (s.contains("$ref")) {
    if (!s["$ref"].is_string()) fail(where, "$ref must be a string");
    return schema_ref(s["$ref"].get<std::string>(), where, depth);
  }
  for (const char* key :
       {"not", "if", "then", "else", "patternProperties", "dependentSchemas", "prefixItems"}) {
    if (s.contains(key)) unsupported_keyword(where, key);
  }
  if (s.contains("const"))
    return literal(s["const"].dump(-1, ' ', false, json::error_handler_t::replace));
  if (s.contains("enum")) return values(s["enum"], where + "/enum");
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!s.contains(key)) continue;
    const json& list = s[key];
    if (!list.is_array() || list.empty())
      fail(where, std::string(key) + " must be a non-empty array");
    std::vector<ExprPtr> alts;
    for (size_t i = 0; i < list.size(); ++i)
      alts.push_back(node(list[i], where + "/" + key + "/" + std::to_string(i), depth + 1));
    return alt(std::move(alts));
  }
  if (s.contains("allOf")) {
    const json& list = s["allOf"];
    if (!list.is_array() || list.size() != 1)
      unsupported_keyword(where, "allOf with more than one schema");
    return node(list[0], where + "/allOf/0", depth + 1);
  }
  if (!s.contains("type")) {
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
      return object(s, where, depth);
    if (s.contains("items")) return array(s, where, depth);
    if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength"))
      return string(s, where);
    return any_value();
  }
  const json& type = s["type"];
  if (type.is_string()) return typed(s, type.get<std::string>(), where, depth);
  if (!type.is_array() || type.empty())
    fail(where, "type must be a string or a non-empty array of strings");
  std::vector<ExprPtr> alts;
  for (const json& t : type) {
    if (!t.is_string()) fail(where, "type must be a string or a non-empty array of strings");
    alts.push_back(typed(s, t.get<std::string>(), where, depth));
  }
  return alt(std::move(alts));
}

ExprPtr SchemaCompiler::typed(const json& s, const std::string& type, const std::string& where,
                              int depth) {
  if (type == "object") return object(s, where, depth);
  if (type == "array") return array(s, where, depth);
  if (type == "string") return string(s, where);
  if (type == "number") return numeric(s, false, where);
  if (type == "integer") return numeric(s, true, where);
  if (type == "boolean") return alt({literal("true"), literal("false")});
  if (type == "null") return literal("null");
  fail(where, "unknown type '" + type + "'");
}

ExprPtr SchemaCompiler::object(const json& s, const std::string& where, int depth) {
  const json empty = json::object();
  const json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) fail(where, "properties must be an object");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail(where, "required must be an array of strings");
    for (const json& r : s["required"]) {
      if (!r.is_string()) fail(where, "required must be an array of strings");
      required.insert(r.get<std::string>());
    }
  }
  std::vector<std::pair<std::string, ExprPtr>> fields;  // declared order
  for (auto it = props.begin(); it != props.end(); ++it) {
    fields.push_back({it.key(), node(it.value(), where + "/properties/" + it.key(), depth + 1)});
  }
  for (const std::string& r : required) {
    if (!props.contains(r)) fields.push_back({r, any_value()});
  }
  // Extra members: additionalProperties true or a schema; unspecified means none when properties
  // are given (OpenAI strict mode), any when the object is unconstrained.
  ExprPtr extra;
  const bool unconstrained = props.empty() && required.empty();
  if (s.contains("additionalProperties")) {
    const json& a = s["additionalProperties"];
    if (!(a.is_boolean() && !a.get<bool>()))
      extra = node(a, where + "/additionalProperties", depth + 1);
  } else if (unconstrained) {
    extra = any_value();
  }
  // rest[i][first]: the members from field i on; `first` = nothing emitted yet (no comma).
  const size_t n = fields.size();
  std::vector<std::array<int32_t, 2>> rest(n + 1);
  for (size_t i = 0; i <= n; ++i) rest[i] = {b_.new_rule("members"), b_.new_rule("members")};
  for (int f = 0; f < 2; ++f) {
    if (!extra) {
      b_.define(rest[n][size_t(f)], empty_expr());
      continue;
    }
    const ExprPtr pair = seq({any_string(), sep(':'), extra});
    const ExprPtr more = repeat(seq({sep(','), pair}), 0, -1);
    b_.define(rest[n][size_t(f)], f ? optional(seq({pair, more})) : more);
  }
  for (size_t i = n; i-- > 0;) {
    const std::string key =
        json(fields[i].first).dump(-1, ' ', false, json::error_handler_t::replace);
    for (int f = 0; f < 2; ++f) {
      const ExprPtr member = seq({f ? empty_expr() : sep(','), literal(key), sep(':'),
                                  fields[i].second, ref(rest[i + 1][0])});
      b_.define(rest[i][size_t(f)], required.count(fields[i].first)
                                        ? member
                                        : alt({member, ref(rest[i + 1][size_t(f)])}));
    }
  }
  return seq({literal("{"), ws(), ref(rest[0][1]), ws(), literal("}")});
}

ExprPtr SchemaCompiler::array(const json& s, const std::string& where, int depth) {
  const ExprPtr item =
      s.contains("items") ? node(s["items"], where + "/items", depth + 1) : any_value();
  const int32_t min = bound(s, "minItems", 0, where);
  const int32_t max = bound(s, "maxItems", -1, where);
  if (max >= 0 && max < min) fail(where, "maxItems < minItems");
  if (max == 0) return seq({literal("["), ws(), literal("]")});
  const ExprPtr items =
      seq({item, repeat(seq({sep(','), item}), std::max(0, min - 1), max < 0 ? -1 : max - 1)});
  return seq({literal("["), ws(), min == 0 ? optional(items) : items, ws(), literal("]")});
}

ExprPtr SchemaCompiler::string(const json& s, const std::string& where) {
  static const std::map<std::string, std::string> kFormats = {
      {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
      {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"date-time",
       R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"uuid", R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"},
      {"email", R"([a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\.[a-zA-Z0-9-]{1,63}){1,8})"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
  };
  std::string pattern;
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) fail(where, "pattern must be a string");
    pattern = s["pattern"].get<std::string>();
  } else if (s.contains("format") && s["format"].is_string()) {
    auto it = kFormats.find(s["format"].get<std::string>());
    if (it != kFormats.end()) pattern = it->second;
  }
  if (!pattern.empty()) {
    RegexOptions opt;
    opt.json_string = true;
    return seq({literal("\""), compile_regex(pattern, b_, opt), literal("\"")});
  }
  const int32_t min = bound(s, "minLength", 0, where);
  const int32_t max = bound(s, "maxLength", -1, where);
  if (max >= 0 && max < min) fail(where, "maxLength < minLength");
  if (min == 0 && max < 0) return any_string();
  return seq({literal("\""), repeat(string_char(), min, max), literal("\"")});
}

ExprPtr SchemaCompiler::numeric(const json& s, bool is_integer, const std::string& where) {
  auto num = [&](const char* key) -> std::optional<double> {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number()) fail(where, std::string(key) + " must be a number");
    return s[key].get<double>();
  };
  std::optional<double> lo = num("minimum"), hi = num("maximum");
  if (auto x = num("exclusiveMinimum")) lo = is_integer ? std::floor(*x) + 1 : *x;
  if (auto x = num("exclusiveMaximum")) hi = is_integer ? std::ceil(*x) - 1 : *x;
  if (lo && hi && *hi < *lo) fail(where, "maximum < minimum");
  if (is_integer && (lo || hi)) {
    // Bounds beyond ±1e18 leave that side open (as wide as unbounded integers).
    constexpr double kMaxBound = 1e18;
    std::optional<int64_t> ilo, ihi;
    if (lo && *lo > -kMaxBound) ilo = int64_t(std::ceil(std::min(*lo, kMaxBound)));
    if (hi && *hi < kMaxBound) ihi = int64_t(std::floor(std::max(*hi, -kMaxBound)));
    if (ilo && ihi && *ihi < *ilo) fail(where, "no integer lies between minimum and maximum");
    return integer_range(ilo, ihi, kMaxDigits);
  }
  const bool non_negative = lo && *lo >= 0;
  return is_integer ? integer(non_negative) : number(non_negative);
}

ExprPtr SchemaCompiler::schema_ref(const std::string& pointer, const std::string& where,
                                   int depth) {
  auto it = refs_.find(pointer);
  if (it != refs_.end()) return ref(it->second);
  if (pointer.empty() || pointer[0] != '#')
    fail(where, "only local $ref ('#...') is supported, got '" + pointer + "'");
  const json* target = &root_;
  size_t pos = 1;
  while (pos < pointer.size()) {
    if (pointer[pos] != '/') fail(where, "bad $ref '" + pointer + "'");
    size_t end = pointer.find('/', pos + 1);
    if (end == std::string::npos) end = pointer.size();
    // JSON pointer unescaping: ~1 is '/', ~0 is '~'.
    std::string token;
    for (size_t k = pos + 1; k < end; ++k) {
      if (pointer[k] == '~' && k + 1 < end && (pointer[k + 1] == '0' || pointer[k + 1] == '1')) {
        token.push_back(pointer[++k] == '1' ? '/' : '~');
      } else {
        token.push_back(pointer[k]);
      }
    }
    if (target->is_object() && target->contains(token)) {
      target = &(*target)[token];
    } else if (target->is_array() && !token.empty() &&
               token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
               std::stoul(token) < target->size()) {
      target = &(*target)[std::stoul(token)];
    } else {
      fail(where, "$ref '" + pointer + "' points nowhere");
    }
    pos = end;
  }
  const int32_t id = b_.new_rule("ref");
  refs_[pointer] = id;
  b_.define(id, node(*target, pointer, depth + 1));
  return ref(id);
}

}  // namespace

int32_t compile_json_schema(const json& schema, GrammarBuilder& builder) {
  return SchemaCompiler(schema, builder).compile();
}

int32_t compile_any_json_object(GrammarBuilder& builder) {
  static const json kNone;
  return SchemaCompiler(kNone, builder).any_object();
}

}  // namespace pagellm::structured
