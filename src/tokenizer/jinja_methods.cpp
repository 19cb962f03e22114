// Attribute access, str/dict methods, tests and global functions.
#include <array>
#include <cmath>
#include <ctime>

#include "common/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

namespace {

constexpr int64_t kMaxRangeItems = 1 << 20;

constexpr std::array<std::string_view, 11> kStringMethods = {
    "upper", "lower", "strip", "lstrip", "rstrip", "title", "capitalize",
    "startswith", "endswith", "split", "replace"};
constexpr std::array<std::string_view, 4> kDictMethods = {"get", "items", "keys", "values"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& names, std::string_view name) {
  for (auto n : names) {
    if (n == name) return true;
  }
  return false;
}

const std::string& string_arg(const CallArgs& args, size_t i, std::string_view name,
                              std::string_view method) {
  const Value* v = args.get(i, name);
  if (v == nullptr || !v->is_string()) {
    template_error(args.pos, std::string(method) + "() expects a string for '" + std::string(name) + "'");
  }
  return v->as_string();
}

bool is_ascii_word(char c) {
  return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

Value string_affix(const std::string& s, const CallArgs& args, bool prefix, std::string_view method) {
  const Value* pattern = args.get(0, "prefix");
  const auto matches = [&](const Value& p) {
    if (!p.is_string()) template_error(args.pos, std::string(method) + "() expects strings");
    const std::string& t = p.as_string();
    if (t.size() > s.size()) return false;
    return prefix ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (pattern == nullptr) template_error(args.pos, std::string(method) + "() needs an argument");
  if (pattern->is_array()) {
    for (const Value& p : pattern->as_array()) {
      if (matches(p)) return Value(true);
    }
    return Value(false);
  }
  return Value(matches(*pattern));
}

// Python's str.split(sep=None, maxsplit=-1).
Value string_split(Interpreter& interp, const std::string& s, const CallArgs& args) {
  const Value* sep = args.get(0, "sep");
  const Value* max_arg = args.get(1, "maxsplit");
  int64_t max_split = -1;
  if (max_arg != nullptr) {
    if (!max_arg->is_int()) template_error(args.pos, "split() maxsplit must be an integer");
    max_split = max_arg->as_int();
  }
  Array parts;
  if (sep == nullptr || sep->is_null()) {
    // Runs of whitespace separate; no empty strings at either end.
    std::string_view rest = trim_whitespace(s, true, false);
    while (!rest.empty()) {
      interp.charge_steps(1, args.pos);
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split) {
        parts.emplace_back(rest);
        break;
      }
      size_t end = 0;
      while (end < rest.size()) {
        size_t len = 0;
        if (is_js_whitespace(decode_utf8(rest, end, &len))) break;
        end += len;
      }
      parts.emplace_back(rest.substr(0, end));
      rest = trim_whitespace(rest.substr(end), true, false);
    }
    return Value(std::move(parts));
  }
  if (!sep->is_string()) template_error(args.pos, "split() separator must be a string or none");
  const std::string& d = sep->as_string();
  if (d.empty()) template_error(args.pos, "split() separator is empty");
  size_t from = 0;
  while (true) {
    interp.charge_steps(1, args.pos);
    const size_t at = s.find(d, from);
    if (at == std::string::npos || (max_split >= 0 && static_cast<int64_t>(parts.size()) >= max_split)) {
      parts.emplace_back(s.substr(from));
      break;
    }
    parts.emplace_back(s.substr(from, at - from));
    from = at + d.size();
  }
  return Value(std::move(parts));
}

// Python's str.replace(old, new, count=-1); an empty `old` inserts between code points.
Value string_replace(Interpreter& interp, const std::string& s, const CallArgs& args) {
  const std::string& from = string_arg(args, 0, "old", "replace");
  const std::string& to = string_arg(args, 1, "new", "replace");
  int64_t count = -1;
  if (const Value* c = args.get(2, "count"); c != nullptr && !c->is_null()) {
    if (!c->is_int()) template_error(args.pos, "replace() count must be an integer");
    count = c->as_int();
  }
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {
    for (size_t i = 0, len = 0; i <= s.size(); i += len) {
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
      if (i == s.size()) break;
      decode_utf8(s, i, &len);
      out.append(s, i, len);
      interp.charge_bytes(to.size() + len, args.pos);
      interp.check_size(out.size(), args.pos);
    }
    return Value(std::move(out));
  }
  while (count < 0 || done < count) {
    const size_t at = s.find(from, pos);
    if (at == std::string::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    interp.charge_bytes(at - pos + to.size(), args.pos);
    interp.check_size(out.size(), args.pos);
    pos = at + from.size();
    ++done;
  }
  out.append(s, pos);
  interp.charge_bytes(s.size() - pos, args.pos);
  interp.check_size(out.size(), args.pos);
  return Value(std::move(out));
}

Value strip_method(const std::string& s, const CallArgs& args, bool left, bool right) {
  const Value* chars = args.get(0, "chars");
  if (chars == nullptr || chars->is_null()) return Value(trim_whitespace(s, left, right));
  if (!chars->is_string()) template_error(args.pos, "strip() expects a string of characters");
  return Value(strip_chars(s, chars->as_string(), left, right));
}

Value call_string_method(Interpreter& interp, const std::string& s, std::string_view name,
                         const CallArgs& args) {
  if (name == "upper") return Value(to_upper(s));
  if (name == "lower") return Value(to_lower(s));
  if (name == "strip") return strip_method(s, args, true, true);
  if (name == "lstrip") return strip_method(s, args, true, false);
  if (name == "rstrip") return strip_method(s, args, false, true);
  if (name == "title") {
    // As the reference: an ASCII word character after a non-word character is upper-cased.
    std::string out = s;
    for (size_t i = 0; i < out.size(); ++i) {
      if (is_ascii_word(out[i]) && (i == 0 || !is_ascii_word(out[i - 1])) && out[i] >= 'a' && out[i] <= 'z') {
        out[i] = static_cast<char>(out[i] - 32);
      }
    }
    return Value(std::move(out));
  }
  if (name == "capitalize") {
    if (s.empty()) return Value(s);
    size_t len = 0;
    const char32_t first = decode_utf8(s, 0, &len);
    std::string out;
    append_utf8(out, to_upper_cp(first));
    out.append(s, len);
    return Value(std::move(out));
  }
  if (name == "startswith") return string_affix(s, args, true, name);
  if (name == "endswith") return string_affix(s, args, false, name);
  if (name == "split") return string_split(interp, s, args);
  return string_replace(interp, s, args);
}

Value call_dict_method(const Object& obj, std::string_view name, const CallArgs& args) {
  if (name == "get") {
    const Value* key = args.get(0, "key");
    if (key == nullptr || !key->is_string()) template_error(args.pos, "get() expects a string key");
    if (const Value* v = obj.find(key->as_string())) return *v;
    const Value* fallback = args.get(1, "default");
    return fallback != nullptr ? *fallback : Value::null();
  }
  if (name == "items") return dict_items(obj);
  Array out;
  for (const auto& [k, v] : obj.entries) out.push_back(name == "keys" ? Value(k) : v);
  return Value(std::move(out));
}

// `obj.method` evaluates to this; calling it runs the method on `self`.
class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string_view name) : self_(std::move(self)), name_(name) {}
  Value call(Interpreter& interp, Scope&, CallArgs& args) const override {
    if (self_.is_string()) return call_string_method(interp, self_.as_string(), name_, args);
    return call_dict_method(self_.as_object(), name_, args);
  }

 private:
  Value self_;
  std::string name_;
};

Value bound(const Value& self, std::string_view name) {
  return Value(std::shared_ptr<const Callable>(std::make_shared<BoundMethod>(self, name)));
}

Value element_at(const Value& object, int64_t index) {
  if (object.is_array()) {
    const Array& items = object.as_array();
    const int64_t n = static_cast<int64_t>(items.size());
    if (index < 0) index += n;
    return (index >= 0 && index < n) ? items[static_cast<size_t>(index)] : Value();
  }
  const std::vector<size_t> offsets = code_point_offsets(object.as_string());
  const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
  if (index < 0) index += n;
  if (index < 0 || index >= n) return Value();
  const size_t from = offsets[static_cast<size_t>(index)];
  return Value(object.as_string().substr(from, offsets[static_cast<size_t>(index) + 1] - from));
}

// --- globals ---------------------------------------------------------------------------------

class GlobalFunction : public Callable {
 public:
  explicit GlobalFunction(std::string name) : name_(std::move(name)) {}
  Value call(Interpreter& interp, Scope&, CallArgs& args) const override {
    if (name_ == "namespace") return make_namespace(interp, args);
    if (name_ == "range") return range(interp, args);
    if (name_ == "strftime_now") return strftime_now(args);
    // raise_exception(message): the template's own, user-facing error.
    const Value* message = args.get(0, "message");
    throw Error(ErrorKind::kInvalidArgument,
                "chat template: " + (message != nullptr ? rendered(*message, args.pos) : std::string("error")));
  }

