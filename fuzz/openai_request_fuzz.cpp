// Fuzzes the OpenAI request parser/validator: arbitrary bytes → parse_json_object → completion,
// chat, tokenize and detokenize parsing. Only ApiError may escape the parser; anything else
// (another exception, a crash, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pagellm::server;
  const ProtocolLimits limits;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  nlohmann::json json;
  try {
    json = parse_json_object(body, limits);
  } catch (const ApiError&) {
    return 0;
  }
  auto attempt = [&](auto&& fn) {
    try {
      fn();
    } catch (const ApiError& e) {
      // Every rejection is a client error with a message.
      if (e.status != 400 || std::string_view(e.what()).empty()) __builtin_trap();
      (void)dump_json(error_body(e));
    }
  };
  attempt([&] {
    auto r = parse_completion_request(json, limits);
    if (r.prompts.empty() || r.params.n < 1 || r.params.n > limits.max_n) __builtin_trap();
  });
  attempt([&] {
    auto r = parse_chat_request(json, limits);
    if (r.messages.empty()) __builtin_trap();
  });
  attempt([&] { parse_tokenize_request(json, limits); });
  attempt([&] { parse_detokenize_request(json); });
  return 0;
}
