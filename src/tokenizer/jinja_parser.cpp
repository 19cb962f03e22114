#include "tokenizer/jinja_parser.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"

namespace pagellm::tok::jinja {

namespace {

// Each level of nesting costs about a dozen parser frames (one per precedence level); 100 levels is
// far beyond any real template and far below the stack limit, sanitizers included.
constexpr int kMaxNesting = 100;

ExprPtr make_expr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Program parse() {
    Program program;
    program.body = parse_block({}, "", SourcePos{});
    return program;
  }

 private:
  // --- token helpers -------------------------------------------------------------------------
  bool at_end() const { return cur_ >= toks_.size(); }
  const Token* peek(size_t ahead = 0) const {
    return cur_ + ahead < toks_.size() ? &toks_[cur_ + ahead] : nullptr;
  }
  bool is(TokenType type, size_t ahead = 0) const {
    const Token* t = peek(ahead);
    return t != nullptr && t->type == type;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    const Token* t = peek(ahead);
    return t != nullptr && t->type == TokenType::kIdentifier && t->value == name;
  }
  SourcePos here() const {
    if (!at_end()) return toks_[cur_].pos;
    return toks_.empty() ? SourcePos{1, 1} : toks_.back().pos;
  }
  std::string describe_current() const {
    if (at_end()) return "end of template";
    const Token& t = toks_[cur_];
    if (t.type == TokenType::kIdentifier || t.type == TokenType::kAdditive ||
        t.type == TokenType::kMultiplicative || t.type == TokenType::kComparison ||
        t.type == TokenType::kUnary) {
      return "'" + t.value + "'";
    }
    return token_type_name(t.type);
  }
  [[noreturn]] void fail(const std::string& message) const { template_error(here(), message); }
  const Token& expect(TokenType type, const char* context) {
    if (!is(type)) {
      fail(std::string("expected ") + token_type_name(type) + " " + context + ", got " + describe_current());
    }
    return toks_[cur_++];
  }
  std::string expect_name(const char* context) {
    return expect(TokenType::kIdentifier, context).value;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(TokenType::kOpenStatement)) return false;
    for (auto n : names) {
      if (is_name(n, 1)) return true;
    }
    return false;
  }

  struct DepthGuard {
    DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.fail("template nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // --- statements ----------------------------------------------------------------------------
  // Parses until one of `terminators` opens a statement (left unconsumed) or, for the top level,
  // the end of the template.
  Block parse_block(std::initializer_list<std::string_view> terminators, std::string_view opener,
                    SourcePos opener_pos) {
    DepthGuard guard(*this);
    Block block;
    while (!at_end()) {
      if (terminators.size() > 0 && is_statement(terminators)) return block;
      const Token& t = toks_[cur_];
      switch (t.type) {
        case TokenType::kText: {
          Stmt s{StmtKind::kText, t.pos, t.value, {}, {}, {}, {}, {}, {}};
          block.push_back(std::move(s));
          ++cur_;
          break;
        }
        case TokenType::kComment: ++cur_; break;
        case TokenType::kOpenExpression: {
          ++cur_;
          Stmt s{StmtKind::kOutput, t.pos, {}, parse_expression(), {}, {}, {}, {}, {}};
          expect(TokenType::kCloseExpression, "to close '{{'");
          block.push_back(std::move(s));
          break;
        }
        case TokenType::kOpenStatement: parse_statement(block); break;
        default: fail("unexpected " + describe_current() + " outside a tag");
      }
    }
    if (terminators.size() > 0) {
      template_error(opener_pos, "'" + std::string(opener) + "' is never closed (expected {% " +
                                     std::string(*terminators.begin()) + " %})");
    }
    return block;
  }

  void expect_end_statement(std::string_view name) {
    expect(TokenType::kOpenStatement, "");
    if (!is_name(name)) fail("expected '" + std::string(name) + "', got " + describe_current());
    ++cur_;
    expect(TokenType::kCloseStatement, ("after '" + std::string(name) + "'").c_str());
  }

  void parse_statement(Block& block) {
    const SourcePos pos = toks_[cur_].pos;
    ++cur_;  // {%
    if (!is(TokenType::kIdentifier)) fail("expected a statement name after '{%', got " + describe_current());
    const std::string name = toks_[cur_++].value;
    if (name == "set") {
      block.push_back(parse_set(pos));
    } else if (name == "if") {
      block.push_back(parse_if(pos));
      expect_end_statement("endif");
    } else if (name == "for") {
      block.push_back(parse_for(pos));
      expect_end_statement("endfor");
    } else if (name == "macro") {
      block.push_back(parse_macro(pos));
      expect_end_statement("endmacro");
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) template_error(pos, "'" + name + "' outside a for loop");
      expect(TokenType::kCloseStatement, ("after '" + name + "'").c_str());
      Stmt s{name == "break" ? StmtKind::kBreak : StmtKind::kContinue, pos, {}, {}, {}, {}, {}, {}, {}};
      block.push_back(std::move(s));
    } else if (name == "filter") {
      block.push_back(parse_filter_block(pos));
      expect_end_statement("endfilter");
    } else if (name == "generation" || name == "endgeneration") {
      // transformers' assistant-mask markers render nothing.
      expect(TokenType::kCloseStatement, ("after '" + name + "'").c_str());
    } else if (name == "elif" || name == "else" || name.rfind("end", 0) == 0) {
      template_error(pos, "unexpected '" + name + "' without a matching opening statement");
    } else {
      template_error(pos, "unsupported statement '" + name + "'");
    }
  }

