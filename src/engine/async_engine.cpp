// AsyncEngine: EngineCore on its own thread. Callers validate synchronously on their own thread
// (EngineCore::make_request reads only immutable state) and hand finished Request objects to the loop
// through a mutex-protected inbox; the loop never waits on a caller, only on the inbox when idle.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "common/error.h"
#include "common/logging.h"
#include "engine/engine_core.h"
#include "engine/stats.h"
#include "pagellm/llm.h"

namespace pagellm {

namespace {

struct AddCommand {
  std::unique_ptr<engine::Request> request;
  OutputCallback on_output;
};
struct AbortCommand {
  std::string request_id;
};
struct AbortAllCommand {};
using Command = std::variant<AddCommand, AbortCommand, AbortAllCommand>;

}  // namespace

struct AsyncEngine::State {
  std::unique_ptr<EngineCore> core;

  mutable std::mutex mu;
  std::condition_variable wake_cv;      // the loop waits here when idle
  std::condition_variable finished_cv;  // shutdown waits here for requests to drain
  std::deque<Command> inbox;
  std::unordered_set<std::string> live_ids;  // submitted and not yet finished
  bool accepting = true;
  bool stop = false;

  std::atomic<bool> healthy{true};
  std::atomic<int> num_unfinished{0};
  std::thread thread;

  // Owned by the loop thread only.
  std::unordered_map<std::string, OutputCallback> callbacks;

  // Published by the loop after each step.
  std::mutex stats_mu;
  EngineStats stats;

  void loop();
  void apply(Command& cmd);
  void deliver(RequestOutput&& out);
  void fail_everything(const std::string& message);
  void publish_stats();
};

void AsyncEngine::State::apply(Command& cmd) {
  if (auto* add = std::get_if<AddCommand>(&cmd)) {
    const std::string id = add->request->request_id;
    callbacks[id] = std::move(add->on_output);
    core->submit(std::move(add->request));
  } else if (auto* abort = std::get_if<AbortCommand>(&cmd)) {
    core->abort_request(abort->request_id);
  } else {
    core->abort_all();
  }
}

void AsyncEngine::State::deliver(RequestOutput&& out) {
  auto it = callbacks.find(out.request_id);
  if (it == callbacks.end()) return;
  const bool finished = out.finished;
  OutputCallback cb = finished ? std::move(it->second) : it->second;
  if (finished) {
    callbacks.erase(it);
    {
      std::lock_guard<std::mutex> lock(mu);
      live_ids.erase(out.request_id);
    }
    num_unfinished.fetch_sub(1);
    finished_cv.notify_all();
  }
  try {
    cb(std::move(out));
  } catch (const std::exception& e) {
    log::error(std::string("output callback threw: ") + e.what());
  }
}

void AsyncEngine::State::publish_stats() {
  EngineStats s = core->take_stats();
  std::lock_guard<std::mutex> lock(stats_mu);
  auto append = [](std::vector<double>& to, std::vector<double>& from) {
    for (double x : from) engine::add_latency_sample(to, x);
  };
  append(s.ttft_samples, stats.ttft_samples);
  append(s.itl_samples, stats.itl_samples);
  append(s.e2e_samples, stats.e2e_samples);
  stats = std::move(s);
}

void AsyncEngine::State::fail_everything(const std::string& message) {
  healthy.store(false);
  std::vector<std::string> ids;
  for (const auto& [id, cb] : callbacks) ids.push_back(id);
  for (const std::string& id : ids) {
    RequestOutput out;
    out.request_id = id;
    out.finished = true;
    out.error = message;
    CompletionOutput c;
    c.finish_reason = FinishReason::kError;
    out.outputs.push_back(std::move(c));
    deliver(std::move(out));
  }
}

void AsyncEngine::State::loop() {
  std::deque<Command> commands;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      wake_cv.wait(lock, [&] { return !inbox.empty() || stop || core->has_unfinished(); });
      if (stop && inbox.empty() && !core->has_unfinished()) return;
      commands.swap(inbox);
    }
    try {
      for (Command& cmd : commands) apply(cmd);
      commands.clear();
      std::vector<RequestOutput> outputs = core->step();
      // Stats first: a caller woken by a callback then reads counters that include that output.
      publish_stats();
      for (RequestOutput& out : outputs) deliver(std::move(out));
    } catch (const std::exception& e) {
      log::error(std::string("engine loop failed: ") + e.what());
      fail_everything(std::string("engine failed: ") + e.what());
      std::lock_guard<std::mutex> lock(mu);
      // Requests queued after the failure get their error from add_request; drop what is left.
      for (Command& cmd : inbox) {
        if (auto* add = std::get_if<AddCommand>(&cmd)) {
          live_ids.erase(add->request->request_id);
          num_unfinished.fetch_sub(1);
        }
      }
      inbox.clear();
      finished_cv.notify_all();
      return;
    }
  }
}

AsyncEngine::AsyncEngine(const EngineArgs& args) : state_(std::make_unique<State>()) {
  state_->core = std::make_unique<EngineCore>(args);
  state_->thread = std::thread([s = state_.get()] { s->loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(0.0); }

void AsyncEngine::add_request(const std::string& request_id, const PromptInput& prompt,
                              const SamplingParams& params, OutputCallback on_output,
                              const RequestOptions& options) {
  if (!on_output) invalid_argument("add_request: an output callback is required");
  auto req = state_->core->make_request(request_id, prompt, params, options, /*stream_deltas=*/true);
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->healthy.load()) throw_error(ErrorKind::kInternal, "engine is not running (it failed earlier)");
  if (!state_->accepting) throw_error(ErrorKind::kResourceExhausted, "engine is shutting down");
  if (!state_->live_ids.insert(request_id).second) {
    invalid_argument("request_id: duplicate '" + request_id + "'");
  }
  state_->num_unfinished.fetch_add(1);
  state_->inbox.push_back(AddCommand{std::move(req), std::move(on_output)});
  state_->wake_cv.notify_one();
}

void AsyncEngine::abort_request(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->live_ids.count(request_id) == 0) return;
  state_->inbox.push_back(AbortCommand{request_id});
  state_->wake_cv.notify_one();
}

void AsyncEngine::shutdown(double timeout_s) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->accepting = false;
  if (!state_->thread.joinable()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(timeout_s, 0.0));
  state_->finished_cv.wait_until(lock, deadline, [&] { return state_->live_ids.empty() || !state_->healthy; });
  if (!state_->live_ids.empty()) state_->inbox.push_back(AbortAllCommand{});
  state_->stop = true;
  state_->wake_cv.notify_one();
  lock.unlock();
  state_->thread.join();
}

bool AsyncEngine::healthy() const {
  return state_->healthy.load() && state_->core->runner_healthy();
}

EngineStats AsyncEngine::take_stats() {
  std::lock_guard<std::mutex> lock(state_->stats_mu);
  EngineStats s = state_->stats;
  state_->stats.ttft_samples.clear();
  state_->stats.itl_samples.clear();
  state_->stats.e2e_samples.clear();
  return s;
}

int AsyncEngine::num_unfinished() const { return state_->num_unfinished.load(); }
const tok::Tokenizer& AsyncEngine::tokenizer() const { return state_->core->tokenizer(); }
std::shared_ptr<const tok::Tokenizer> AsyncEngine::tokenizer_ptr() const { return state_->core->tokenizer_ptr(); }
const ModelInfo& AsyncEngine::model_info() const { return state_->core->model_info(); }
const EngineArgs& AsyncEngine::args() const { return state_->core->args(); }

}  // namespace pagellm
