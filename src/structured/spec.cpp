// Structured-output specs → grammars (no vocabulary): the front end every compile goes through.
#include "common/error.h"
#include "structured/compiler.h"
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

}  // namespace

Grammar build_grammar(const StructuredOutputs& spec, const Limits& limits) {
  if (spec.num_set() != 1) {
    invalid_argument(
        "structured output: exactly one of json, json_object, regex, choice, grammar must be set");
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
    if (choices.empty())
      invalid_argument("structured output: choice must list at least one string");
    if (choices.size() > limits.max_enum) {
      invalid_argument("structured output: more than " + std::to_string(limits.max_enum) +
                       " choices (limit)");
    }
    size_t total = 0;
    for (const std::string& c : choices) total += c.size();
    check_size(total, "choice list", limits);
    root = b.rule("root");
    b.define(root, literal_set(choices));
  }
  return b.build(root);
}

}  // namespace pagellm::structured