  Stmt parse_set(SourcePos pos) {
    Stmt s{StmtKind::kSet, pos, {}, {}, {}, {}, {}, {}, {}};
    s.target = parse_expression_sequence(false);
    check_assign_target(*s.target);
    if (is(TokenType::kEquals)) {
      ++cur_;
      s.expr = parse_expression_sequence(false);
      expect(TokenType::kCloseStatement, "after 'set'");
    } else {
      expect(TokenType::kCloseStatement, "after 'set' target");
      s.kind = StmtKind::kSetBlock;
      s.body = parse_block({"endset"}, "set", pos);
      expect_end_statement("endset");
    }
    return s;
  }

  void check_assign_target(const Expr& target) const {
    if (target.kind == ExprKind::kName) return;
    if (target.kind == ExprKind::kAttribute && target.index < 0) return;
    if (target.kind == ExprKind::kTuple) {
      for (const auto& c : target.children) {
        if (c->kind != ExprKind::kName) template_error(c->pos, "can only unpack into plain names");
      }
      return;
    }
    template_error(target.pos, "cannot assign to this expression");
  }

  Stmt parse_if(SourcePos pos) {
    Stmt s{StmtKind::kIf, pos, {}, parse_expression(), {}, {}, {}, {}, {}};
    expect(TokenType::kCloseStatement, "after 'if' condition");
    s.body = parse_block({"elif", "else", "endif"}, "if", pos);
    if (is_statement({"elif"})) {
      const SourcePos elif_pos = toks_[cur_].pos;
      cur_ += 2;
      s.else_body.push_back(parse_if(elif_pos));
    } else if (is_statement({"else"})) {
      cur_ += 2;
      expect(TokenType::kCloseStatement, "after 'else'");
      s.else_body = parse_block({"endif"}, "if", pos);
    }
    return s;
  }

  Stmt parse_for(SourcePos pos) {
    Stmt s{StmtKind::kFor, pos, {}, {}, {}, {}, {}, {}, {}};
    s.target = parse_expression_sequence(true);
    if (s.target->kind != ExprKind::kName) check_assign_target(*s.target);
    if (s.target->kind == ExprKind::kAttribute) template_error(s.target->pos, "a loop variable must be a name");
    if (!is_name("in")) fail("expected 'in' after the loop variable, got " + describe_current());
    ++cur_;
    ExprPtr iterable = parse_expression();
    if (iterable->kind == ExprKind::kSelect) {  // for x in xs if cond
      s.loop_filter = std::move(iterable->children[0]);
      s.expr = std::move(iterable->children[1]);
    } else {
      s.expr = std::move(iterable);
    }
    if (is_name("recursive")) fail("recursive loops are not supported");
    expect(TokenType::kCloseStatement, "after 'for'");
    ++loop_depth_;
    s.body = parse_block({"endfor", "else"}, "for", pos);
    --loop_depth_;
    if (is_statement({"else"})) {
      cur_ += 2;
      expect(TokenType::kCloseStatement, "after 'else'");
      s.else_body = parse_block({"endfor"}, "for", pos);
    }
    return s;
  }

