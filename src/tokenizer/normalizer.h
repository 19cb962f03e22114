// tokenizer.json "normalizer" components. A normalizer rewrites one section of input text (the parts
// between added tokens) before pre-tokenization. Supported: NFC, NFD, NFKC, NFKD, Prepend, Replace
// (string or regex pattern), Strip, Sequence.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Returns nullptr for a JSON null. Throws pagellm::Error ("unsupported: normalizer <type>") for
// components we do not implement; `where` names the file in errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace pagellm::tok
