// Fuzzes loading tokenizer.json (+ tokenizer_config.json): any input either loads or throws
// pagellm::Error; a loaded tokenizer then encodes and decodes a fixed text without crashing.
// Input: the tokenizer.json text, optionally followed by "\n\x00\n" and the tokenizer_config.json text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string separator("\n\0\n", 3);
  const size_t split = input.find(separator);
  const std::string tokenizer_json = input.substr(0, split);
  const std::string config = split == std::string::npos ? "" : input.substr(split + separator.size());
  try {
    const auto t = pagellm::tok::Tokenizer::from_json(tokenizer_json, config, "fuzz");
    const auto ids = t->encode("Hello, world! <s> \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\xA4\x97 12345\n\n  x", true);
    t->decode(ids, false);
    t->decode(ids, true);
  } catch (const pagellm::Error&) {
  }
  return 0;
}