  Stmt parse_macro(SourcePos pos) {
    Stmt s{StmtKind::kMacro, pos, expect_name("after 'macro'"), {}, {}, {}, {}, {}, {}};
    expect(TokenType::kOpenParen, "after the macro name");
    while (!is(TokenType::kCloseParen)) {
      MacroParam param;
      param.name = expect_name("as a macro parameter");
      for (const auto& p : s.params) {
        if (p.name == param.name) fail("duplicate macro parameter '" + param.name + "'");
      }
      if (is(TokenType::kEquals)) {
        ++cur_;
        param.default_value = parse_expression();
      } else if (!s.params.empty() && s.params.back().default_value) {
        fail("macro parameter '" + param.name + "' without a default follows one with a default");
      }
      s.params.push_back(std::move(param));
      if (!is(TokenType::kComma)) break;
      ++cur_;
    }
    expect(TokenType::kCloseParen, "to close the macro parameters");
    expect(TokenType::kCloseStatement, "after the macro signature");
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro boundary
    s.body = parse_block({"endmacro"}, "macro", pos);
    loop_depth_ = saved_loop_depth;
    return s;
  }

  Stmt parse_filter_block(SourcePos pos) {
    Stmt s{StmtKind::kFilterBlock, pos, {}, parse_filter_call(nullptr, pos), {}, {}, {}, {}, {}};
    expect(TokenType::kCloseStatement, "after 'filter'");
    s.body = parse_block({"endfilter"}, "filter", pos);
    return s;
  }

  // --- expressions, loosest binding first ----------------------------------------------------
  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    ExprPtr value = parse_or();
    if (!is_name("if")) return value;
    const SourcePos pos = here();
    ++cur_;
    ExprPtr test = parse_or();
    if (is_name("else")) {
      ++cur_;
      auto e = make_expr(ExprKind::kTernary, pos);
      e->children.push_back(std::move(test));
      e->children.push_back(std::move(value));
      e->children.push_back(parse_expression());
      return e;
    }
    auto e = make_expr(ExprKind::kSelect, pos);
    e->children.push_back(std::move(test));
    e->children.push_back(std::move(value));
    return e;
  }

  // `a, b, c` (a tuple) or a single expression; for-loop targets parse primaries only.
  ExprPtr parse_expression_sequence(bool primary) {
    const SourcePos pos = here();
    ExprPtr first = primary ? parse_primary() : parse_expression();
    if (!is(TokenType::kComma)) return first;
    auto tuple = make_expr(ExprKind::kTuple, pos);
    tuple->children.push_back(std::move(first));
    while (is(TokenType::kComma)) {
      ++cur_;
      if (is(TokenType::kCloseParen) || is(TokenType::kEquals) || is_name("in")) break;
      tuple->children.push_back(primary ? parse_primary() : parse_expression());
    }
    return tuple;
  }