 private:
  static Value make_namespace(Interpreter& interp, const CallArgs& args) {
    auto ns = interp.make_namespace();
    if (args.positional.size() > 1) template_error(args.pos, "namespace() takes at most one positional argument");
    if (args.positional.size() == 1) {
      const Value& init = args.positional[0];
      if (init.is_object()) {
        ns->fields = init.as_object();
      } else if (init.is_array()) {
        for (const Value& pair : init.as_array()) {
          if (!pair.is_array() || pair.as_array().size() != 2 || !pair.as_array()[0].is_string()) {
            template_error(args.pos, "namespace() expects [key, value] pairs with string keys");
          }
          ns->fields.set(pair.as_array()[0].as_string(), pair.as_array()[1]);
        }
      } else {
        template_error(args.pos, "namespace() expects a dict or a list of pairs");
      }
    }
    for (const auto& [k, v] : args.keyword) ns->fields.set(k, v);
    return Value(ns);
  }

  static Value range(Interpreter& interp, const CallArgs& args) {
    int64_t bounds[3] = {0, 0, 1};
    const size_t n = args.positional.size();
    if (n < 1 || n > 3) template_error(args.pos, "range() takes 1 to 3 integer arguments");
    for (size_t i = 0; i < n; ++i) {
      if (!args.positional[i].is_int()) template_error(args.pos, "range() arguments must be integers");
    }
    if (n == 1) {
      bounds[1] = args.positional[0].as_int();
    } else {
      bounds[0] = args.positional[0].as_int();
      bounds[1] = args.positional[1].as_int();
      if (n == 3) bounds[2] = args.positional[2].as_int();
    }
    const int64_t step = bounds[2];
    if (step == 0) template_error(args.pos, "range() step must not be zero");
    // The list is built eagerly, so its length is capped before any memory is spent on it.
    const double num_items = std::ceil((static_cast<double>(bounds[1]) - static_cast<double>(bounds[0])) /
                                       static_cast<double>(step));
    if (num_items > static_cast<double>(kMaxRangeItems)) {
      template_error(args.pos, "range() of more than " + std::to_string(kMaxRangeItems) + " items");
    }
    Array out;
    for (int64_t i = bounds[0]; step > 0 ? i < bounds[1] : i > bounds[1];) {
      interp.charge_steps(1, args.pos);
      out.emplace_back(i);
      if (__builtin_add_overflow(i, step, &i)) break;
    }
    return Value(std::move(out));
  }

