// Runtime values of the Jinja engine. The semantics follow @huggingface/jinja (the reference the tests
// compare against): Python-like truthiness, JSON-ish rendering of lists and dicts, undefined/none
// render as nothing. Containers are shared by reference (copying a Value is cheap); only namespaces
// are mutable, through `{% set ns.attr = ... %}`.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::tok::jinja {

// 1-based position in the template source, for error messages.
struct SourcePos {
  uint32_t line = 0;
  uint32_t col = 0;
};

// Throws pagellm::Error(kInvalidArgument, "chat template: <line>:<col>: <message>").
[[noreturn]] void template_error(SourcePos pos, const std::string& message);

class Value;
class Interpreter;
struct Scope;

using Array = std::vector<Value>;

// Insertion-ordered string-keyed map (chat messages have a handful of keys: a linear scan wins).
struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct Namespace {
  Object fields;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  SourcePos pos;
  // Positional argument i, else keyword `name`, else nullptr.
  const Value* get(size_t i, std::string_view name) const;
};

// Anything callable from a template: globals, bound string/dict methods, macros.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual Value call(Interpreter& interp, Scope& scope, CallArgs& args) const = 0;
};

struct Undefined {};
struct Null {};

class Value {
 public:
  enum class Type : uint8_t {
    kUndefined, kNull, kBool, kInt, kFloat, kString, kArray, kObject, kNamespace, kFunction
  };

  Value() = default;
  static Value null() { return Value(Storage(Null{})); }
  explicit Value(bool b) : v_(b) {}
  explicit Value(int64_t i) : v_(i) {}
  explicit Value(int i) : v_(static_cast<int64_t>(i)) {}
  explicit Value(double d) : v_(d) {}
  explicit Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}
  explicit Value(std::string_view s) : Value(std::string(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}
  explicit Value(Array a) : v_(std::make_shared<Array>(std::move(a))) {}
  explicit Value(Object o) : v_(std::make_shared<Object>(std::move(o))) {}
  explicit Value(std::shared_ptr<Namespace> ns) : v_(std::move(ns)) {}
  explicit Value(std::shared_ptr<const Callable> fn) : v_(std::move(fn)) {}

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_null() const { return type() == Type::kNull; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return type() == Type::kString; }
  bool is_array() const { return type() == Type::kArray; }
  bool is_object() const { return type() == Type::kObject; }
  bool is_namespace() const { return type() == Type::kNamespace; }
  bool is_function() const { return type() == Type::kFunction; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  double as_number() const { return is_int() ? static_cast<double>(as_int()) : as_float(); }
  const std::string& as_string() const { return *std::get<StrPtr>(v_); }
  const Array& as_array() const { return *std::get<ArrPtr>(v_); }
  const Object& as_object() const { return *std::get<ObjPtr>(v_); }
  Namespace& as_namespace() const { return *std::get<NsPtr>(v_); }
  const Callable& as_function() const { return *std::get<FnPtr>(v_); }

  // Identity of a container (for `==`/`in` on lists and dicts, which compare by reference as in
  // the reference implementation); nullptr for scalars.
  const void* identity() const;

 private:
  using StrPtr = std::shared_ptr<const std::string>;
  using ArrPtr = std::shared_ptr<const Array>;
  using ObjPtr = std::shared_ptr<const Object>;
  using NsPtr = std::shared_ptr<Namespace>;
  using FnPtr = std::shared_ptr<const Callable>;
  using Storage = std::variant<Undefined, Null, bool, int64_t, double, StrPtr, ArrPtr, ObjPtr, NsPtr, FnPtr>;
  explicit Value(Storage v) : v_(std::move(v)) {}
  Storage v_;
};

const char* type_name(const Value& v);

// Python truthiness: empty strings, lists and dicts, 0, none and undefined are false.
bool truthy(const Value& v);

// `==` as the reference implements it: scalars by value (ints and floats numerically, none equals
// undefined), lists/dicts/namespaces by identity.
bool loose_equals(const Value& a, const Value& b);

// JavaScript's Number.prototype.toString: shortest round-trip digits, exponent outside [1e-7, 1e21).
std::string format_js_number(double d);

// How `{{ value }}` renders (also the `~` operator's and `string` filter's view of scalars).
// Undefined and none render as "", booleans as true/false, floats keep a ".0", lists and dicts as
// JSON with ", " / ": " separators. Throws for functions.
void append_rendered(std::string& out, const Value& v, SourcePos pos);
std::string rendered(const Value& v, SourcePos pos);

struct JsonOptions {
  std::optional<int64_t> indent;                           // spaces per level; 0/none = one line
  bool ensure_ascii = false;                               // escape code units >= 0x7F as \uXXXX
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool undefined_as_null = true;                           // false when rendering with {{ }}
};

// The `tojson` filter, byte for byte as @huggingface/jinja (Python json.dumps layout).
void append_json(std::string& out, const Value& v, const JsonOptions& options, SourcePos pos,
                 int depth = 0);

// Converts request JSON (messages, tools, ...) into template values, keeping key order.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace pagellm::tok::jinja
