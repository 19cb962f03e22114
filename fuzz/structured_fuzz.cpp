// Fuzzes the structured-output compilers: the first byte picks JSON schema, regex, GBNF grammar or
// choice list; the rest is the spec. A compile either fails with kInvalidArgument (a message, no
// crash) or yields a grammar whose automaton can then be driven over the input bytes without
// exceeding its limits. Small limits keep each run fast.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"
#include "structured/automaton.h"
#include "structured/compiler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pagellm;
  using namespace pagellm::structured;
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  StructuredOutputs spec;
  switch (data[0] % 4) {
    case 0:
      spec.json = text;
      break;
    case 1:
      spec.regex = text;
      break;
    case 2:
      spec.grammar = text;
      break;
    default: {
      std::vector<std::string> choices;
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i) {
        if (i == text.size() || text[i] == '\n')
          choices.push_back(text.substr(start, i - start)), start = i + 1;
      }
      spec.choice = choices;
    }
  }
  Limits limits;
  limits.max_elements = 20000;
  limits.max_rules = 5000;
  limits.max_repeat = 200;
  limits.max_compile_ms = 500;
  std::shared_ptr<const Grammar> grammar;
  try {
    grammar = std::make_shared<const Grammar>(build_grammar(spec, limits));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument || std::string(e.what()).empty()) __builtin_trap();
    return 0;
  }
  // Drive the automaton over the spec's own bytes (and a few JSON-ish ones): no crash, no hang.
  Automaton automaton(grammar);
  int32_t state = automaton.initial();
  const std::string input = text + "{\"a\": [1, \"x\"]}";
  for (char c : input) {
    const int32_t next = automaton.step(state, uint8_t(c));
    if (next == Automaton::kDead) continue;  // skip bytes the grammar rejects
    state = next;
    if (automaton.num_states() > 100000) break;
  }
  (void)automaton.accepting(state);
  return 0;
}
