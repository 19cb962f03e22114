// libFuzzer target for chat templates: arbitrary bytes are parsed as a template and, when they parse,
// rendered on a small fixed conversation (system/user/assistant turns, a tool call and a tool result,
// tool definitions) under small budgets. Any outcome but success or pagellm::Error is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_interpreter.h"

namespace {

const nlohmann::ordered_json& fuzz_context() {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? é 👋"},
      {"role": "assistant", "content": "<think>\nlook it up\n</think>\n\n", "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"temp\": 21}"},
      {"role": "assistant", "content": "21 C", "reasoning_content": "from the tool"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>"
  })");
  return context;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagellm::tok::jinja::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 200'000;
  limits.max_work_bytes = 1 << 22;
  try {
    const pagellm::tok::ChatTemplate chat_template(std::string(reinterpret_cast<const char*>(data), size));
    chat_template.render(fuzz_context(), limits);
  } catch (const pagellm::Error&) {
    // Rejected templates and template errors are the expected outcome for most inputs.
  }
  return 0;
}
