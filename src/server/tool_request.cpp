// The tool fields of a chat request: `tools`, `tool_choice`, `parallel_tool_calls`, the tool calls
// of assistant messages fed back, and the JSON schema that tool_choice "required" or a named
// function constrains the output to.
#include <string>

#include "server/openai_protocol.h"

namespace pagellm::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr size_t kMaxTools = 128;  // OpenAI's limit

// OpenAI's rule for function names: ^[a-zA-Z0-9_-]{1,64}$.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

void check_tool(const json& tool, size_t i) {
  const std::string param = "tools[" + std::to_string(i) + "]";
  if (!tool.is_object()) throw_bad_request("'" + param + "' must be an object", param);
  auto type = tool.find("type");
  if (type != tool.end() && !(type->is_string() && *type == "function")) {
    throw_bad_request("'" + param + ".type' must be \"function\"", param);
  }
  auto fn = tool.find("function");
  if (fn == tool.end() || !fn->is_object()) {
    throw_bad_request("'" + param + ".function' must be an object with a 'name'", param);
  }
  auto name = fn->find("name");
  if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>())) {
    throw_bad_request("'" + param + ".function.name' must be 1 to 64 letters, digits, '_' or '-'",
                      param);
  }
  auto desc = fn->find("description");
  if (desc != fn->end() && !desc->is_null() && !desc->is_string()) {
    throw_bad_request("'" + param + ".function.description' must be a string", param);
  }
  auto params = fn->find("parameters");
  if (params != fn->end() && !params->is_null() && !params->is_object()) {
    throw_bad_request("'" + param + ".function.parameters' must be a JSON schema object", param);
  }
}

std::string function_name(const json& tool) { return tool["function"]["name"].get<std::string>(); }

void parse_tool_choice(const json& v, ChatRequest& r) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "none")
      r.tool_choice = ToolChoice::kNone;
    else if (s == "auto")
      r.tool_choice = ToolChoice::kAuto;
    else if (s == "required")
      r.tool_choice = ToolChoice::kRequired;
    else
      throw_bad_request(
          "'tool_choice' must be none, auto, required or a named function, got '" + s + "'",
          "tool_choice");
    return;
  }
  auto fn = v.is_object() ? v.find("function") : v.end();
  auto type = v.is_object() ? v.find("type") : v.end();
  if (!v.is_object() || type == v.end() || *type != "function" || fn == v.end() ||
      !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
    throw_bad_request(
        "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}",
        "tool_choice");
  }
  r.tool_choice = ToolChoice::kNamed;
  r.tool_choice_name = (*fn)["name"].get<std::string>();
}

// Moves a tool schema's local definitions ($defs, definitions) to the root of the combined schema,
// where its "#/$defs/..." references then point. Two tools defining one name differently: a 400.
void hoist_definitions(ordered_json& schema, ordered_json& root, const std::string& param) {
  for (const char* key : {"$defs", "definitions"}) {
    auto it = schema.find(key);
    if (it == schema.end()) continue;
    if (!it->is_object()) throw_bad_request("'" + param + "." + key + "' must be an object", param);
    for (auto& [name, def] : it->items()) {
      ordered_json& slot = root[key][name];
      if (!slot.is_null() && slot != def) {
        throw_bad_request("tool_choice \"required\": two tools define '" + std::string(key) + "/" +
                              name + "' differently; give the definitions distinct names",
                          param);
      }
      slot = def;
    }
    schema.erase(it);
  }
}

ordered_json parameters_of(const ordered_json& tool) {
  const ordered_json& fn = tool["function"];
  auto it = fn.find("parameters");
  if (it == fn.end() || it->is_null())
    return ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
  return *it;
}

}  // namespace

