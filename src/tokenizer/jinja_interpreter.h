// Renders a parsed Program. Every render is bounded: a step budget (expressions evaluated, loop
// iterations), a byte budget (all strings built), a cap on any one string and on the output, and a
// recursion cap (macros calling macros), so a hostile template ends with a clear error, never a hang.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace pagellm::tok::jinja {

struct RenderLimits {
  size_t max_output_bytes = 32u << 20;   // the rendered prompt and any single string
  uint64_t max_steps = 20'000'000;       // expression evaluations + statements + loop iterations
  uint64_t max_work_bytes = 1ull << 30;  // total bytes of all strings/lists built during a render
  int max_depth = 200;                   // nested evaluation (expressions inside macro calls ...)
};

// Variables visible at one level: the globals/context, a for loop's body, a macro call.
struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);  // in this scope, as Jinja's `set` does
};

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderLimits& limits);
  ~Interpreter();

  // `context` must be a dict; its keys become global variables next to the builtins.
  std::string render(const Value& context);

  // Hooks for builtins.
  Value eval(const Expr& e, Scope& scope);
  void charge_steps(uint64_t n, SourcePos pos);
  void charge_bytes(size_t n, SourcePos pos);  // also rejects any single string over the cap
  void check_size(size_t num_bytes, SourcePos pos) const;  // a string being built stays under the cap
  std::shared_ptr<Namespace> make_namespace();
  Value call_macro(const Stmt& macro, Scope& caller, CallArgs& args);
  Value call_value(const Value& fn, Scope& scope, CallArgs& args, SourcePos pos);
  CallArgs eval_args(const Args& args, Scope& scope, SourcePos pos);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  struct DepthGuard;

  Flow exec_block(const Block& block, Scope& scope, std::string& out);
  Flow exec(const Stmt& s, Scope& scope, std::string& out);
  void exec_for(const Stmt& s, Scope& scope, std::string& out);
  void exec_set(const Stmt& s, Scope& scope, std::string& out);
  void assign(const Expr& target, const Value& value, Scope& scope);
  void append_output(std::string& out, const Value& v, SourcePos pos);
  Value eval_collection(const Expr& e, Scope& scope);
  Value eval_slice(const Expr& e, Scope& scope);

  const Program& program_;
  RenderLimits limits_;
  uint64_t steps_ = 0;
  uint64_t work_bytes_ = 0;
  int depth_ = 0;
  // Namespaces are the only mutable values, so the only way to build a reference cycle
  // (`set ns.self = ns`); they are all emptied after the render to break any such cycle.
  std::vector<std::shared_ptr<Namespace>> namespaces_;
};

}  // namespace pagellm::tok::jinja
