// Filters: `value | name(args)`.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

namespace {

constexpr std::array<std::string_view, 33> kFilters = {
    "abs", "bool", "capitalize", "count", "d", "default", "dictsort", "first", "float", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "reject", "rejectattr",
    "replace", "reverse", "safe", "select", "selectattr", "sort", "string", "title", "tojson",
    "trim", "unique", "upper", "wordcount"};

[[noreturn]] void bad_operand(std::string_view filter, const Value& v, SourcePos pos) {
  template_error(pos, "filter '" + std::string(filter) + "' cannot be applied to a " + type_name(v));
}

bool bool_arg(const CallArgs& args, size_t i, std::string_view name, bool fallback) {
  const Value* v = args.get(i, name);
  if (v == nullptr) return fallback;
  if (!v->is_bool()) template_error(args.pos, "argument '" + std::string(name) + "' must be a boolean");
  return v->as_bool();
}

// Code points of a string as one-character strings.
Array characters(const std::string& s) {
  Array out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    decode_utf8(s, i, &len);
    out.emplace_back(s.substr(i, len));
  }
  return out;
}

// A dotted attribute path ("a.b", "items.0") through dicts, namespaces and lists.
Value attribute_path(const Value& item, const std::string& path, SourcePos pos) {
  Value v = item;
  size_t from = 0;
  while (true) {
    const size_t dot = path.find('.', from);
    const std::string part = path.substr(from, dot == std::string::npos ? std::string::npos : dot - from);
    if (v.is_array()) {
      char* end = nullptr;
      const long long index = std::strtoll(part.c_str(), &end, 10);
      const bool numeric = !part.empty() && *end == '\0' && index >= 0;
      v = numeric ? get_item(v, Value(static_cast<int64_t>(index)), pos) : Value();
    } else if (v.is_object() || v.is_namespace()) {
      const Object& obj = v.is_object() ? v.as_object() : v.as_namespace().fields;
      const Value* found = obj.find(part);
      v = found != nullptr ? *found : Value();
    } else {
      return Value();
    }
    if (dot == std::string::npos) return v;
    from = dot + 1;
  }
}

// JavaScript's parseInt(s, 10) / parseFloat(s): a numeric prefix after leading whitespace.
std::optional<double> parse_number_prefix(const std::string& s, bool integer) {
  const std::string_view t = trim_whitespace(s, true, false);
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  const size_t digits_start = i;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
  size_t num_digits = i - digits_start;
  if (!integer) {
    if (i < t.size() && t[i] == '.') {
      const size_t frac = ++i;
      while (i < t.size() && t[i] >= '0' && t[i] <= '9') ++i;
      num_digits += i - frac;
    }
    if (num_digits > 0 && i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      size_t j = i + 1;
      if (j < t.size() && (t[j] == '+' || t[j] == '-')) ++j;
      const size_t exp_start = j;
      while (j < t.size() && t[j] >= '0' && t[j] <= '9') ++j;
      if (j > exp_start) i = j;
    }
  }
  if (num_digits == 0) return std::nullopt;
  return std::strtod(std::string(t.substr(0, i)).c_str(), nullptr);
}

Value to_int(const Value& v, const CallArgs& args, SourcePos pos) {
  const Value* fallback = args.get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : Value(int64_t{0});
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(int64_t{v.as_bool() ? 1 : 0});
  if (v.is_float()) {
    const double d = std::trunc(v.as_float());
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    const auto parsed = parse_number_prefix(v.as_string(), true);
    if (!parsed || std::fabs(*parsed) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(*parsed));
  }
  bad_operand("int", v, pos);
}

Value to_float(const Value& v, const CallArgs& args, SourcePos pos) {
  const Value* fallback = args.get(0, "default");
  const Value dflt = fallback != nullptr ? *fallback : Value(0.0);
  if (v.is_number()) return Value(v.as_number());
  if (v.is_bool()) return Value(v.as_bool() ? 1.0 : 0.0);
  if (v.is_string()) {
    const auto parsed = parse_number_prefix(v.as_string(), false);
    return parsed ? Value(*parsed) : dflt;
  }
  bad_operand("float", v, pos);
}

