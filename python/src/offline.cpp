// _pagellm.Engine: the C++ LLM (offline batches) for pagellm.LLM. generate() runs with the GIL
// released; between engine steps it briefly takes the GIL to let Python handle signals, so Ctrl-C
// aborts the batch (the engine is left idle and usable) and raises KeyboardInterrupt.
#include <chrono>
#include <mutex>
#include <optional>

#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"
#include "tokenizer_binding.h"

namespace pagellm::python {

namespace {

class OfflineEngine {
 public:
  explicit OfflineEngine(const EngineArgs& args) : llm_(args) {
    tokenizer_ =
        std::make_shared<TokenizerHandle>(llm_.engine().tokenizer_ptr(), llm_.engine().args());
  }

  // prompts: str or list[int] each; params: one pagellm.SamplingParams per prompt.
  py::list generate(const py::list& prompts, const py::list& params, bool show_progress) {
    if (prompts.size() != params.size())
      throw py::value_error("generate: " + std::to_string(params.size()) + " sampling params for " +
                            std::to_string(prompts.size()) + " prompts");
    std::vector<PromptInput> inputs;
    std::vector<SamplingParams> sampling;
    const int max_model_len = llm_.engine().model_info().max_model_len;
    for (size_t i = 0; i < prompts.size(); ++i) {
      inputs.push_back(prompt_from_py(prompts[i]));
      sampling.push_back(sampling_params_from_py(params[i], max_model_len));
    }
    std::optional<py::error_already_set> interrupted;
    std::vector<RequestOutput> outputs;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);  // one batch at a time per engine
      outputs = llm_.generate(inputs, sampling, show_progress, signal_check(interrupted));
    }
    if (interrupted) throw *interrupted;
    py::list result;
    for (const RequestOutput& out : outputs) result.append(output_to_py(out));
    return result;
  }

  // Pooling engines (runner="pooling"): one embedding per prompt, in order.
  std::vector<std::vector<float>> embed(const py::list& prompts, bool show_progress) {
    std::vector<PromptInput> inputs;
    for (const py::handle& p : prompts) inputs.push_back(prompt_from_py(p));
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return llm_.embed(inputs, show_progress);
  }

  std::shared_ptr<TokenizerHandle> tokenizer() const { return tokenizer_; }
  py::dict stats() {
    EngineStats stats;
    {
      // GIL first, then the engine: a running generate() holds the engine and takes the GIL.
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      stats = llm_.engine().take_stats();
    }
    return stats_to_py(stats);
  }
  // Model data is immutable after load: no lock needed.
  py::dict model_info() {
    const ModelInfo& info = llm_.engine().model_info();
    py::dict d;
    d["name"] = info.name;
    d["max_model_len"] = info.max_model_len;
    d["vocab_size"] = info.vocab_size;
    return d;
  }
  // `folder`: a generation config folder; "" = the model's own.
  py::dict default_sampling(const std::string& folder) {
    return default_sampling_overrides(folder.empty() ? llm_.engine().args().model : folder);
  }

 private:
  // Runs on the generating thread with the GIL released. Takes the GIL at most every 50 ms to run
  // Python's signal handlers; a raised exception (KeyboardInterrupt) is kept for the caller and
  // stops the batch. Never throws: an exception here would leave the batch inside the engine.
  static LLM::StopCheck signal_check(std::optional<py::error_already_set>& interrupted) {
    auto last =
        std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    return [&interrupted, last] {
      const auto now = std::chrono::steady_clock::now();
      if (now - *last < std::chrono::milliseconds(50)) return false;
      *last = now;
      py::gil_scoped_acquire acquire;
      if (PyErr_CheckSignals() == 0) return false;
      interrupted.emplace();  // fetches and clears the Python error
      return true;
    };
  }

  LLM llm_;
  std::shared_ptr<TokenizerHandle> tokenizer_;
  std::mutex mu_;
};

}  // namespace

void bind_offline(py::module_& m) {
  py::class_<OfflineEngine>(m, "Engine")
      .def(py::init([](const py::dict& kwargs) {
             EngineArgs args = engine_args_from_dict(kwargs);
             py::gil_scoped_release release;  // loading takes a while; other threads may run
             return std::make_unique<OfflineEngine>(args);
           }),
           py::arg("engine_args"))
      .def("generate", &OfflineEngine::generate, py::arg("prompts"), py::arg("params"),
           py::arg("show_progress") = false)
      .def("embed", &OfflineEngine::embed, py::arg("prompts"), py::arg("show_progress") = false)
      .def("tokenizer", &OfflineEngine::tokenizer)
      .def("stats", &OfflineEngine::stats)
      .def("model_info", &OfflineEngine::model_info)
      .def("default_sampling", &OfflineEngine::default_sampling, py::arg("folder") = "");
}

}  // namespace pagellm::python
