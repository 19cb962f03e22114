// libFuzzer target: a line of a prompts JSONL file (`generate --prompts-file`, `bench throughput
// --dataset`) is either rejected with pagellm::Error or yields a prompt and valid sampling params.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/prompts_file.h"
#include "common/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  try {
    const pagellm::cli::PromptLine p = pagellm::cli::parse_prompt_line(line, {}, "fuzz.jsonl:1");
    p.params.validate();  // must not throw for an accepted line
    for (int32_t id : p.prompt.token_ids)
      if (id < 0) std::abort();
  } catch (const pagellm::Error&) {
  }
  return 0;
}