Value tojson(Interpreter& interp, const Value& v, const CallArgs& args) {
  JsonOptions options;
  if (const Value* indent = args.get(0, "indent"); indent != nullptr && !indent->is_null()) {
    if (!indent->is_int()) template_error(args.pos, "tojson indent must be an integer");
    if (indent->as_int() < 0 || indent->as_int() > 64) template_error(args.pos, "tojson indent out of range");
    options.indent = indent->as_int();
  }
  options.ensure_ascii = bool_arg(args, 99, "ensure_ascii", false);
  options.sort_keys = bool_arg(args, 99, "sort_keys", false);
  if (const Value* sep = args.get(99, "separators"); sep != nullptr && !sep->is_null()) {
    if (!sep->is_array() || sep->as_array().size() != 2 || !sep->as_array()[0].is_string() ||
        !sep->as_array()[1].is_string()) {
      template_error(args.pos, "tojson separators must be two strings");
    }
    options.separators.emplace(sep->as_array()[0].as_string(), sep->as_array()[1].as_string());
  }
  std::string out;
  append_json(out, v, options, args.pos);
  interp.charge_bytes(out.size(), args.pos);
  return Value(std::move(out));
}

Value join(Interpreter& interp, const Value& v, const CallArgs& args) {
  const Value* sep_arg = args.get(0, "d");
  if (sep_arg == nullptr) sep_arg = args.get(99, "separator");
  if (sep_arg != nullptr && !sep_arg->is_string()) template_error(args.pos, "join separator must be a string");
  const std::string sep = sep_arg != nullptr ? sep_arg->as_string() : "";
  Array items;
  if (v.is_string()) {
    items = characters(v.as_string());
  } else if (v.is_array()) {
    items = v.as_array();
  } else {
    bad_operand("join", v, args.pos);
  }
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    if (!items[i].is_null() && !items[i].is_undefined()) out += concat_text(items[i], args.pos);
    interp.check_size(out.size(), args.pos);
  }
  interp.charge_bytes(out.size(), args.pos);
  return Value(std::move(out));
}

Value indent(Interpreter& interp, const std::string& s, const CallArgs& args) {
  const Value* width = args.get(0, "width");
  std::string pad(4, ' ');
  if (width != nullptr) {
    if (width->is_string()) {
      pad = width->as_string();
    } else if (width->is_int() && width->as_int() >= 0 && width->as_int() <= 1024) {
      pad.assign(static_cast<size_t>(width->as_int()), ' ');
    } else {
      template_error(args.pos, "indent width must be a small integer or a string");
    }
  }
  const bool first = bool_arg(args, 1, "first", false);
  const bool blank = bool_arg(args, 2, "blank", false);
  std::string out;
  size_t from = 0;
  for (size_t line = 0;; ++line) {
    const size_t nl = s.find('\n', from);
    const std::string_view text = std::string_view(s).substr(from, nl == std::string::npos ? std::string::npos : nl - from);
    if ((line > 0 || first) && (!text.empty() || blank)) out += pad;
    out += text;
    interp.check_size(out.size(), args.pos);
    if (nl == std::string::npos) break;
    out += '\n';
    from = nl + 1;
  }
  interp.charge_bytes(out.size(), args.pos);
  return Value(std::move(out));
}

Value sort(const Value& v, const CallArgs& args) {
  if (!v.is_array()) bad_operand("sort", v, args.pos);
  const bool reverse = bool_arg(args, 0, "reverse", false);
  const bool case_sensitive = bool_arg(args, 1, "case_sensitive", false);
  const Value* attribute = args.get(2, "attribute");
  std::string path;
  if (attribute != nullptr && !attribute->is_null()) {
    if (!attribute->is_string() && !attribute->is_int()) template_error(args.pos, "sort attribute must be a string");
    path = attribute->is_string() ? attribute->as_string() : std::to_string(attribute->as_int());
  }
  Array items = v.as_array();
  std::vector<Value> keys;
  for (const Value& item : items) keys.push_back(path.empty() ? item : attribute_path(item, path, args.pos));
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int c = compare_values(keys[a], keys[b], case_sensitive, args.pos);
    return reverse ? c > 0 : c < 0;
  });
  Array out;
  for (size_t i : order) out.push_back(items[i]);
  return Value(std::move(out));
}

