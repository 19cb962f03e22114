#include "tokenizer/jinja_interpreter.h"

#include "common/error.h"
#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_utf8.h"

namespace pagellm::tok::jinja {

namespace {

// A macro as a value: calling it renders its body with the arguments bound.
class MacroFunction : public Callable {
 public:
  explicit MacroFunction(const Stmt& def) : def_(def) {}
  Value call(Interpreter& interp, Scope& scope, CallArgs& args) const override {
    return interp.call_macro(def_, scope, args);
  }

 private:
  const Stmt& def_;
};

}  // namespace

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent) {
    for (const auto& [k, v] : s->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

struct Interpreter::DepthGuard {
  DepthGuard(Interpreter& i, SourcePos pos) : interp(i) {
    if (++interp.depth_ > interp.limits_.max_depth) template_error(pos, "recursion too deep");
  }
  ~DepthGuard() { --interp.depth_; }
  Interpreter& interp;
};

Interpreter::Interpreter(const Program& program, const RenderLimits& limits)
    : program_(program), limits_(limits) {}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->fields.entries.clear();
}

void Interpreter::charge_steps(uint64_t n, SourcePos pos) {
  steps_ += n;
  if (steps_ > limits_.max_steps) template_error(pos, "template exceeded its step budget (runaway loop?)");
}

void Interpreter::charge_bytes(size_t n, SourcePos pos) {
  check_size(n, pos);
  work_bytes_ += n;
  if (work_bytes_ > limits_.max_work_bytes) template_error(pos, "template exceeded its memory budget");
}

void Interpreter::check_size(size_t num_bytes, SourcePos pos) const {
  if (num_bytes > limits_.max_output_bytes) {
    template_error(pos, "string longer than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
}

std::shared_ptr<Namespace> Interpreter::make_namespace() {
  auto ns = std::make_shared<Namespace>();
  namespaces_.push_back(ns);
  return ns;
}

std::string Interpreter::render(const Value& context) {
  Scope globals;
  install_globals(globals);
  if (context.is_object()) {
    for (const auto& [k, v] : context.as_object().entries) globals.set(k, v);
  }
  std::string out;
  exec_block(program_.body, globals, out);
  return out;
}

Interpreter::Flow Interpreter::exec_block(const Block& block, Scope& scope, std::string& out) {
  for (const Stmt& s : block) {
    const Flow flow = exec(s, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

void Interpreter::append_output(std::string& out, const Value& v, SourcePos pos) {
  const size_t before = out.size();
  append_rendered(out, v, pos);
  charge_bytes(out.size() - before, pos);
  check_size(out.size(), pos);
}

Interpreter::Flow Interpreter::exec(const Stmt& s, Scope& scope, std::string& out) {
  charge_steps(1, s.pos);
  DepthGuard guard(*this, s.pos);
  switch (s.kind) {
    case StmtKind::kText:
      out += s.text;
      charge_bytes(s.text.size(), s.pos);
      check_size(out.size(), s.pos);
      return Flow::kNormal;
    case StmtKind::kOutput: append_output(out, eval(*s.expr, scope), s.pos); return Flow::kNormal;
    case StmtKind::kIf:
      return exec_block(truthy(eval(*s.expr, scope)) ? s.body : s.else_body, scope, out);
    case StmtKind::kFor: exec_for(s, scope, out); return Flow::kNormal;
    case StmtKind::kSet:
    case StmtKind::kSetBlock: exec_set(s, scope, out); return Flow::kNormal;
    case StmtKind::kMacro:
      scope.set(s.text, Value(std::shared_ptr<const Callable>(std::make_shared<MacroFunction>(s))));
      return Flow::kNormal;
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kFilterBlock: {
      std::string body;
      const Flow flow = exec_block(s.body, scope, body);
      append_output(out, apply_filter(*this, scope, *s.expr, Value(std::move(body))), s.pos);
      return flow;
    }
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Stmt& s, Scope& scope, std::string& out) {
  // One scope for the whole loop (as the reference): loop variables and `set`s inside the body
  // stay visible across iterations but not after the loop.
  Scope loop_scope;
  loop_scope.parent = &scope;
  const Value iterable = eval(*s.expr, loop_scope);
  Array items;
  if (iterable.is_array()) {
    items = iterable.as_array();
  } else if (iterable.is_object()) {
    for (const auto& [k, v] : iterable.as_object().entries) items.emplace_back(k);
  } else if (iterable.is_string()) {
    const std::string& text = iterable.as_string();
    for (size_t i = 0, len = 0; i < text.size(); i += len) {
      decode_utf8(text, i, &len);
      items.emplace_back(text.substr(i, len));
    }
  } else if (!iterable.is_undefined()) {
    template_error(s.expr->pos, std::string("cannot loop over a ") + type_name(iterable));
  }
  if (s.loop_filter) {
    Array kept;
    for (const Value& item : items) {
      charge_steps(1, s.pos);
      Scope test_scope;
      test_scope.parent = &loop_scope;
      assign(*s.target, item, test_scope);
      if (truthy(eval(*s.loop_filter, test_scope))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    charge_steps(1, s.pos);
    Object loop;
    loop.entries = {
        {"index", Value(i + 1)},
        {"index0", Value(i)},
        {"revindex", Value(n - i)},
        {"revindex0", Value(n - i - 1)},
        {"first", Value(i == 0)},
        {"last", Value(i == n - 1)},
        {"length", Value(n)},
        {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value()},
        {"nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value()},
    };
    loop_scope.set("loop", Value(std::move(loop)));
    assign(*s.target, items[static_cast<size_t>(i)], loop_scope);
    if (exec_block(s.body, loop_scope, out) == Flow::kBreak) break;
  }
  if (n == 0) exec_block(s.else_body, loop_scope, out);
}

void Interpreter::assign(const Expr& target, const Value& value, Scope& scope) {
  if (target.kind == ExprKind::kName) {
    scope.set(target.name, value);
    return;
  }
  if (target.kind == ExprKind::kTuple) {
    if (!value.is_array()) template_error(target.pos, std::string("cannot unpack a ") + type_name(value));
    const Array& items = value.as_array();
    if (items.size() != target.children.size()) {
      template_error(target.pos, "expected " + std::to_string(target.children.size()) + " values to unpack, got " +
                                     std::to_string(items.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) scope.set(target.children[i]->name, items[i]);
    return;
  }
  // ns.attr = value (the parser admits no other target).
  const Value object = eval(*target.children[0], scope);
  if (!object.is_namespace()) template_error(target.pos, "can only assign attributes of a namespace()");
  object.as_namespace().fields.set(target.name, value);
}

void Interpreter::exec_set(const Stmt& s, Scope& scope, std::string& out) {
  (void)out;
  if (s.kind == StmtKind::kSet) {
    assign(*s.target, eval(*s.expr, scope), scope);
    return;
  }
  std::string body;
  exec_block(s.body, scope, body);
  assign(*s.target, Value(std::move(body)), scope);
}

CallArgs Interpreter::eval_args(const Args& args, Scope& scope, SourcePos pos) {
  CallArgs out;
  out.pos = pos;
  out.positional.reserve(args.positional.size());
  for (const auto& e : args.positional) out.positional.push_back(eval(*e, scope));
  for (const auto& [k, e] : args.keyword) out.keyword.emplace_back(k, eval(*e, scope));
  return out;
}

Value Interpreter::call_value(const Value& fn, Scope& scope, CallArgs& args, SourcePos pos) {
  if (!fn.is_function()) template_error(pos, std::string("cannot call a ") + type_name(fn));
  DepthGuard guard(*this, pos);
  return fn.as_function().call(*this, scope, args);
}

Value Interpreter::call_macro(const Stmt& macro, Scope& caller, CallArgs& args) {
  // The macro's scope hangs off the caller's, as in the reference implementation.
  Scope local;
  local.parent = &caller;
  if (args.positional.size() > macro.params.size()) {
    local.set("varargs", Value(Array(args.positional.begin() + static_cast<long>(macro.params.size()),
                                     args.positional.end())));
  }
  Object extra_kwargs;
  for (const auto& [k, v] : args.keyword) {
    bool known = false;
    for (const auto& p : macro.params) known = known || p.name == k;
    if (!known) extra_kwargs.set(k, v);
  }
  if (!extra_kwargs.entries.empty()) local.set("kwargs", Value(std::move(extra_kwargs)));
  for (size_t i = 0; i < macro.params.size(); ++i) {
    const MacroParam& p = macro.params[i];
    const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
    for (const auto& [k, v] : args.keyword) {
      if (given == nullptr && k == p.name) given = &v;
    }
    if (given != nullptr) {
      local.set(p.name, *given);
    } else if (p.default_value) {
      local.set(p.name, eval(*p.default_value, local));
    } else {
      local.set(p.name, Value());
    }
  }
  std::string out;
  exec_block(macro.body, local, out);
  return Value(std::move(out));
}

Value Interpreter::eval_collection(const Expr& e, Scope& scope) {
  if (e.kind == ExprKind::kDict) {
    Object obj;
    for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
      const Value key = eval(*e.children[i], scope);
      if (!key.is_string()) template_error(e.children[i]->pos, "dict keys must be strings");
      obj.set(key.as_string(), eval(*e.children[i + 1], scope));
    }
    return Value(std::move(obj));
  }
  Array items;
  items.reserve(e.children.size());
  for (const auto& c : e.children) items.push_back(eval(*c, scope));
  return Value(std::move(items));
}

Value Interpreter::eval_slice(const Expr& e, Scope& scope) {
  const Value object = eval(*e.children[0], scope);
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.children[i + 1]) continue;
    const Value v = eval(*e.children[i + 1], scope);
    if (v.is_null() || v.is_undefined()) continue;
    if (!v.is_int()) template_error(e.children[i + 1]->pos, "slice indices must be integers");
    bounds[i] = v.as_int();
  }
  return slice_value(*this, object, bounds[0], bounds[1], bounds[2], e.pos);
}

Value Interpreter::eval(const Expr& e, Scope& scope) {
  charge_steps(1, e.pos);
  DepthGuard guard(*this, e.pos);
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      const Value* v = scope.find(e.name);
      return v != nullptr ? *v : Value();
    }
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict: return eval_collection(e, scope);
    case ExprKind::kAttribute: {
      const Value object = eval(*e.children[0], scope);
      if (e.index >= 0) {
        if (object.is_array() || object.is_string()) return get_item(object, Value(e.index), e.pos);
        return get_attribute(object, e.name, e.pos);
      }
      return get_attribute(object, e.name, e.pos);
    }
    case ExprKind::kSubscript: {
      const Value object = eval(*e.children[0], scope);
      return get_item(object, eval(*e.children[1], scope), e.pos);
    }
    case ExprKind::kSlice: return eval_slice(e, scope);
    case ExprKind::kCall: {
      const Value fn = eval(*e.children[0], scope);
      CallArgs args = eval_args(e.args, scope, e.pos);
      if (fn.is_undefined() && e.children[0]->kind == ExprKind::kName) {
        template_error(e.pos, "'" + e.children[0]->name + "' is undefined");
      }
      return call_value(fn, scope, args, e.pos);
    }
    case ExprKind::kUnary: {
      const Value v = eval(*e.children[0], scope);
      if (e.name == "not") return Value(!truthy(v));
      const bool negate = e.name == "-";
      if (v.is_float()) return Value(negate ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const int64_t i = v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int();
        if (negate && i == INT64_MIN) template_error(e.pos, "integer overflow in unary '-'");
        return Value(negate ? -i : i);
      }
      template_error(e.pos, "unary '" + e.name + "' needs a number, got a " + type_name(v));
    }
    case ExprKind::kBinary: {
      const Value left = eval(*e.children[0], scope);
      if (e.op == BinaryOp::kAnd) return truthy(left) ? eval(*e.children[1], scope) : left;
      if (e.op == BinaryOp::kOr) return truthy(left) ? left : eval(*e.children[1], scope);
      return binary_op(*this, e.op, left, eval(*e.children[1], scope), e.pos);
    }
    case ExprKind::kFilter: return apply_filter(*this, scope, e, eval(*e.children[0], scope));
    case ExprKind::kTest: {
      const Value v = eval(*e.children[0], scope);
      const CallArgs args = eval_args(e.args, scope, e.pos);
      return Value(run_test(e.name, v, args) != e.negate);
    }
    case ExprKind::kTernary:
      return truthy(eval(*e.children[0], scope)) ? eval(*e.children[1], scope) : eval(*e.children[2], scope);
    case ExprKind::kSelect:
      return truthy(eval(*e.children[0], scope)) ? eval(*e.children[1], scope) : Value();
  }
  return Value();
}

}  // namespace pagellm::tok::jinja
