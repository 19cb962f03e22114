#include "tokenizer/post_processor.h"

#include "common/error.h"

namespace pagellm::tok {

using json = nlohmann::json;

PostProcessor::PostProcessor(const json& spec, const std::string& where) {
  if (spec.is_null()) return;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    invalid_argument(where + ": post_processor must be an object with a string 'type'");
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    add_template(spec, where);
    return;
  }
  if (type == "Sequence") {
    if (!spec.contains("processors") || !spec["processors"].is_array()) {
      invalid_argument(where + ": Sequence post_processor needs a 'processors' array");
    }
    for (const auto& part : spec["processors"]) {
      PostProcessor p(part, where);
      // Each processor wraps the result of the previous ones.
      prefix_.insert(prefix_.begin(), p.prefix_.begin(), p.prefix_.end());
      suffix_.insert(suffix_.end(), p.suffix_.begin(), p.suffix_.end());
    }
    return;
  }
  unsupported(where + ": unsupported: post_processor " + type);
}

PostProcessor::PostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
    : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

void PostProcessor::add_template(const json& spec, const std::string& where) {
  if (!spec.contains("single") || !spec["single"].is_array()) {
    invalid_argument(where + ": TemplateProcessing needs a 'single' array");
  }
  const json empty = json::object();
  const json& special = spec.contains("special_tokens") && spec["special_tokens"].is_object() ? spec["special_tokens"] : empty;
  bool seen_sequence = false;
  for (const auto& piece : spec["single"]) {
    if (piece.contains("Sequence")) {
      if (seen_sequence) unsupported(where + ": unsupported: TemplateProcessing with two sequences in 'single'");
      seen_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken") || !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string()) {
      invalid_argument(where + ": TemplateProcessing 'single' items must be Sequence or SpecialToken");
    }
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (!special.contains(name) || !special[name].contains("ids") || !special[name]["ids"].is_array()) {
      invalid_argument(where + ": TemplateProcessing special token '" + name + "' has no ids");
    }
    auto& target = seen_sequence ? suffix_ : prefix_;
    for (const auto& id : special[name]["ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > 0x7FFFFFFF) {
        invalid_argument(where + ": TemplateProcessing special token '" + name + "' has an invalid id");
      }
      target.push_back(id.get<int32_t>());
    }
  }
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  if (!prefix_.empty()) ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
}

}  // namespace pagellm::tok