Value dictsort(const Value& v, const CallArgs& args) {
  if (!v.is_object()) bad_operand("dictsort", v, args.pos);
  const bool case_sensitive = bool_arg(args, 0, "case_sensitive", false);
  const Value* by = args.get(1, "by");
  const bool by_value = by != nullptr && by->is_string() && by->as_string() == "value";
  if (by != nullptr && !(by->is_string() && (by->as_string() == "key" || by->as_string() == "value"))) {
    template_error(args.pos, "dictsort 'by' must be 'key' or 'value'");
  }
  const bool reverse = bool_arg(args, 2, "reverse", false);
  Array items = dict_items(v.as_object()).as_array();
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int c = compare_values(a.as_array()[by_value ? 1 : 0], b.as_array()[by_value ? 1 : 0],
                                 case_sensitive, args.pos);
    return reverse ? c > 0 : c < 0;
  });
  return Value(std::move(items));
}

Value select_attr(const Value& v, const CallArgs& args, bool select, std::string_view filter) {
  if (!v.is_array()) bad_operand(filter, v, args.pos);
  const Value* attr = args.get(0, "attribute");
  if (attr == nullptr || !attr->is_string()) template_error(args.pos, std::string(filter) + " needs an attribute name");
  const Value* test = args.get(1, "test");
  if (test != nullptr && (!test->is_string() || !is_known_test(test->as_string()))) {
    template_error(args.pos, std::string(filter) + ": unknown test");
  }
  CallArgs test_args;
  test_args.pos = args.pos;
  if (args.positional.size() > 2) test_args.positional.push_back(args.positional[2]);
  Array out;
  for (const Value& item : v.as_array()) {
    if (!item.is_object() && !item.is_namespace()) template_error(args.pos, std::string(filter) + " needs a list of dicts");
    const Value field = attribute_path(item, attr->as_string(), args.pos);
    bool passed = false;
    if (!field.is_undefined()) passed = test != nullptr ? run_test(test->as_string(), field, test_args) : truthy(field);
    if (passed == select) out.push_back(item);
  }
  return Value(std::move(out));
}

