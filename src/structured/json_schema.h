// JSON Schema → grammar. Supported: type (one or a list), object (properties in declared order,
// required, additionalProperties true/false/schema; unspecified means none, as in OpenAI strict
// mode), array (items, minItems, maxItems), string (minLength, maxLength, pattern, a few formats),
// number / integer (integers: exact minimum / maximum / exclusive bounds; numbers: the sign only),
// boolean, null, enum, const, anyOf / oneOf (as alternatives), single-entry allOf, local $ref ("#",
// "#/$defs/..", "#/definitions/..", recursion allowed). Output is compact JSON with at most one
// space between tokens, so a generation can never run on in whitespace.
#pragma once

#include <nlohmann/json.hpp>

#include "structured/grammar.h"

namespace pagellm::structured {

// Defines the rules for `schema` in `builder`; returns the root rule. Throws kInvalidArgument with
// the JSON pointer of the offending subschema.
int32_t compile_json_schema(const nlohmann::ordered_json& schema, GrammarBuilder& builder);
// Any JSON object (response_format json_object).
int32_t compile_any_json_object(GrammarBuilder& builder);

}  // namespace pagellm::structured
