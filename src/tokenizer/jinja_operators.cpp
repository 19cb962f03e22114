// Binary operators, ordering and slicing.
#include <cmath>
#include <limits>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

namespace {

const char* op_text(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAnd: return "and";
    case BinaryOp::kOr: return "or";
    case BinaryOp::kEq: return "==";
    case BinaryOp::kNe: return "!=";
    case BinaryOp::kLt: return "<";
    case BinaryOp::kGt: return ">";
    case BinaryOp::kLe: return "<=";
    case BinaryOp::kGe: return ">=";
    case BinaryOp::kIn: return "in";
    case BinaryOp::kNotIn: return "not in";
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kConcat: return "~";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
  }
  return "?";
}

// Membership (`x in list`) compares scalars by value and containers by identity.
bool same_value(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_number() == b.as_number();
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNull: return true;
    case Value::Type::kBool: return a.as_bool() == b.as_bool();
    case Value::Type::kString: return a.as_string() == b.as_string();
    default: return a.identity() == b.identity();
  }
}

Value int_arith(BinaryOp op, int64_t a, int64_t b, SourcePos pos) {
  int64_t r = 0;
  bool overflow = false;
  switch (op) {
    case BinaryOp::kAdd: overflow = __builtin_add_overflow(a, b, &r); break;
    case BinaryOp::kSub: overflow = __builtin_sub_overflow(a, b, &r); break;
    case BinaryOp::kMul: overflow = __builtin_mul_overflow(a, b, &r); break;
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod:
      if (b == 0) template_error(pos, "integer division or modulo by zero");
      if (a == std::numeric_limits<int64_t>::min() && b == -1) {
        overflow = op == BinaryOp::kFloorDiv;
        r = 0;
        break;
      }
      if (op == BinaryOp::kMod) {
        r = a % b;  // sign of the dividend, as the reference (JavaScript) computes it
      } else {
        r = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --r;  // floor, as Python
      }
      break;
    default: break;
  }
  if (overflow) template_error(pos, std::string("integer overflow in '") + op_text(op) + "'");
  return Value(r);
}

Value numeric_op(BinaryOp op, const Value& a, const Value& b, SourcePos pos) {
  const bool is_float = a.is_float() || b.is_float();
  const double x = a.as_number();
  const double y = b.as_number();
  switch (op) {
    case BinaryOp::kLt: return Value(x < y);
    case BinaryOp::kGt: return Value(x > y);
    case BinaryOp::kLe: return Value(x <= y);
    case BinaryOp::kGe: return Value(x >= y);
    case BinaryOp::kDiv:
      if (y == 0) template_error(pos, "division by zero");
      return Value(x / y);
    default: break;
  }
  if (!is_float) return int_arith(op, a.as_int(), b.as_int(), pos);
  switch (op) {
    case BinaryOp::kAdd: return Value(x + y);
    case BinaryOp::kSub: return Value(x - y);
    case BinaryOp::kMul: return Value(x * y);
    case BinaryOp::kFloorDiv:
      if (y == 0) template_error(pos, "float floor division by zero");
      return Value(std::floor(x / y));
    case BinaryOp::kMod:
      if (y == 0) template_error(pos, "float modulo by zero");
      return Value(std::fmod(x, y));
    default: template_error(pos, std::string("unsupported operator '") + op_text(op) + "' on numbers");
  }
}

Value power(const Value& a, const Value& b, SourcePos pos) {
  const auto num = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); };
  const double x = num(a);
  const double y = num(b);
  if (x == 0 && y < 0) template_error(pos, "0 cannot be raised to a negative power");
  const double r = std::pow(x, y);
  if (!std::isfinite(r)) template_error(pos, "'**' result is not a finite number");
  const bool is_float = a.is_float() || b.is_float() || y < 0;
  if (is_float) return Value(r);
  if (std::fabs(r) >= 9.2e18) template_error(pos, "integer overflow in '**'");
  // Exact integer power by squaring (pow() may round for large results).
  int64_t base = static_cast<int64_t>(x);
  int64_t e = static_cast<int64_t>(y);
  int64_t result = 1;
  while (e > 0) {
    if (e & 1) result *= base;
    e >>= 1;
    if (e > 0) base *= base;
  }
  return Value(result);
}

}  // namespace

std::string concat_text(const Value& v, SourcePos pos) {
  switch (v.type()) {
    case Value::Type::kString: return v.as_string();
    case Value::Type::kInt: return std::to_string(v.as_int());
    case Value::Type::kFloat: return format_js_number(v.as_float());
    case Value::Type::kBool: return v.as_bool() ? "true" : "false";
    default: template_error(pos, std::string("cannot convert a ") + type_name(v) + " to text here");
  }
}