// select/reject(test, arg...): keeps the items that pass (select) or fail (reject) the test; with no
// test, truthiness.
Value select_items(const Value& v, const CallArgs& args, bool select, std::string_view filter) {
  if (!v.is_array()) bad_operand(filter, v, args.pos);
  const Value* test = args.get(0, "test");
  if (test != nullptr && (!test->is_string() || !is_known_test(test->as_string()))) {
    template_error(args.pos, std::string(filter) + ": unknown test");
  }
  CallArgs test_args;
  test_args.pos = args.pos;
  if (args.positional.size() > 1) test_args.positional.push_back(args.positional[1]);
  Array out;
  for (const Value& item : v.as_array()) {
    const bool passed = test != nullptr ? run_test(test->as_string(), item, test_args) : truthy(item);
    if (passed == select) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map_attr(const Value& v, const CallArgs& args) {
  if (!v.is_array()) bad_operand("map", v, args.pos);
  const Value* attr = args.get(99, "attribute");
  if (attr == nullptr || !attr->is_string()) template_error(args.pos, "map needs attribute='name'");
  const Value* fallback = args.get(99, "default");
  Array out;
  for (const Value& item : v.as_array()) {
    if (!item.is_object() && !item.is_namespace()) template_error(args.pos, "map needs a list of dicts");
    Value field = attribute_path(item, attr->as_string(), args.pos);
    out.push_back(field.is_undefined() && fallback != nullptr ? *fallback : field);
  }
  return Value(std::move(out));
}

Value unique(const Value& v, SourcePos pos) {
  if (!v.is_array()) bad_operand("unique", v, pos);
  Array out;
  for (const Value& item : v.as_array()) {
    bool seen = false;
    for (const Value& kept : out) {
      seen = loose_equals(kept, item) && (kept.is_string() == item.is_string());
      if (seen) break;
    }
    if (!seen) out.push_back(item);
  }
  return Value(std::move(out));
}

Value string_filter(Interpreter& interp, std::string_view name, const Value& v, const CallArgs& args) {
  if (!v.is_string()) bad_operand(name, v, args.pos);
  const std::string& s = v.as_string();
  if (name == "trim") {
    const Value* chars = args.get(0, "chars");
    if (chars != nullptr && chars->is_string()) return Value(strip_chars(s, chars->as_string(), true, true));
    return Value(trim_whitespace(s, true, true));
  }
  if (name == "indent") return indent(interp, s, args);
  if (name == "wordcount") {
    int64_t n = 0;
    std::string_view rest = trim_whitespace(s, true, false);
    while (!rest.empty()) {
      size_t end = 0;
      while (end < rest.size()) {
        size_t len = 0;
        if (is_js_whitespace(decode_utf8(rest, end, &len))) break;
        end += len;
      }
      ++n;
      rest = trim_whitespace(rest.substr(end), true, false);
    }
    return Value(n);
  }
  // upper, lower, title, capitalize, replace: the str methods of the same names.
  Value method = get_attribute(v, name, args.pos);
  Scope unused;
  CallArgs copy = args;
  return method.as_function().call(interp, unused, copy);
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(kFilters.begin(), kFilters.end(), name) != kFilters.end();
}

Value apply_filter(Interpreter& interp, Scope& scope, const Expr& filter, const Value& v) {
  CallArgs args = interp.eval_args(filter.args, scope, filter.pos);
  const std::string& name = filter.name;
  const SourcePos pos = filter.pos;
  if (name == "safe") return v;
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    const bool boolean = bool_arg(args, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !truthy(v))) return fallback != nullptr ? *fallback : Value("");
    return v;
  }
  if (name == "tojson") return tojson(interp, v, args);
  if (name == "string") {
    std::string s = rendered(v, pos);
    interp.charge_bytes(s.size(), pos);
    return Value(std::move(s));
  }
  if (name == "length" || name == "count") {
    if (v.is_array()) return Value(static_cast<int64_t>(v.as_array().size()));
    if (v.is_string()) return Value(static_cast<int64_t>(count_code_points(v.as_string())));
    if (v.is_object()) return Value(static_cast<int64_t>(v.as_object().entries.size()));
    bad_operand(name, v, pos);
  }
  if (name == "int") return to_int(v, args, pos);
  if (name == "float") return to_float(v, args, pos);
  if (name == "bool") return Value(truthy(v));
  if (name == "abs") {
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) template_error(pos, "integer overflow in abs");
      return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    if (v.is_float()) return Value(std::fabs(v.as_float()));
    bad_operand(name, v, pos);
  }
  if (name == "join") return join(interp, v, args);
  if (name == "items") {
    if (v.is_object()) return dict_items(v.as_object());
    if (v.is_namespace()) return dict_items(v.as_namespace().fields);
    bad_operand(name, v, pos);
  }
  if (name == "dictsort") return dictsort(v, args);
  if (name == "sort") return sort(v, args);
  if (name == "unique") return unique(v, pos);
  if (name == "map") return map_attr(v, args);
  if (name == "select" || name == "reject") return select_items(v, args, name == "select", name);
  if (name == "selectattr" || name == "rejectattr") return select_attr(v, args, name == "selectattr", name);
  if (name == "list" || name == "first" || name == "last" || name == "reverse") {
    Array items;
    if (v.is_array()) {
      items = v.as_array();
    } else if (v.is_string()) {
      items = characters(v.as_string());
    } else if (v.is_object() && name == "list") {
      for (const auto& [k, unused] : v.as_object().entries) items.emplace_back(k);
    } else {
      bad_operand(name, v, pos);
    }
    if (name == "first") return items.empty() ? Value() : items.front();
    if (name == "last") return items.empty() ? Value() : items.back();
    if (name == "reverse") std::reverse(items.begin(), items.end());
    if (name == "reverse" && v.is_string()) {
      std::string out;
      for (const Value& c : items) out += c.as_string();
      return Value(std::move(out));
    }
    return Value(std::move(items));
  }
  return string_filter(interp, name, v, args);
}

}  // namespace pagellm::tok::jinja
