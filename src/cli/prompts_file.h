// Reading a prompts JSONL file: one object per line with "prompt" (text) or "prompt_token_ids", plus
// optional sampling fields. Shared by `generate --prompts-file` and `bench throughput --dataset`.
#pragma once

#include <string>
#include <vector>

#include "pagellm/llm.h"

namespace pagellm::cli {

struct PromptLine {
  PromptInput prompt;
  SamplingParams params;
};

// Every line gets `defaults` overridden by its own fields. Blank lines are skipped. Throws
// pagellm::Error naming file:line on malformed input. At most `max_lines` lines (0 = no limit).
std::vector<PromptLine> read_prompts_file(const std::string& path, const SamplingParams& defaults,
                                          size_t max_lines = 0);

// One non-blank line of such a file; `where` (file:line) prefixes every error. Exposed for fuzzing.
PromptLine parse_prompt_line(const std::string& line, const SamplingParams& defaults,
                             const std::string& where);

}  // namespace pagellm::cli
