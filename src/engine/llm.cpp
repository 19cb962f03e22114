// LLMEngine (step-wise) and LLM (offline batches) over EngineCore.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "common/error.h"
#include "engine/dp_router.h"
#include "engine/engine_core.h"
#include "pagellm/llm.h"

namespace pagellm {

LLMEngine::LLMEngine(const EngineArgs& args) : core_(std::make_unique<EngineCore>(args)) {}
LLMEngine::~LLMEngine() = default;

void LLMEngine::add_request(const std::string& request_id, const PromptInput& prompt,
                            const SamplingParams& params, const RequestOptions& options) {
  core_->add_request(request_id, prompt, params, options, /*stream_deltas=*/false);
}
std::vector<RequestOutput> LLMEngine::step() { return core_->step(); }
void LLMEngine::abort_request(const std::string& request_id) { core_->abort_request(request_id); }
bool LLMEngine::has_unfinished_requests() const { return core_->has_unfinished(); }
const tok::Tokenizer& LLMEngine::tokenizer() const { return core_->tokenizer(); }
std::shared_ptr<const tok::Tokenizer> LLMEngine::tokenizer_ptr() const { return core_->tokenizer_ptr(); }
const ModelInfo& LLMEngine::model_info() const { return core_->model_info(); }
EngineStats LLMEngine::take_stats() { return core_->take_stats(); }
const EngineArgs& LLMEngine::args() const { return core_->args(); }

namespace {

// vLLM/tqdm-style progress line on stderr, redrawn in place at most ~10 times a second.
class ProgressBar {
 public:
  explicit ProgressBar(size_t total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  void update(size_t done, uint64_t num_prompt_tokens, uint64_t num_output_tokens, bool force = false) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double frac = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const int width = 30;
    const int filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.resize(static_cast<size_t>(width), ' ');
    const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / static_cast<double>(done) : 0.0;
    const double dt = elapsed > 0 ? elapsed : 1e-9;
    std::fprintf(stderr,
                 "\rProcessed prompts: %3.0f%%|%s| %zu/%zu [%.1fs<%.1fs, est. speed input: %.1f toks/s, "
                 "output: %.1f toks/s]",
                 100.0 * frac, bar.c_str(), done, total_, elapsed, eta,
                 static_cast<double>(num_prompt_tokens) / dt, static_cast<double>(num_output_tokens) / dt);
    std::fflush(stderr);
  }
  void finish() { std::fprintf(stderr, "\n"); }

 private:
  size_t total_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace

LLM::LLM(const EngineArgs& args) : engine_(std::make_unique<LLMEngine>(args.for_replica(0))) {
  for (int r = 1; r < args.data_parallel_size; ++r)
    replicas_.push_back(std::make_unique<LLMEngine>(args.for_replica(r)));
}
LLM::~LLM() = default;

std::vector<RequestOutput> LLM::generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                         bool show_progress) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params), show_progress);
}

namespace {

struct Progress {
  std::atomic<size_t> num_done{0};
  std::atomic<uint64_t> num_prompt_tokens{0};
  std::atomic<uint64_t> num_output_tokens{0};
};

// Steps `engine` until it is idle, storing the finished outputs of this batch (ids prefix + index)
// in `results`.
void run_to_completion(LLMEngine& engine, const std::string& prefix,
                       std::vector<RequestOutput>& results, Progress& progress,
                       const std::function<void()>& on_step) {
  while (engine.has_unfinished_requests()) {
    for (RequestOutput& out : engine.step()) {
      if (!out.finished || out.request_id.rfind(prefix, 0) != 0) continue;
      const size_t index = std::stoull(out.request_id.substr(prefix.size()));
      progress.num_prompt_tokens += out.prompt_token_ids.size();
      for (const auto& c : out.outputs) progress.num_output_tokens += c.token_ids.size();
      results[index] = std::move(out);
      ++progress.num_done;
    }
    if (on_step) on_step();
  }
}

// Splits the batch over the replicas with the server's router (all loads start at zero): returns
// the replica of every prompt, and the prompts as token ids so no replica tokenizes them again.
std::vector<int> route_batch(std::vector<PromptInput>& prompts,
                             const std::vector<SamplingParams>& params, const LLMEngine& first,
                             int num_replicas) {
  engine::RouterConfig config;
  config.block_size = first.args().block_size;
  engine::DpRouter router(num_replicas, config);
  std::vector<int> replica_of(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].token_ids.empty())
      prompts[i] = PromptInput::from_ids(first.tokenizer().encode(prompts[i].text, true));
    const auto& ids = prompts[i].token_ids;
    const int64_t cost =
        engine::request_cost(int64_t(ids.size()), params[i], first.model_info().max_model_len);
    replica_of[i] = router.route(std::to_string(i), ids, "", cost);
  }
  return replica_of;
}