  // The subset the reference supports: %Y %m %d %b %B %H %M %%, local time, English month names.
  static Value strftime_now(const CallArgs& args) {
    const Value* fmt = args.get(0, "format");
    if (fmt == nullptr || !fmt->is_string()) template_error(args.pos, "strftime_now() expects a format string");
    static constexpr const char* kMonths[12] = {"January", "February", "March", "April", "May", "June", "July",
                                                "August", "September", "October", "November", "December"};
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    const auto pad2 = [](int v) {
      std::string out = std::to_string(v);
      if (out.size() < 2) out.insert(out.begin(), '0');
      return out;
    };
    const std::string& f = fmt->as_string();
    std::string out;
    for (size_t i = 0; i < f.size(); ++i) {
      if (f[i] != '%' || i + 1 == f.size()) {
        out += f[i];
        continue;
      }
      const char c = f[++i];
      switch (c) {
        case 'Y': out += std::to_string(tm.tm_year + 1900); break;
        case 'm': out += pad2(tm.tm_mon + 1); break;
        case 'd': out += pad2(tm.tm_mday); break;
        case 'b': out += std::string(kMonths[tm.tm_mon]).substr(0, 3); break;
        case 'B': out += kMonths[tm.tm_mon]; break;
        case 'H': out += pad2(tm.tm_hour); break;
        case 'M': out += pad2(tm.tm_min); break;
        case '%': out += '%'; break;
        default: out += '%'; out += c; break;
      }
    }
    return Value(std::move(out));
  }