Value binary_op(Interpreter& interp, BinaryOp op, const Value& a, const Value& b, SourcePos pos) {
  if (op == BinaryOp::kEq) return Value(loose_equals(a, b));
  if (op == BinaryOp::kNe) return Value(!loose_equals(a, b));
  const bool membership = op == BinaryOp::kIn || op == BinaryOp::kNotIn;
  if (a.is_undefined() || b.is_undefined()) {
    // `x in undefined` is false (and `not in` true) so that optional fields can be probed.
    if (b.is_undefined() && membership) return Value(op == BinaryOp::kNotIn);
    template_error(pos, std::string("cannot apply '") + op_text(op) + "' to an undefined value");
  }
  if (a.is_null() || b.is_null()) {
    template_error(pos, std::string("cannot apply '") + op_text(op) + "' to none");
  }
  if (op == BinaryOp::kConcat) {
    std::string s = concat_text(a, pos) + concat_text(b, pos);
    interp.charge_bytes(s.size(), pos);
    return Value(std::move(s));
  }
  if (op == BinaryOp::kPow && (a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    return power(a, b, pos);
  }
  if (a.is_number() && b.is_number() && !membership) return numeric_op(op, a, b, pos);
  if (a.is_array() && b.is_array() && op == BinaryOp::kAdd) {
    Array joined = a.as_array();
    interp.charge_bytes((joined.size() + b.as_array().size()) * sizeof(Value), pos);
    joined.insert(joined.end(), b.as_array().begin(), b.as_array().end());
    return Value(std::move(joined));
  }
  if (b.is_array() && membership) {
    bool found = false;
    for (const Value& item : b.as_array()) {
      if (same_value(item, a)) {
        found = true;
        break;
      }
    }
    return Value(found == (op == BinaryOp::kIn));
  }
  if ((a.is_string() || b.is_string()) && op == BinaryOp::kAdd) {
    std::string s = concat_text(a, pos) + concat_text(b, pos);
    interp.charge_bytes(s.size(), pos);
    return Value(std::move(s));
  }
  if (a.is_string() && b.is_string()) {
    const std::string& x = a.as_string();
    const std::string& y = b.as_string();
    switch (op) {
      case BinaryOp::kIn: return Value(y.find(x) != std::string::npos);
      case BinaryOp::kNotIn: return Value(y.find(x) == std::string::npos);
      case BinaryOp::kLt: return Value(x < y);  // UTF-8 byte order == code point order
      case BinaryOp::kGt: return Value(x > y);
      case BinaryOp::kLe: return Value(x <= y);
      case BinaryOp::kGe: return Value(x >= y);
      default: break;
    }
  }
  if (a.is_string() && (b.is_object() || b.is_namespace()) && membership) {
    const Object& obj = b.is_object() ? b.as_object() : b.as_namespace().fields;
    return Value((obj.find(a.as_string()) != nullptr) == (op == BinaryOp::kIn));
  }
  template_error(pos, std::string("unsupported operand types for '") + op_text(op) + "': " +
                          type_name(a) + " and " + type_name(b));
}

int compare_values(const Value& a, const Value& b, bool case_sensitive, SourcePos pos) {
  if (a.is_null() && b.is_null()) return 0;
  if (a.is_undefined() && b.is_undefined()) return 0;
  const auto numeric = [](const Value& v) { return v.is_number() || v.is_bool(); };
  if (numeric(a) && numeric(b)) {
    const auto num = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); };
    const double x = num(a);
    const double y = num(b);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const std::string x = case_sensitive ? a.as_string() : to_lower(a.as_string());
    const std::string y = case_sensitive ? b.as_string() : to_lower(b.as_string());
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  template_error(pos, std::string("cannot compare ") + type_name(a) + " with " + type_name(b));
}

Value slice_value(Interpreter& interp, const Value& object, std::optional<int64_t> start,
                  std::optional<int64_t> stop, std::optional<int64_t> step, SourcePos pos) {
  if (!object.is_array() && !object.is_string()) {
    template_error(pos, std::string("cannot slice a ") + type_name(object));
  }
  std::vector<size_t> offsets;  // string: byte offset of each code point
  int64_t n = 0;
  if (object.is_array()) {
    n = static_cast<int64_t>(object.as_array().size());
  } else {
    offsets = code_point_offsets(object.as_string());
    n = static_cast<int64_t>(offsets.size()) - 1;
  }
  const int64_t s = step.value_or(1);
  if (s == 0) template_error(pos, "slice step cannot be zero");
  // Python's normalisation: a negative index counts from the end, then it is clamped.
  const auto clamp = [&](std::optional<int64_t> v, int64_t fallback, int64_t lo, int64_t hi) {
    if (!v) return fallback;
    int64_t i = *v;
    if (i < 0) i = std::max(n + i, lo);
    return std::min(i, hi);
  };
  int64_t begin = 0;
  int64_t end = 0;
  if (s > 0) {
    begin = clamp(start, 0, 0, n);
    end = clamp(stop, n, 0, n);
  } else {
    begin = clamp(start, n - 1, -1, n - 1);
    end = clamp(stop, -1, -1, n - 1);
  }
  Array items;
  std::string text;
  for (int64_t i = begin; s > 0 ? i < end : i > end; i += s) {
    interp.charge_steps(1, pos);
    if (object.is_array()) {
      items.push_back(object.as_array()[static_cast<size_t>(i)]);
    } else {
      const size_t from = offsets[static_cast<size_t>(i)];
      text.append(object.as_string(), from, offsets[static_cast<size_t>(i) + 1] - from);
    }
  }
  if (object.is_array()) return Value(std::move(items));
  interp.charge_bytes(text.size(), pos);
  return Value(std::move(text));
}

}  // namespace pagellm::tok::jinja
