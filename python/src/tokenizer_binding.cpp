#include "tokenizer_binding.h"

#include <filesystem>

#include <pybind11/stl.h>

#include "common/error.h"

namespace pagellm::python {

namespace {

nlohmann::ordered_json parse_json(const std::string& text, const char* what) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    invalid_argument(std::string(what) + ": invalid JSON: " + e.what());
  }
}

}  // namespace

TokenizerHandle::TokenizerHandle(std::shared_ptr<const tok::Tokenizer> tokenizer,
                                 const EngineArgs& args)
    : tokenizer_(std::move(tokenizer)) {
  const std::string dir = args.tokenizer.empty() ? args.model : args.tokenizer;
  if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / "tokenizer_config.json"))
    config_ = tok::load_chat_template_config(dir);
  if (!args.chat_template.empty()) {
    config_.chat_template = tok::read_chat_template_arg(args.chat_template);
    config_.template_origin = args.chat_template;
  }
  if (!config_.chat_template.empty())
    default_template_ = std::make_shared<const tok::ChatTemplate>(config_.chat_template);
}

std::string TokenizerHandle::render_chat(const std::string& messages_json,
                                         bool add_generation_prompt,
                                         const std::optional<std::string>& chat_template,
                                         const std::string& tools_json,
                                         const std::string& kwargs_json) const {
  std::shared_ptr<const tok::ChatTemplate> tmpl = default_template_;
  if (chat_template) {
    tmpl = std::make_shared<const tok::ChatTemplate>(tok::read_chat_template_arg(*chat_template));
  }
  if (!tmpl) {
    invalid_argument(
        "this tokenizer has no chat template: pass chat_template= (a file or the template text), "
        "or chat_template= to LLM(...)");
  }
  const auto messages = parse_json(messages_json, "messages");
  if (!messages.is_array()) invalid_argument("messages: expected a list of messages");
  const auto tools =
      tools_json.empty() ? nlohmann::ordered_json(nullptr) : parse_json(tools_json, "tools");
  const auto kwargs = kwargs_json.empty() ? nlohmann::ordered_json::object()
                                          : parse_json(kwargs_json, "chat_template_kwargs");
  return tmpl->render(
      tok::build_chat_context(config_, messages, tools, add_generation_prompt, kwargs));
}

void bind_tokenizer(py::module_& m) {
  py::class_<TokenizerHandle, std::shared_ptr<TokenizerHandle>>(m, "Tokenizer")
      .def(
          "encode",
          [](const TokenizerHandle& t, const std::string& text, bool add_special_tokens) {
            py::gil_scoped_release release;
            return t.tokenizer().encode(text, add_special_tokens);
          },
          py::arg("text"), py::arg("add_special_tokens") = true)
      .def(
          "decode",
          [](const TokenizerHandle& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            const std::string text = t.tokenizer().decode(ids, skip_special_tokens);
            PyObject* s = PyUnicode_DecodeUTF8(text.data(), Py_ssize_t(text.size()), "replace");
            if (s == nullptr) throw py::error_already_set();
            return py::reinterpret_steal<py::str>(s);
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def("token_to_id", [](const TokenizerHandle& t,
                             const std::string& token) { return t.tokenizer().token_to_id(token); })
      .def("id_to_token",
           [](const TokenizerHandle& t, int32_t id) { return t.tokenizer().id_to_token(id); })
      .def("is_special",
           [](const TokenizerHandle& t, int32_t id) { return t.tokenizer().is_special(id); })
      .def_property_readonly("vocab_size",
                             [](const TokenizerHandle& t) { return t.tokenizer().vocab_size(); })
      .def_property_readonly("bos_token_id",
                             [](const TokenizerHandle& t) { return t.tokenizer().bos_token_id(); })
      .def_property_readonly("eos_token_id",
                             [](const TokenizerHandle& t) { return t.tokenizer().eos_token_id(); })
      .def_property_readonly("bos_token",
                             [](const TokenizerHandle& t) { return t.tokenizer().bos_token(); })
      .def_property_readonly("eos_token",
                             [](const TokenizerHandle& t) { return t.tokenizer().eos_token(); })
      .def_property_readonly("has_chat_template", &TokenizerHandle::has_chat_template)
      .def("render_chat", &TokenizerHandle::render_chat, py::arg("messages_json"),
           py::arg("add_generation_prompt"), py::arg("chat_template") = py::none(),
           py::arg("tools_json") = "", py::arg("kwargs_json") = "");
}

}  // namespace pagellm::python
