// tokenizer.json "post_processor": what encode(add_special_tokens=true) wraps around the model's ids.
// TemplateProcessing (single-sequence template) is what matters for ids; ByteLevel only adjusts
// offsets, so it adds nothing here. Sequence combines them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagellm::tok {

class PostProcessor {
 public:
  // An identity post-processor (adds nothing).
  PostProcessor() = default;
  // Throws "unsupported: post_processor <type>" for types we do not implement.
  PostProcessor(const nlohmann::json& spec, const std::string& where);
  // `prefix` and `suffix` replace the template (tokenizer_config.json's add_bos_token / add_eos_token).
  PostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

  // Wraps `ids` in place.
  void apply(std::vector<int32_t>& ids) const;
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  void add_template(const nlohmann::json& spec, const std::string& where);

  std::vector<int32_t> prefix_;  // ids before the sequence
  std::vector<int32_t> suffix_;  // ids after it
};

}  // namespace pagellm::tok