// Steps every replica to completion on its own thread while this thread redraws the progress bar;
// `on_worker_step(r)` runs on replica r's thread after each of its steps. The first failure is
// rethrown once every replica has stopped.
void run_replicas(const std::vector<LLMEngine*>& engines, const std::string& prefix,
                  std::vector<RequestOutput>& results, Progress& progress,
                  const std::function<void()>& draw,
                  const std::function<void(size_t)>& on_worker_step) {
  std::vector<std::exception_ptr> errors(engines.size());
  std::atomic<size_t> num_running{engines.size()};
  std::vector<std::thread> threads;
  for (size_t r = 0; r < engines.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        run_to_completion(*engines[r], prefix, results, progress, [&, r] { on_worker_step(r); });
      } catch (...) {
        errors[r] = std::current_exception();
      }
      --num_running;
    });
  }
  while (num_running.load() > 0) {
    draw();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// Steps the batch to completion: on this thread with one engine, else on a thread per replica
// (run_replicas). `draw` and `should_stop` run on this thread; once should_stop returns true, what is
// left of the batch is aborted (the aborts come back through the same loop), each replica aborting
// its own requests on its own thread because an engine is single-threaded.
void step_batch(const std::vector<LLMEngine*>& engines, const std::vector<int>& replica_of,
                const std::string& prefix, std::vector<RequestOutput>& results, Progress& progress,
                const std::function<void()>& draw, const LLM::StopCheck& should_stop) {
  auto abort_batch = [&](size_t replica) {
    for (size_t i = 0; i < replica_of.size(); ++i)
      if (size_t(replica_of[i]) == replica) engines[replica]->abort_request(prefix + std::to_string(i));
  };
  std::atomic<bool> stop_requested{false};
  auto poll_stop = [&] {
    if (should_stop && !stop_requested.load() && should_stop()) stop_requested.store(true);
  };
  std::vector<char> aborted(engines.size(), 0);  // entry r is touched by replica r's thread only
  auto abort_once = [&](size_t r) {
    if (stop_requested.load() && !aborted[r]) {
      aborted[r] = 1;
      abort_batch(r);
    }
  };
  if (engines.size() == 1) {
    run_to_completion(*engines[0], prefix, results, progress, [&] {
      draw();
      poll_stop();
      abort_once(0);
    });
  } else {
    run_replicas(
        engines, prefix, results, progress,
        [&] {
          draw();
          poll_stop();
        },
        abort_once);
  }
}

}  // namespace

std::vector<RequestOutput> LLM::generate(const std::vector<PromptInput>& prompts,
                                         const std::vector<SamplingParams>& params, bool show_progress) {
  return run(prompts, params, RequestOptions{}, show_progress, nullptr);
}

std::vector<RequestOutput> LLM::generate(const std::vector<PromptInput>& prompts,
                                         const std::vector<SamplingParams>& params, bool show_progress,
                                         const StopCheck& should_stop) {
  return run(prompts, params, RequestOptions{}, show_progress, should_stop);
}

std::vector<std::vector<float>> LLM::embed(const std::vector<PromptInput>& prompts,
                                           bool show_progress) {
  RequestOptions options;
  options.pooling = engine_->args().default_pooling;
  options.normalize = engine_->args().default_normalize;
  std::vector<RequestOutput> outputs =
      run(prompts, std::vector<SamplingParams>(prompts.size()), options, show_progress, nullptr);
  std::vector<std::vector<float>> out;
  for (RequestOutput& o : outputs) out.push_back(std::move(o.embedding));
  return out;
}

std::vector<RequestOutput> LLM::run(const std::vector<PromptInput>& prompts,
                                    const std::vector<SamplingParams>& params,
                                    const RequestOptions& options, bool show_progress,
                                    const StopCheck& should_stop) {
  if (params.size() != prompts.size()) {
    invalid_argument("generate: " + std::to_string(params.size()) + " sampling params for " +
                     std::to_string(prompts.size()) + " prompts");
  }
  std::vector<LLMEngine*> engines = {engine_.get()};
  for (auto& r : replicas_) engines.push_back(r.get());
  std::vector<PromptInput> routed;  // the prompts as token ids, with data parallelism
  const std::vector<PromptInput>* inputs = &prompts;
  std::vector<int> replica_of(prompts.size(), 0);
  if (engines.size() > 1) {
    routed = prompts;
    replica_of = route_batch(routed, params, *engine_, int(engines.size()));
    inputs = &routed;
  }
  // Ids unique across calls on the same engine; index recovered from the suffix.
  static std::atomic<uint64_t> batch_counter{0};
  const std::string prefix = "llm-" + std::to_string(batch_counter++) + "-";
  std::vector<RequestOutput> results(prompts.size());
  size_t num_added = 0;
  try {
    for (size_t i = 0; i < prompts.size(); ++i, ++num_added) {
      engines[size_t(replica_of[i])]->add_request(prefix + std::to_string(i), (*inputs)[i],
                                                  params[i], options);
    }
  } catch (...) {
    // Leave the engines clean: nothing of this batch keeps running.
    for (size_t i = 0; i < num_added; ++i)
      engines[size_t(replica_of[i])]->abort_request(prefix + std::to_string(i));
    for (LLMEngine* e : engines)
      while (e->has_unfinished_requests()) e->step();
    throw;
  }
  ProgressBar bar(prompts.size());
  Progress progress;
  auto draw = [&](bool force) {
    if (show_progress)
      bar.update(progress.num_done, progress.num_prompt_tokens, progress.num_output_tokens, force);
  };
  step_batch(engines, replica_of, prefix, results, progress, [&] { draw(false); }, should_stop);
  if (show_progress) {
    draw(true);
    bar.finish();
  }
  return results;
}

}  // namespace pagellm
