// Fuzzes loading tokenizer.json (+ tokenizer_config.json): any input either loads or throws
// pagellm::Error; a loaded tokenizer then encodes and decodes a fixed text without crashing. Also
// checks the fast tokenizer.json scanner against the SAX loader.
// Input: the tokenizer.json text, optionally followed by "\n\x00\n" and the tokenizer_config.json text.
#include <cstddef>
#include <cstdint>
#include <string>

#include <cstdio>
#include <cstdlib>

#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string separator("\n\0\n", 3);
  const size_t split = input.find(separator);
  const std::string tokenizer_json = input.substr(0, split);
  const std::string config = split == std::string::npos ? "" : input.substr(split + separator.size());
  // Differential: whenever the fast scanner accepts a file, the validating SAX loader must accept it
  // too and produce the same result.
  pagellm::tok::TokenizerJson fast;
  if (pagellm::tok::parse_tokenizer_json_fast(tokenizer_json, fast)) {
    try {
      if (!(pagellm::tok::parse_tokenizer_json_sax(tokenizer_json, "fuzz") == fast)) {
        std::fprintf(stderr, "tokenizer_json_fuzz: fast and SAX loaders disagree\n");
        std::abort();
      }
    } catch (const pagellm::Error& e) {
      std::fprintf(stderr, "tokenizer_json_fuzz: fast loader accepted what SAX rejects: %s\n", e.what());
      std::abort();
    }
  }
  try {
    const auto t = pagellm::tok::Tokenizer::from_json(tokenizer_json, config, "fuzz");
    const auto ids = t->encode("Hello, world! <s> \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\xA4\x97 12345\n\n  x", true);
    t->decode(ids, false);
    t->decode(ids, true);
  } catch (const pagellm::Error&) {
  }
  return 0;
}
