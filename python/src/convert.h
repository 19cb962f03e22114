// Conversions between Python objects and the C++ API's structs (include/pagellm/). The Python
// package (python/pagellm/) normalizes user input first; these functions assume its shapes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "pagellm/llm.h"

namespace pagellm::python {

namespace py = pybind11;

// EngineArgs from a dict keyed by EngineArgs field names (the package maps vLLM's keyword names to
// these). Unknown keys raise TypeError, values of the wrong type TypeError / ValueError.
EngineArgs engine_args_from_dict(const py::dict& kwargs);

// A pagellm.SamplingParams (or any object with its attributes) as the C++ struct; validated by the
// engine (ValueError).
// `max_model_len` stands in for max_tokens=None (vLLM: up to the context length).
SamplingParams sampling_params_from_py(const py::handle& obj, int max_model_len);

// A prompt: str (text) or a list of ints (token ids).
PromptInput prompt_from_py(const py::handle& obj);

// RequestOutput as a plain tuple (the package wraps it in pagellm.RequestOutput):
//   (request_id, prompt, prompt_token_ids, prompt_logprobs, outputs, finished, num_cached_tokens,
//    error)
// where outputs holds (index, text, token_ids, cumulative_logprob, logprobs, finish_reason,
// stop_reason) tuples and each logprob entry is (token_id, logprob, [(id, logprob), ...]).
py::tuple output_to_py(const RequestOutput& out);

// EngineStats as a dict; num_free_kv_blocks is derived from the usage fraction.
py::dict stats_to_py(const EngineStats& stats);

// `folder`'s generation_config.json as SamplingParams keyword overrides (vLLM's generation_config:
// the model folder for "auto", or another folder); empty for "" (the demo model).
py::dict default_sampling_overrides(const std::string& folder);

}  // namespace pagellm::python
