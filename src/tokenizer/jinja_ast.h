// The syntax tree of a parsed template. Nodes are plain structs owned by their parent; the program
// is immutable after parsing, so one ChatTemplate can render on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace pagellm::tok::jinja {

enum class ExprKind : uint8_t {
  kLiteral,     // value
  kName,        // name
  kList,        // [children...]
  kTuple,       // (a, b) — also set/for targets
  kDict,        // {children[0]: children[1], ...}: keys and values interleaved
  kAttribute,   // children[0].name (also a.0: name holds the digits, index >= 0)
  kSubscript,   // children[0][children[1]]
  kSlice,       // children[0][children[1]:children[2]:children[3]] (nullptr = omitted)
  kCall,        // children[0](args)
  kUnary,       // op children[0]: "not", "-", "+"
  kBinary,      // children[0] op children[1]
  kFilter,      // children[0] | name(args)
  kTest,        // children[0] is [not] name(args)
  kTernary,     // children[1] if children[0] else children[2]
  kSelect,      // children[1] if children[0]   (no else: undefined when false)
};

enum class BinaryOp : uint8_t {
  kAnd, kOr, kEq, kNe, kLt, kGt, kLe, kGe, kIn, kNotIn,
  kAdd, kSub, kConcat, kMul, kDiv, kFloorDiv, kMod, kPow,
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// A call's arguments; keyword arguments keep their names.
struct Args {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value literal;              // kLiteral
  std::string name;           // kName, kAttribute, kFilter, kTest, kUnary operator
  int64_t index = -1;         // kAttribute with a numeric name (a.0)
  BinaryOp op = BinaryOp::kAdd;
  bool negate = false;        // kTest: "is not"
  std::vector<ExprPtr> children;
  Args args;                  // kCall, kFilter, kTest
};

enum class StmtKind : uint8_t {
  kText,        // text
  kOutput,      // {{ expr }}
  kIf,          // if expr: body else else_body (elif is a nested kIf in else_body)
  kFor,         // for target in expr [if filter]: body else else_body
  kSet,         // set target = expr
  kSetBlock,    // set target %} body {% endset
  kMacro,       // macro name(params) body
  kBreak,
  kContinue,
  kFilterBlock, // filter name(args) %} body {% endfilter (the filter is `expr`, a kFilter node)
};

struct Stmt;
using Block = std::vector<Stmt>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // nullptr: required
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;           // kText; kMacro name
  ExprPtr expr;               // value, condition, iterable, or filter node
  ExprPtr target;             // kSet/kSetBlock/kFor target (kName, kTuple or kAttribute)
  ExprPtr loop_filter;        // kFor: `for x in xs if cond`
  std::vector<MacroParam> params;  // kMacro
  Block body;
  Block else_body;
};

struct Program {
  Block body;
};

}  // namespace pagellm::tok::jinja
