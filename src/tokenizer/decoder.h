// tokenizer.json "decoder" components: they turn a sequence of token strings back into text. Each
// step maps the token list to a new list (as Hugging Face's decode_chain does); the final text is the
// concatenation. Supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, Sequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Returns nullptr for a JSON null; throws "unsupported: decoder <type>" for unknown types.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where);

}  // namespace pagellm::tok
