// The parts of the _pagellm extension module; module.cpp calls each once.
#pragma once

#include <pybind11/pybind11.h>

namespace pagellm::python {

void bind_offline(pybind11::module_& m);    // _pagellm.Engine (offline.cpp)
void bind_async(pybind11::module_& m);      // _pagellm.AsyncEngine (async_bridge.cpp)
void bind_tokenizer(pybind11::module_& m);  // _pagellm.Tokenizer (tokenizer_binding.cpp)

}  // namespace pagellm::python
