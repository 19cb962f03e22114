#include "structured/compiler.h"

#include "common/error.h"
#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace pagellm::structured {
namespace {

void check_size(size_t size, const char* what, const Limits& limits) {
  if (size > limits.max_spec_bytes) {
    invalid_argument(std::string("structured output: ") + what + " larger than " +
                     std::to_string(limits.max_spec_bytes) + " bytes (limit)");
  }
}

std::string cache_key(const StructuredOutputs& spec) {
  // Appends only (GCC 12 warns falsely on "literal" + std::string&&).
  std::string key;
  auto with = [&key](const char* kind, const std::string& text) {
    key.append(kind).append(1, '\n').append(text);
    return key;
  };
  if (spec.json) return with("json", *spec.json);
  if (spec.json_object) return with("json_object", "");
  if (spec.regex) return with("regex", *spec.regex);
  if (spec.grammar) return with("grammar", *spec.grammar);
  key = "choice";
  for (const std::string& c : *spec.choice) key.append(1, '\n').append(std::to_string(c.size())).append(1, ':').append(c);
  return key;
}

}  // namespace

Grammar build_grammar(const StructuredOutputs& spec, const Limits& limits) {
  if (spec.num_set() != 1) {
    invalid_argument("structured output: exactly one of json, json_object, regex, choice, grammar must be set");
  }
  Deadline deadline(limits.max_compile_ms);
  GrammarBuilder b(limits, deadline);
  int32_t root = -1;
  if (spec.json) {
    check_size(spec.json->size(), "JSON schema", limits);
    nlohmann::ordered_json schema;  // ordered: properties are emitted in declared order
    try {
      schema = nlohmann::ordered_json::parse(*spec.json);
    } catch (const nlohmann::ordered_json::exception& e) {
      invalid_argument(std::string("json schema: not valid JSON: ") + e.what());
    }
    root = compile_json_schema(schema, b);
  } else if (spec.json_object) {
    root = compile_any_json_object(b);
  } else if (spec.regex) {
    check_size(spec.regex->size(), "regex", limits);
    root = b.rule("root");
    b.define(root, compile_regex(*spec.regex, b));
  } else if (spec.grammar) {
    check_size(spec.grammar->size(), "grammar", limits);
    root = compile_gbnf(*spec.grammar, b);
  } else {
    const std::vector<std::string>& choices = *spec.choice;
    if (choices.empty()) invalid_argument("structured output: choice must list at least one string");
    if (choices.size() > limits.max_enum) {
      invalid_argument("structured output: more than " + std::to_string(limits.max_enum) + " choices (limit)");
    }
    size_t total = 0;
    std::vector<ExprPtr> alts;
    for (const std::string& c : choices) {
      total += c.size();
      alts.push_back(literal(c));
    }
    check_size(total, "choice list", limits);
    root = b.rule("root");
    b.define(root, alt(std::move(alts)));
  }
  return b.build(root);
}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const tok::Tokenizer> tokenizer, std::vector<int32_t> eos_ids,
                                 size_t vocab_size, Limits limits, size_t capacity)
    : tokenizer_(std::move(tokenizer)), eos_ids_(std::move(eos_ids)), vocab_size_(vocab_size),
      limits_(limits), capacity_(capacity) {}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const Vocab> vocab, Limits limits, size_t capacity)
    : limits_(limits), capacity_(capacity), vocab_(std::move(vocab)) {}

std::shared_ptr<const Vocab> GrammarCompiler::vocab() {
  std::lock_guard lock(mutex_);
  if (!vocab_) vocab_ = Vocab::from_tokenizer(*tokenizer_, eos_ids_, vocab_size_);
  return vocab_;
}

size_t GrammarCompiler::num_cached() const {
  std::lock_guard lock(mutex_);
  return cache_.size();
}

std::shared_ptr<CompiledGrammar> GrammarCompiler::compile(const StructuredOutputs& spec) {
  const std::string key = cache_key(spec);
  {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  // Compiled outside the lock: a slow compile never holds up a cached one.
  auto grammar = std::make_shared<const Grammar>(build_grammar(spec, limits_));
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar), vocab());
  std::lock_guard lock(mutex_);
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.first;  // another thread got there first
  lru_.push_front(key);
  cache_.emplace(key, std::make_pair(compiled, lru_.begin()));
  while (cache_.size() > capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return compiled;
}

}  // namespace pagellm::structured
