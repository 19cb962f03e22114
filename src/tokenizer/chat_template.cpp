#include "tokenizer/chat_template.h"

#include "common/error.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_parser.h"

namespace pagellm::tok {

ChatTemplate::ChatTemplate(const std::string& source)
    : program_(std::make_unique<jinja::Program>(jinja::parse_template(source))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return render(context, jinja::RenderLimits{});
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const jinja::RenderLimits& limits) const {
  if (!context.is_object()) invalid_argument("chat template: the render context must be a JSON object");
  jinja::Interpreter interp(*program_, limits);
  return interp.render(jinja::from_json(context));
}

}  // namespace pagellm::tok