  std::string name_;
};

}  // namespace

Value dict_items(const Object& obj) {
  Array out;
  out.reserve(obj.entries.size());
  for (const auto& [k, v] : obj.entries) out.emplace_back(Array{Value(k), v});
  return Value(std::move(out));
}

Value get_attribute(const Value& object, std::string_view name, SourcePos pos) {
  (void)pos;
  if (object.is_object()) {
    if (const Value* v = object.as_object().find(name)) return *v;
    if (contains(kDictMethods, name)) return bound(object, name);
    return Value();
  }
  if (object.is_namespace()) {
    const Value* v = object.as_namespace().fields.find(name);
    return v != nullptr ? *v : Value();
  }
  if (object.is_array() || object.is_string()) {
    if (name == "length") {
      return Value(static_cast<int64_t>(object.is_array() ? object.as_array().size()
                                                          : count_code_points(object.as_string())));
    }
    if (object.is_string() && contains(kStringMethods, name)) return bound(object, name);
  }
  return Value();
}

Value get_item(const Value& object, const Value& key, SourcePos pos) {
  if (key.is_string()) return get_attribute(object, key.as_string(), pos);
  if ((object.is_array() || object.is_string()) && key.is_int()) return element_at(object, key.as_int());
  if (object.is_array() || object.is_string()) {
    template_error(pos, std::string("list and string indices must be integers, not ") + type_name(key));
  }
  template_error(pos, std::string("cannot subscript a ") + type_name(object) + " with a " + type_name(key));
}

bool is_known_test(std::string_view name) {
  static constexpr std::array<std::string_view, 25> kTests = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "true",
      "false", "mapping", "iterable", "sequence", "callable", "odd", "even", "lower", "upper",
      "equalto", "eq", "ne", "divisibleby", "in", "sameas", "escaped"};
  return contains(kTests, name);
}

bool run_test(std::string_view name, const Value& v, const CallArgs& args) {
  const Value* arg = args.get(0, "value");
  const auto need_arg = [&]() -> const Value& {
    if (arg == nullptr) template_error(args.pos, "test '" + std::string(name) + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_null();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.is_function();
  if (name == "escaped") return false;
  if (name == "odd" || name == "even") {
    if (!v.is_int()) template_error(args.pos, "test '" + std::string(name) + "' needs an integer");
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "lower") return v.is_string() && v.as_string() == to_lower(v.as_string());
  if (name == "upper") return v.is_string() && v.as_string() == to_upper(v.as_string());
  if (name == "equalto" || name == "eq") return loose_equals(v, need_arg());
  if (name == "ne") return !loose_equals(v, need_arg());
  if (name == "sameas") {
    const Value& o = need_arg();
    return v.identity() != nullptr ? v.identity() == o.identity() : loose_equals(v, o) && v.type() == o.type();
  }
  if (name == "divisibleby") {
    const Value& d = need_arg();
    if (!v.is_int() || !d.is_int() || d.as_int() == 0) {
      template_error(args.pos, "divisibleby needs integers and a non-zero divisor");
    }
    return d.as_int() == -1 || v.as_int() % d.as_int() == 0;
  }
  // "in"
  const Value& container = need_arg();
  if (container.is_array()) {
    for (const Value& item : container.as_array()) {
      if (loose_equals(item, v)) return true;
    }
    return false;
  }
  if (container.is_string() && v.is_string()) return container.as_string().find(v.as_string()) != std::string::npos;
  if (container.is_object() && v.is_string()) return container.as_object().find(v.as_string()) != nullptr;
  template_error(args.pos, "test 'in' needs a list, string or dict");
}

void install_globals(Scope& globals) {
  for (const char* name : {"namespace", "range", "strftime_now", "raise_exception"}) {
    globals.set(name, Value(std::shared_ptr<const Callable>(std::make_shared<GlobalFunction>(name))));
  }
}

}  // namespace pagellm::tok::jinja
