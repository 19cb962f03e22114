// The _pagellm extension module: the C++ engine (include/pagellm/) for the pagellm Python package.
// pagellm::Error kinds become Python exceptions: invalid argument → ValueError, not found →
// FileNotFoundError, unsupported → NotImplementedError, the rest → RuntimeError.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "common/error.h"
#include "convert.h"

namespace py = pybind11;

namespace {

void translate_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const pagellm::Error& e) {
    PyObject* type = PyExc_RuntimeError;
    switch (e.kind()) {
      case pagellm::ErrorKind::kInvalidArgument:
        type = PyExc_ValueError;
        break;
      case pagellm::ErrorKind::kNotFound:
        type = PyExc_FileNotFoundError;
        break;
      case pagellm::ErrorKind::kUnsupported:
        type = PyExc_NotImplementedError;
        break;
      case pagellm::ErrorKind::kResourceExhausted:
      case pagellm::ErrorKind::kInternal:
        type = PyExc_RuntimeError;
        break;
    }
    PyErr_SetString(type, e.what());
  }
}

}  // namespace

PYBIND11_MODULE(_pagellm, m) {
  m.doc() = "pagellm's C++ engine; use the pagellm package (LLM, SamplingParams, AsyncLLM) instead";
  py::register_exception_translator(&translate_error);
  pagellm::python::bind_tokenizer(m);
  pagellm::python::bind_offline(m);
  pagellm::python::bind_async(m);
  m.def(
      "validate_sampling_params",
      [](const py::handle& params) {
        // max_tokens=None is checked against a bound that every context length fits under.
        pagellm::python::sampling_params_from_py(params, 1 << 30).validate();
      },
      py::arg("params"), "Raises ValueError naming the first invalid field of a SamplingParams");
  m.attr("__version__") = PAGELLM_VERSION;
#ifdef PAGELLM_HAVE_CUDA
  m.attr("cuda_built") = true;
#else
  m.attr("cuda_built") = false;
#endif
}
