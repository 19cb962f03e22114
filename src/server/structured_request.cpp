// The structured-output fields of a generation request: OpenAI's response_format, vLLM's
// structured_outputs object and its older guided_* fields. They all become one StructuredOutputs;
// asking for two different constraints is a 400. Compiling (and rejecting a bad schema, regex or
// grammar) is the engine's job.
#include <functional>
#include <string>
#include <vector>

#include "server/openai_protocol.h"

namespace pagellm::server {
namespace {

// Everything below is a template over the JSON type: requests are parsed into nlohmann::json
// (sorted keys), and restore_schema_order parses a schema-carrying body again as ordered_json.

// A schema given as an object / boolean, or as JSON text.
template <typename Json>
std::string schema_text(const Json& v, const std::string& param) {
  if (v.is_string()) return v.template get<std::string>();
  if (v.is_object() || v.is_boolean())
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
  throw_bad_request("'" + param + "' must be a JSON schema (an object)", param);
}

template <typename Json>
std::string string_field(const Json& v, const std::string& param) {
  if (!v.is_string()) throw_bad_request("'" + param + "' must be a string", param);
  return v.template get<std::string>();
}

template <typename Json>
std::vector<std::string> choices(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty())
    throw_bad_request("'" + param + "' must be a non-empty list of strings", param);
  std::vector<std::string> out;
  for (const Json& c : v) {
    if (!c.is_string())
      throw_bad_request("'" + param + "' must be a non-empty list of strings", param);
    out.push_back(c.template get<std::string>());
  }
  return out;
}

struct Collected {
  StructuredOutputs spec;
  std::string first_param;  // the field that set it

  void set(const std::string& param, const std::function<void(StructuredOutputs&)>& apply) {
    StructuredOutputs next;
    apply(next);
    if (!first_param.empty()) {
      throw_bad_request("'" + param + "' conflicts with '" + first_param +
                            "': a request may ask for one structured output constraint",
                        param);
    }
    spec = std::move(next);
    first_param = param;
  }
};

template <typename Json>
const Json* present(const Json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

template <typename Json>
void parse_response_format(const Json& rf, Collected& out) {
  if (!rf.is_object()) throw_bad_request("'response_format' must be an object", "response_format");
  const Json* type = present(rf, "type");
  if (!type || !type->is_string()) {
    throw_bad_request("'response_format.type' must be one of text, json_object, json_schema",
                      "response_format");
  }
  const std::string t = type->template get<std::string>();
  if (t == "text") return;
  if (t == "json_object") {
    out.set("response_format", [](StructuredOutputs& s) { s.json_object = true; });
    return;
  }
  if (t != "json_schema") {
    throw_bad_request(
        "'response_format.type' must be one of text, json_object, json_schema, got '" + t + "'",
        "response_format");
  }
  const Json* js = present(rf, "json_schema");
  if (!js || !js->is_object()) {
    throw_bad_request("'response_format.json_schema' must be an object with a 'schema'",
                      "response_format");
  }
  const Json* schema = present(*js, "schema");
  if (!schema)
    throw_bad_request("'response_format.json_schema.schema' is required", "response_format");
  const std::string text = schema_text(*schema, "response_format.json_schema.schema");
  out.set("response_format", [&](StructuredOutputs& s) { s.json = text; });
}

template <typename Json>
void parse_structured_object(const Json& so, Collected& out) {
  if (!so.is_object())
    throw_bad_request("'structured_outputs' must be an object", "structured_outputs");
  if (const Json* v = present(so, "json")) {
    const std::string text = schema_text(*v, "structured_outputs.json");
    out.set("structured_outputs.json", [&](StructuredOutputs& s) { s.json = text; });
  }
  if (const Json* v = present(so, "json_object")) {
    if (!v->is_boolean())
      throw_bad_request("'structured_outputs.json_object' must be a boolean", "structured_outputs");
    if (v->template get<bool>())
      out.set("structured_outputs.json_object", [](StructuredOutputs& s) { s.json_object = true; });
  }
  if (const Json* v = present(so, "regex")) {
    const std::string re = string_field(*v, "structured_outputs.regex");
    out.set("structured_outputs.regex", [&](StructuredOutputs& s) { s.regex = re; });
  }
  if (const Json* v = present(so, "choice")) {
    auto list = choices(*v, "structured_outputs.choice");
    out.set("structured_outputs.choice", [&](StructuredOutputs& s) { s.choice = list; });
  }
  if (const Json* v = present(so, "grammar")) {
    const std::string g = string_field(*v, "structured_outputs.grammar");
    out.set("structured_outputs.grammar", [&](StructuredOutputs& s) { s.grammar = g; });
  }
}

template <typename Json>
std::optional<StructuredOutputs> parse_any(const Json& body) {
  Collected out;
  if (const Json* v = present(body, "response_format")) parse_response_format(*v, out);
  if (const Json* v = present(body, "structured_outputs")) parse_structured_object(*v, out);
  if (const Json* v = present(body, "guided_json")) {
    const std::string text = schema_text(*v, "guided_json");
    out.set("guided_json", [&](StructuredOutputs& s) { s.json = text; });
  }
  if (const Json* v = present(body, "guided_regex")) {
    const std::string re = string_field(*v, "guided_regex");
    out.set("guided_regex", [&](StructuredOutputs& s) { s.regex = re; });
  }
  if (const Json* v = present(body, "guided_choice")) {
    auto list = choices(*v, "guided_choice");
    out.set("guided_choice", [&](StructuredOutputs& s) { s.choice = list; });
  }
  if (const Json* v = present(body, "guided_grammar")) {
    const std::string g = string_field(*v, "guided_grammar");
    out.set("guided_grammar", [&](StructuredOutputs& s) { s.grammar = g; });
  }
  if (out.first_param.empty()) return std::nullopt;
  return out.spec;
}

}  // namespace

std::optional<StructuredOutputs> parse_structured_outputs(const nlohmann::json& body) {
  return parse_any(body);
}

void restore_schema_order(SamplingParams& params, std::string_view raw_body) {
  if (!params.structured_outputs || !params.structured_outputs->json) return;
  const auto body = nlohmann::ordered_json::parse(raw_body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) return;
  if (auto spec = parse_any(body); spec && spec->json)
    params.structured_outputs->json = std::move(spec->json);
}

}  // namespace pagellm::server
