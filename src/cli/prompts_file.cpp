#include "cli/prompts_file.h"

#include <cstdint>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "cli/sampling_flags.h"
#include "common/error.h"
#include "server/openai_protocol.h"
#include "structured/compiler.h"

namespace pagellm::cli {

PromptLine parse_prompt_line(const std::string& line, const SamplingParams& defaults,
                             const std::string& where) {
  nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) invalid_argument(where + ": not a JSON object");
  PromptLine p;
  p.params = defaults;
  apply_sampling_json(obj, p.params, where);
  try {  // the server's structured-output fields: response_format, structured_outputs, guided_*
    if (auto so = server::parse_structured_outputs(obj)) {
      p.params.structured_outputs = std::move(so);
      server::restore_schema_order(p.params, line);
      // Compiled once here too, so that a bad spec is reported with its line before anything runs.
      structured::build_grammar(*p.params.structured_outputs, structured::Limits{});
    }
  } catch (const server::ApiError& e) {
    invalid_argument(where + ": " + e.what());
  } catch (const Error& e) {
    invalid_argument(where + ": " + e.what());
  }
  if (auto it = obj.find("output_len"); it != obj.end()) {  // vLLM benchmark datasets
    if (!it->is_number_integer() || *it < 1 || *it > std::numeric_limits<int32_t>::max())
      invalid_argument(where + ": field 'output_len' must be a positive integer");
    p.params.max_tokens = it->get<int>();
  }
  auto text = obj.find("prompt");
  auto ids = obj.find("prompt_token_ids");
  if (ids != obj.end()) {
    if (!ids->is_array()) invalid_argument(where + ": field 'prompt_token_ids' must be a list of integers");
    std::vector<int32_t> values;
    values.reserve(ids->size());
    for (const auto& v : *ids) {
      if (!v.is_number_integer() || v < 0 || v > std::numeric_limits<int32_t>::max())
        invalid_argument(where + ": field 'prompt_token_ids' must hold non-negative 32-bit integers");
      values.push_back(v.get<int32_t>());
    }
    p.prompt = PromptInput::from_ids(std::move(values));
  } else if (text != obj.end() && text->is_string()) {
    p.prompt = PromptInput::from_text(text->get<std::string>());
  } else {
    invalid_argument(where + ": needs a string 'prompt' or a list 'prompt_token_ids'");
  }
  try {
    p.params.validate();
  } catch (const Error& e) {
    invalid_argument(where + ": " + e.what());
  }
  return p;
}

std::vector<PromptLine> read_prompts_file(const std::string& path, const SamplingParams& defaults,
                                          size_t max_lines) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorKind::kNotFound, path + ": cannot open");
  std::vector<PromptLine> lines;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (max_lines > 0 && lines.size() >= max_lines) break;
    lines.push_back(parse_prompt_line(line, defaults, path + ":" + std::to_string(number)));
  }
  return lines;
}

}  // namespace pagellm::cli