void parse_tools(const json& body, ChatRequest& r) {
  auto tools = body.find("tools");
  const bool have_tools = tools != body.end() && !tools->is_null();
  if (have_tools) {
    if (!tools->is_array()) throw_bad_request("'tools' must be a list", "tools");
    if (tools->size() > kMaxTools)
      throw_bad_request("'tools' may hold at most 128 functions", "tools");
    for (size_t i = 0; i < tools->size(); ++i) check_tool((*tools)[i], i);
    r.tools = *tools;
    r.template_kwargs["tools"] = *tools;
  }
  auto choice = body.find("tool_choice");
  if (choice == body.end() || choice->is_null()) {
    r.tool_choice =
        have_tools && !r.tools.empty() ? ToolChoice::kAuto : ToolChoice::kNone;  // OpenAI's default
  } else {
    parse_tool_choice(*choice, r);
    if (r.tool_choice != ToolChoice::kNone && r.tools.empty()) {
      throw_bad_request("'tool_choice' other than \"none\" needs 'tools'", "tool_choice");
    }
  }
  if (r.tool_choice == ToolChoice::kNamed) {
    bool found = false;
    for (const json& tool : r.tools) found = found || function_name(tool) == r.tool_choice_name;
    if (!found) {
      throw_bad_request(
          "'tool_choice' names function '" + r.tool_choice_name + "', which is not among the tools",
          "tool_choice");
    }
  }
  if (auto v = body.find("parallel_tool_calls"); v != body.end() && !v->is_null()) {
    if (!v->is_boolean())
      throw_bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    r.parallel_tool_calls = v->get<bool>();
  }
}

void normalise_tool_calls(json& msg, const std::string& prefix) {
  auto calls = msg.find("tool_calls");
  if (calls == msg.end() || calls->is_null()) return;
  const std::string param = prefix + ".tool_calls";
  if (!calls->is_array()) throw_bad_request("'" + param + "' must be a list", param);
  // A tool-calling turn's null content reaches the template as "" (as vLLM passes it): templates
  // such as Qwen3's test it with `in`, which fails on none.
  if (!calls->empty() && msg["content"].is_null()) msg["content"] = "";
  for (size_t j = 0; j < calls->size(); ++j) {
    json& call = (*calls)[j];
    const std::string at = param + "[" + std::to_string(j) + "]";
    auto fn = call.is_object() ? call.find("function") : call.end();
    if (fn == call.end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string()) {
      throw_bad_request(
          "'" + at +
              "' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
          at);
    }
    // Templates read the arguments as an object (tojson, items()); OpenAI sends them as JSON text.
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) continue;
    if (!args->is_string()) continue;
    json parsed = json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded())
      throw_bad_request("'" + at + ".function.arguments' must be JSON text", at);
    *args = std::move(parsed);
  }
}

std::string tool_choice_schema(const ChatRequest& r, std::string_view raw_body) {
  // The raw body again, as ordered_json: a schema's properties are generated in declared order.
  ordered_json body = ordered_json::parse(raw_body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.contains("tools") || !body["tools"].is_array()) {
    body = ordered_json::parse(json{{"tools", r.tools}}.dump());
  }
  const ordered_json& tools = body["tools"];
  if (r.tool_choice == ToolChoice::kNamed) {
    for (const ordered_json& tool : tools) {
      if (tool["function"]["name"] == r.tool_choice_name) return parameters_of(tool).dump();
    }
  }
  // "required": [{"name": <one of the tools>, "parameters": <its schema>}, ...], at least one.
  ordered_json root = {{"type", "array"}, {"minItems", 1}};
  if (!r.parallel_tool_calls) root["maxItems"] = 1;
  ordered_json any_of = ordered_json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    ordered_json params = parameters_of(tools[i]);
    if (params.is_object())
      hoist_definitions(params, root, "tools[" + std::to_string(i) + "].function.parameters");
    ordered_json call = {
        {"type", "object"},
        {"properties",
         {{"name",
           {{"type", "string"}, {"enum", ordered_json::array({tools[i]["function"]["name"]})}}},
          {"parameters", std::move(params)}}},
        {"required", {"name", "parameters"}}};
    any_of.push_back(std::move(call));
  }
  root["items"] = {{"anyOf", std::move(any_of)}};
  return root.dump();
}

}  // namespace pagellm::server
