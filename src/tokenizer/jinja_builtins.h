// Builtins of the Jinja engine: operators, attribute access, string/dict methods, filters, tests and
// global functions. Behaviour follows @huggingface/jinja (what transformers.js renders with), taking
// Python Jinja2's semantics where the reference ignores an argument (e.g. str.strip(chars)).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_value.h"

namespace pagellm::tok::jinja {

// Parse-time validation: a template naming anything else is rejected when it is loaded.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// --- operators (jinja_operators.cpp) ---
// Every binary operator but and/or (which short-circuit in the interpreter).
Value binary_op(Interpreter& interp, BinaryOp op, const Value& a, const Value& b, SourcePos pos);
// Orders two values for sort/dictsort: numbers (and booleans) numerically, strings by code point
// (case-insensitively unless asked), none with none; anything else is an error.
int compare_values(const Value& a, const Value& b, bool case_sensitive, SourcePos pos);
// The `~` operator's and join's text for a scalar: floats print like JS numbers (2.0 -> "2").
std::string concat_text(const Value& v, SourcePos pos);
// Python slice semantics over lists and strings (by code point); nullopt = omitted.
Value slice_value(Interpreter& interp, const Value& object, std::optional<int64_t> start,
                  std::optional<int64_t> stop, std::optional<int64_t> step, SourcePos pos);

// --- attribute access, methods, tests, globals (jinja_methods.cpp) ---
// obj.name: dict keys, then dict methods (get/items/keys/values); str/list `length` and str methods.
Value get_attribute(const Value& object, std::string_view name, SourcePos pos);
// obj[key]: dict keys and methods by string; list/str elements by (negative) integer index.
Value get_item(const Value& object, const Value& key, SourcePos pos);
// `value is name(args)`.
bool run_test(std::string_view name, const Value& operand, const CallArgs& args);
// Dict entries as [key, value] pairs (the `items` filter and dict.items()).
Value dict_items(const Object& obj);
// namespace(), range(), raise_exception(), strftime_now().
void install_globals(Scope& globals);

// --- filters (jinja_filters.cpp) ---
// `operand | filter(args)`: `filter` is a kFilter node whose args are evaluated in `scope`.
Value apply_filter(Interpreter& interp, Scope& scope, const Expr& filter, const Value& operand);

}  // namespace pagellm::tok::jinja