  ExprPtr binary(BinaryOp op, SourcePos pos, ExprPtr left, ExprPtr right) {
    auto e = make_expr(ExprKind::kBinary, pos);
    e->op = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const SourcePos pos = here();
      ++cur_;
      left = binary(BinaryOp::kOr, pos, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const SourcePos pos = here();
      ++cur_;
      left = binary(BinaryOp::kAnd, pos, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (!is_name("not")) return parse_comparison();
    DepthGuard guard(*this);
    auto e = make_expr(ExprKind::kUnary, here());
    ++cur_;
    e->name = "not";
    e->children.push_back(parse_not());
    return e;
  }

  ExprPtr parse_comparison() {
    ExprPtr left = parse_additive();
    while (true) {
      const SourcePos pos = here();
      BinaryOp op;
      if (is_name("not") && is_name("in", 1)) {
        op = BinaryOp::kNotIn;
        cur_ += 2;
      } else if (is_name("in")) {
        op = BinaryOp::kIn;
        ++cur_;
      } else if (is(TokenType::kComparison)) {
        const std::string& v = toks_[cur_++].value;
        op = v == "==" ? BinaryOp::kEq : v == "!=" ? BinaryOp::kNe : v == "<" ? BinaryOp::kLt
           : v == ">" ? BinaryOp::kGt : v == "<=" ? BinaryOp::kLe : BinaryOp::kGe;
      } else {
        return left;
      }
      left = binary(op, pos, std::move(left), parse_additive());
    }
  }

  ExprPtr parse_additive() {
    ExprPtr left = parse_multiplicative();
    while (is(TokenType::kAdditive)) {
      const SourcePos pos = here();
      const char c = toks_[cur_++].value[0];
      const BinaryOp op = c == '+' ? BinaryOp::kAdd : c == '-' ? BinaryOp::kSub : BinaryOp::kConcat;
      left = binary(op, pos, std::move(left), parse_multiplicative());
    }
    return left;
  }

  ExprPtr parse_multiplicative() {
    ExprPtr left = parse_power();
    while (is(TokenType::kMultiplicative)) {
      const SourcePos pos = here();
      const std::string& v = toks_[cur_++].value;
      const BinaryOp op = v == "*" ? BinaryOp::kMul : v == "/" ? BinaryOp::kDiv
                        : v == "//" ? BinaryOp::kFloorDiv : BinaryOp::kMod;
      left = binary(op, pos, std::move(left), parse_power());
    }
    return left;
  }

  ExprPtr parse_power() {
    ExprPtr left = parse_test();
    while (is(TokenType::kPower)) {  // left-associative, as in Jinja
      const SourcePos pos = here();
      ++cur_;
      left = binary(BinaryOp::kPow, pos, std::move(left), parse_test());
    }
    return left;
  }

  ExprPtr parse_test() {
    ExprPtr operand = parse_filter();
    while (is_name("is")) {
      auto e = make_expr(ExprKind::kTest, here());
      ++cur_;
      if (is_name("not")) {
        e->negate = true;
        ++cur_;
      }
      const SourcePos name_pos = here();
      e->name = expect_name("after 'is'");
      if (!is_known_test(e->name)) template_error(name_pos, "unknown test '" + e->name + "'");
      if (is(TokenType::kOpenParen)) e->args = parse_args();
      e->children.push_back(std::move(operand));
      operand = std::move(e);
    }
    return operand;
  }

  ExprPtr parse_filter_call(ExprPtr operand, SourcePos pos) {
    auto e = make_expr(ExprKind::kFilter, pos);
    const SourcePos name_pos = here();
    e->name = expect_name("as a filter name");
    if (!is_known_filter(e->name)) template_error(name_pos, "unknown filter '" + e->name + "'");
    if (is(TokenType::kOpenParen)) e->args = parse_args();
    e->children.push_back(std::move(operand));
    return e;
  }

  ExprPtr parse_filter() {
    ExprPtr operand = parse_unary();
    while (is(TokenType::kPipe)) {
      const SourcePos pos = here();
      ++cur_;
      operand = parse_filter_call(std::move(operand), pos);
    }
    return operand;
  }

  ExprPtr parse_unary() {
    const Token* t = peek();
    if (t != nullptr && (t->type == TokenType::kUnary || t->type == TokenType::kAdditive) &&
        (t->value == "-" || t->value == "+")) {
      DepthGuard guard(*this);
      auto e = make_expr(ExprKind::kUnary, t->pos);
      e->name = t->value;
      ++cur_;
      e->children.push_back(parse_unary());
      return e;
    }
    return parse_postfix(parse_primary());
  }

  ExprPtr parse_postfix(ExprPtr object) {
    while (true) {
      const SourcePos pos = here();
      if (is(TokenType::kDot)) {
        ++cur_;
        auto e = make_expr(ExprKind::kAttribute, pos);
        if (is(TokenType::kNumber) && toks_[cur_].value.find_first_not_of("0123456789") == std::string::npos) {
          e->name = toks_[cur_++].value;
          e->index = parse_int(e->name, pos);
        } else {
          e->name = expect_name("after '.'");
        }
        e->children.push_back(std::move(object));
        object = std::move(e);
      } else if (is(TokenType::kOpenBracket)) {
        ++cur_;
        object = parse_subscript(std::move(object), pos);
      } else if (is(TokenType::kOpenParen)) {
        auto e = make_expr(ExprKind::kCall, pos);
        e->args = parse_args();
        e->children.push_back(std::move(object));
        object = std::move(e);
      } else {
        return object;
      }
    }
  }

  // After '[': a subscript `[i]` or a slice `[a:b:c]` with any part omitted.
  ExprPtr parse_subscript(ExprPtr object, SourcePos pos) {
    DepthGuard guard(*this);
    std::vector<ExprPtr> parts;
    bool is_slice = false;
    while (!is(TokenType::kCloseBracket)) {
      if (at_end()) fail("expected ']'");
      if (is(TokenType::kColon)) {
        parts.push_back(nullptr);
        ++cur_;
        is_slice = true;
      } else {
        parts.push_back(parse_expression());
        if (is(TokenType::kColon)) {
          ++cur_;
          is_slice = true;
        } else if (!is(TokenType::kCloseBracket)) {
          fail("expected ']' or ':' in subscript, got " + describe_current());
        }
      }
    }
    ++cur_;  // ]
    if (parts.empty()) template_error(pos, "empty subscript []");
    if (parts.size() > 3) template_error(pos, "a slice takes at most 3 parts");
    auto e = make_expr(is_slice ? ExprKind::kSlice : ExprKind::kSubscript, pos);
    e->children.push_back(std::move(object));
    if (!is_slice) {
      e->children.push_back(std::move(parts[0]));
      return e;
    }
    parts.resize(3);
    for (auto& p : parts) e->children.push_back(std::move(p));
    return e;
  }

  Args parse_args() {
    DepthGuard guard(*this);
    Args args;
    expect(TokenType::kOpenParen, "");
    while (!is(TokenType::kCloseParen)) {
      if (is(TokenType::kPower) || (is(TokenType::kMultiplicative) && toks_[cur_].value == "*")) {
        fail("argument unpacking (* / **) is not supported");
      }
      if (is(TokenType::kIdentifier) && is(TokenType::kEquals, 1)) {
        std::string name = toks_[cur_].value;
        for (const auto& [k, v] : args.keyword) {
          if (k == name) fail("keyword argument '" + name + "' given twice");
        }
        cur_ += 2;
        args.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!args.keyword.empty()) fail("positional argument after keyword arguments");
        args.positional.push_back(parse_expression());
      }
      if (!is(TokenType::kComma)) break;
      ++cur_;
    }
    expect(TokenType::kCloseParen, "to close the argument list");
    return args;
  }

  int64_t parse_int(const std::string& text, SourcePos pos) const {
    int64_t v = 0;
    const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    if (res.ec != std::errc() || res.ptr != text.data() + text.size()) {
      template_error(pos, "integer literal '" + text + "' is out of range");
    }
    return v;
  }

  ExprPtr parse_primary() {
    if (at_end()) fail("unexpected end of template in an expression");
    const Token& t = toks_[cur_++];
    switch (t.type) {
      case TokenType::kNumber: {
        auto e = make_expr(ExprKind::kLiteral, t.pos);
        if (t.value.find('.') != std::string::npos) {
          e->literal = Value(std::strtod(t.value.c_str(), nullptr));
        } else {
          // from_chars does not accept a leading '+'.
          e->literal = Value(parse_int(t.value[0] == '+' ? t.value.substr(1) : t.value, t.pos));
        }
        return e;
      }
      case TokenType::kString: {
        std::string value = t.value;
        while (is(TokenType::kString)) value += toks_[cur_++].value;  // 'a' 'b' == 'ab'
        auto e = make_expr(ExprKind::kLiteral, t.pos);
        e->literal = Value(std::move(value));
        return e;
      }
      case TokenType::kIdentifier: {
        auto e = make_expr(ExprKind::kLiteral, t.pos);
        if (t.value == "true" || t.value == "True") {
          e->literal = Value(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::null();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.value;
        }
        return e;
      }
      case TokenType::kOpenParen: {
        DepthGuard guard(*this);
        ExprPtr e = parse_expression_sequence(false);
        expect(TokenType::kCloseParen, "to close '('");
        return e;
      }
      case TokenType::kOpenBracket: return parse_list(t.pos);
      case TokenType::kOpenBrace: return parse_dict(t.pos);
      default:
        --cur_;
        fail("unexpected " + describe_current() + " in an expression");
    }
  }

  ExprPtr parse_list(SourcePos pos) {
    DepthGuard guard(*this);
    auto e = make_expr(ExprKind::kList, pos);
    while (!is(TokenType::kCloseBracket)) {
      e->children.push_back(parse_expression());
      if (!is(TokenType::kComma)) break;
      ++cur_;
    }
    expect(TokenType::kCloseBracket, "to close the list");
    return e;
  }

  ExprPtr parse_dict(SourcePos pos) {
    DepthGuard guard(*this);
    auto e = make_expr(ExprKind::kDict, pos);
    while (!is(TokenType::kCloseBrace)) {
      e->children.push_back(parse_expression());
      expect(TokenType::kColon, "between a dict key and its value");
      e->children.push_back(parse_expression());
      if (!is(TokenType::kComma)) break;
      ++cur_;
    }
    expect(TokenType::kCloseBrace, "to close the dict");
    return e;
  }

  std::vector<Token> toks_;
  size_t cur_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Program parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace pagellm::tok::jinja
