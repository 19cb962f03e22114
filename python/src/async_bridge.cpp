// _pagellm.AsyncEngine: the C++ AsyncEngine for pagellm.AsyncLLM. The engine thread never touches
// Python: each output is queued here and, when the queue turns non-empty, one byte is written to a
// pipe. The asyncio loop watches the pipe's read end (loop.add_reader) and calls drain(), which
// converts the queued outputs under the GIL. So no step ever waits for the GIL, and the event loop
// never waits for a step.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>

#include <pybind11/stl.h>

#include "bindings.h"
#include "common/error.h"
#include "convert.h"
#include "tokenizer_binding.h"

namespace pagellm::python {

namespace {

// A non-blocking self-pipe: notify() from any thread, clear() from the reader.
class WakePipe {
 public:
  WakePipe() {
    if (::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0)
      throw_error(ErrorKind::kResourceExhausted,
                  "AsyncEngine: pipe2 failed (errno " + std::to_string(errno) + ")");
  }
  ~WakePipe() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  WakePipe(const WakePipe&) = delete;
  WakePipe& operator=(const WakePipe&) = delete;

  int read_fd() const { return fds_[0]; }
  void notify() {
    const char byte = 1;
    // A full pipe already wakes the reader, so EAGAIN loses nothing.
    [[maybe_unused]] ssize_t n = ::write(fds_[1], &byte, 1);
  }
  void clear() {
    char buf[256];
    while (::read(fds_[0], buf, sizeof(buf)) > 0) {
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

class AsyncBridge {
 public:
  explicit AsyncBridge(const EngineArgs& args) : engine_(std::make_unique<AsyncEngine>(args)) {
    tokenizer_ = std::make_shared<TokenizerHandle>(engine_->tokenizer_ptr(), engine_->args());
  }
  ~AsyncBridge() { close(0.0); }

  // Validates on this thread (ValueError) and queues; outputs arrive through drain() as deltas.
  // `priority`: lower runs first under scheduling_policy="priority".
  void add_request(const std::string& request_id, const py::handle& prompt,
                   const py::handle& params, int priority) {
    const PromptInput input = prompt_from_py(prompt);
    const SamplingParams sampling =
        sampling_params_from_py(params, engine_->model_info().max_model_len);
    RequestOptions options;
    options.priority = priority;
    py::gil_scoped_release release;  // validation tokenizes the prompt
    engine_->add_request(
        request_id, input, sampling, [this](RequestOutput&& out) { push(std::move(out)); },
        options);
  }

  void abort(const std::string& request_id) { engine_->abort_request(request_id); }

  // Everything queued since the last call, as output tuples (convert.h), oldest first.
  py::list drain() {
    std::deque<RequestOutput> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake_.clear();
      ready.swap(queue_);
    }
    py::list result;
    for (const RequestOutput& out : ready) result.append(output_to_py(out));
    return result;
  }

  // Stops taking requests and waits up to timeout_s for the running ones (then aborts them).
  void close(double timeout_s) {
    py::gil_scoped_release release;
    engine_->shutdown(timeout_s);
  }

  int fileno() const { return wake_.read_fd(); }
  bool healthy() const { return engine_->healthy(); }
  int num_unfinished() const { return engine_->num_unfinished(); }
  py::dict stats() { return stats_to_py(engine_->take_stats()); }
  std::shared_ptr<TokenizerHandle> tokenizer() const { return tokenizer_; }
  py::dict model_info() const {
    const ModelInfo& info = engine_->model_info();
    py::dict d;
    d["name"] = info.name;
    d["max_model_len"] = info.max_model_len;
    d["vocab_size"] = info.vocab_size;
    return d;
  }
  // `folder`: a generation config folder; "" = the model's own.
  py::dict default_sampling(const std::string& folder) const {
    return default_sampling_overrides(folder.empty() ? engine_->args().model : folder);
  }

 private:
  // Engine thread: must not block (it holds no GIL and takes none).
  void push(RequestOutput&& out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) wake_.notify();
    queue_.push_back(std::move(out));
  }

  // Declared before the engine: the engine thread's last callbacks run inside its destructor.
  WakePipe wake_;
  std::mutex mu_;
  std::deque<RequestOutput> queue_;
  std::unique_ptr<AsyncEngine> engine_;
  std::shared_ptr<TokenizerHandle> tokenizer_;
};

}  // namespace

void bind_async(py::module_& m) {
  py::class_<AsyncBridge>(m, "AsyncEngine")
      .def(py::init([](const py::dict& kwargs) {
             EngineArgs args = engine_args_from_dict(kwargs);
             py::gil_scoped_release release;
             return std::make_unique<AsyncBridge>(args);
           }),
           py::arg("engine_args"))
      .def("add_request", &AsyncBridge::add_request, py::arg("request_id"), py::arg("prompt"),
           py::arg("params"), py::arg("priority") = 0)
      .def("abort", &AsyncBridge::abort, py::arg("request_id"))
      .def("drain", &AsyncBridge::drain)
      .def("close", &AsyncBridge::close, py::arg("timeout_s") = 0.0)
      .def("fileno", &AsyncBridge::fileno)
      .def("healthy", &AsyncBridge::healthy)
      .def("num_unfinished", &AsyncBridge::num_unfinished)
      .def("stats", &AsyncBridge::stats)
      .def("tokenizer", &AsyncBridge::tokenizer)
      .def("model_info", &AsyncBridge::model_info)
      .def("default_sampling", &AsyncBridge::default_sampling, py::arg("folder") = "");
}

}  // namespace pagellm::python
