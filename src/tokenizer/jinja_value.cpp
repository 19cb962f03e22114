#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

namespace {

// Values nest only as deep as the request JSON or the template's literals; this caps recursion in
// rendering and conversion so that a namespace that contains itself cannot overflow the stack.
constexpr int kMaxNesting = 256;

}  // namespace

void template_error(SourcePos pos, const std::string& message) {
  throw Error(ErrorKind::kInvalidArgument, "chat template: " + std::to_string(pos.line) + ":" +
                                               std::to_string(pos.col) + ": " + message);
}

const Value* Object::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t i, std::string_view name) const {
  if (i < positional.size()) return &positional[i];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

const void* Value::identity() const {
  switch (type()) {
    case Type::kArray: return std::get<ArrPtr>(v_).get();
    case Type::kObject: return std::get<ObjPtr>(v_).get();
    case Type::kNamespace: return std::get<NsPtr>(v_).get();
    case Type::kFunction: return std::get<FnPtr>(v_).get();
    default: return nullptr;
  }
}

const char* type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "undefined";
    case Value::Type::kNull: return "none";
    case Value::Type::kBool: return "boolean";
    case Value::Type::kInt: return "integer";
    case Value::Type::kFloat: return "float";
    case Value::Type::kString: return "string";
    case Value::Type::kArray: return "list";
    case Value::Type::kObject: return "dict";
    case Value::Type::kNamespace: return "namespace";
    case Value::Type::kFunction: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNull: return false;
    case Value::Type::kBool: return v.as_bool();
    case Value::Type::kInt: return v.as_int() != 0;
    case Value::Type::kFloat: return v.as_float() != 0 && !std::isnan(v.as_float());
    case Value::Type::kString: return !v.as_string().empty();
    case Value::Type::kArray: return !v.as_array().empty();
    case Value::Type::kObject: return !v.as_object().entries.empty();
    case Value::Type::kNamespace:
    case Value::Type::kFunction: return true;
  }
  return false;
}

bool loose_equals(const Value& a, const Value& b) {
  const bool a_none = a.is_null() || a.is_undefined();
  const bool b_none = b.is_null() || b.is_undefined();
  if (a_none || b_none) return a_none && b_none;
  const auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric(a) && numeric(b)) {
    const auto num = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); };
    return num(a) == num(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  if (a.identity() != nullptr) return a.identity() == b.identity();
  return false;
}

std::string format_js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  if (d == 0) return "0";  // JS prints -0 as "0" too
  char buf[64];
  // Shortest round-trip digits in scientific form: "d.ddde+XX".
  const auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;  // value = 0.digits * 10^n
  std::string out = d < 0 ? "-" : "";
  // Appends piecewise: GCC 12's -Wrestrict misfires on chained string operator+.
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out.append(digits, 0, static_cast<size_t>(n));
    out += '.';
    out.append(digits, static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-n), '0');
    out += digits;
  } else {
    out += digits[0];
    if (k > 1) {
      out += '.';
      out.append(digits, 1);
    }
    out += (n - 1 >= 0) ? "e+" : "e-";
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

namespace {

std::string format_float_rendered(double d) {
  // FloatValue.toString of the reference: integral floats keep one decimal ("2.0").
  if (d == 0 && std::signbit(d)) return "-0.0";
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e21) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  return format_js_number(d);
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    const char32_t cp = decode_utf8(s, i, &len);
    switch (cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    const auto escape_unit = [&](uint32_t unit) {
      out += "\\u";
      for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xF];
    };
    if (cp < 0x20) {
      escape_unit(cp);
    } else if (ensure_ascii && cp >= 0x7F) {
      if (cp >= 0x10000) {  // UTF-16 surrogate pair, as JSON.stringify / json.dumps write it
        escape_unit(0xD800 + ((cp - 0x10000) >> 10));
        escape_unit(0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        escape_unit(cp);
      }
    } else {
      out.append(s.substr(i, len));
    }
  }
  out += '"';
}

}  // namespace

void append_json(std::string& out, const Value& v, const JsonOptions& options, SourcePos pos,
                 int depth) {
  if (depth > kMaxNesting) template_error(pos, "value nested too deeply for tojson");
  const int64_t indent = options.indent.value_or(0);
  std::string item_sep = indent > 0 ? "," : ", ";
  std::string key_sep = ": ";
  if (options.separators) std::tie(item_sep, key_sep) = *options.separators;
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * level, ' ');
  };
  switch (v.type()) {
    case Value::Type::kUndefined: out += options.undefined_as_null ? "null" : "undefined"; return;
    case Value::Type::kNull: out += "null"; return;
    case Value::Type::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat:
      // JSON.stringify: non-finite numbers become null; 2.0 prints as 2.
      out += std::isfinite(v.as_float()) ? format_js_number(v.as_float()) : "null";
      return;
    case Value::Type::kString: append_json_string(out, v.as_string(), options.ensure_ascii); return;
    case Value::Type::kArray: {
      const Array& items = v.as_array();
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (indent > 0) newline(depth + 1);
        append_json(out, items[i], options, pos, depth + 1);
      }
      if (indent > 0 && !items.empty()) newline(depth);
      out += ']';
      return;
    }
    case Value::Type::kObject:
    case Value::Type::kNamespace: {
      const Object& obj = v.is_object() ? v.as_object() : v.as_namespace().fields;
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : obj.entries) entries.push_back(&e);
      if (options.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_sep;
        if (indent > 0) newline(depth + 1);
        append_json_string(out, entries[i]->first, options.ensure_ascii);
        out += key_sep;
        append_json(out, entries[i]->second, options, pos, depth + 1);
      }
      if (indent > 0 && !entries.empty()) newline(depth);
      out += '}';
      return;
    }
    case Value::Type::kFunction: template_error(pos, "cannot convert a function to JSON");
  }
}

void append_rendered(std::string& out, const Value& v, SourcePos pos) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNull: return;
    case Value::Type::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat: out += format_float_rendered(v.as_float()); return;
    case Value::Type::kString: out += v.as_string(); return;
    case Value::Type::kArray:
    case Value::Type::kObject:
    case Value::Type::kNamespace: {
      JsonOptions options;
      options.undefined_as_null = false;
      append_json(out, v, options, pos);
      return;
    }
    case Value::Type::kFunction: template_error(pos, "cannot render a function");
  }
}

std::string rendered(const Value& v, SourcePos pos) {
  std::string out;
  append_rendered(out, v, pos);
  return out;
}

namespace {

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) {
    throw Error(ErrorKind::kInvalidArgument, "chat template: context JSON nested too deeply");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::null();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at(item, depth + 1));
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object obj;
      obj.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        obj.entries.emplace_back(it.key(), from_json_at(it.value(), depth + 1));
      }
      return Value(std::move(obj));
    }
    default: return Value();  // binary / discarded: nothing a template can use
  }
}

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

}  // namespace pagellm::tok::jinja
