#include "io/eagle_config.h"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagellm::io {

ModelConfig load_eagle_head_config(const std::filesystem::path& dir, bool* eagle3) {
  const std::filesystem::path file = dir / "config.json";
  std::ifstream in(file);
  if (!in) invalid_argument(file.string() + ": cannot be read");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) invalid_argument(file.string() + ": not a JSON object");
  *eagle3 = false;
  if (j.contains("architectures") && j["architectures"].is_array()) {
    for (auto& arch : j["architectures"]) {
      if (!arch.is_string()) continue;
      const std::string a = arch.get<std::string>();
      *eagle3 = *eagle3 || a.find("Eagle3") != std::string::npos;
      if (a.find("Eagle") != std::string::npos && a.find("Llama") != std::string::npos)
        arch = "LlamaForCausalLM";
    }
  }
  return parse_model_config(j.dump(), file.string());
}

}  // namespace pagellm::io
