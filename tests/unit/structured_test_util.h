// Shared by the structured-output unit tests: the trained test models' vocabularies, request specs
// of each kind, and a mask bit.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"

namespace pagellm::structured::test {

inline const std::string kPycode = std::string(PAGELLM_SHARED_DIR) + "/models/pycode-25M";
inline const std::string kStories = std::string(PAGELLM_SHARED_DIR) + "/models/stories260K";

inline std::shared_ptr<const Vocab> load_vocab(const std::string& dir) {
  auto tok = tok::Tokenizer::from_dir(dir);
  return Vocab::from_tokenizer(*tok, {*tok->eos_token_id()}, size_t(tok->vocab_size()));
}

// pycode-25M's vocabulary, loaded once per test binary.
inline const std::shared_ptr<const Vocab>& pycode_vocab() {
  static const auto v = load_vocab(kPycode);
  return v;
}

inline bool bit(std::span<const uint32_t> mask, int32_t t) {
  return (mask[size_t(t) / 32] >> (t % 32)) & 1;
}

inline StructuredOutputs json_spec(const std::string& schema) {
  StructuredOutputs s;
  s.json = schema;
  return s;
}
inline StructuredOutputs regex_spec(const std::string& re) {
  StructuredOutputs s;
  s.regex = re;
  return s;
}
inline StructuredOutputs grammar_spec(const std::string& grammar) {
  StructuredOutputs s;
  s.grammar = grammar;
  return s;
}

}  // namespace pagellm::structured::test
