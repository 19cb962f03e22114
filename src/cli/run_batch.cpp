// `pagellm run-batch`: an OpenAI batch file run offline through the server's own routes, like
// `vllm run-batch -i requests.jsonl -o results.jsonl --model MODEL`. Every request of the file is
// handed to the routes at once (the engine batches them as a server's concurrent requests) on one
// thread that stands in for the HTTP server's strand; the results are written in the file's order
// (server/batch_file.h for the formats). Requests the routes answer with an error get their error
// in their output line; a malformed file fails in one line before the model loads.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/serve_setup.h"
#include "cli/vllm_compat.h"
#include "common/error.h"
#include "common/logging.h"
#include "runner/model_loader.h"
#include "server/batch_file.h"
#include "server/routes.h"

namespace pagellm::cli {
namespace {

using nlohmann::json;

// One thread running posted tasks in order: the routes' strand.
class Strand {
 public:
  Strand() : thread_([this] { run(); }) {}
  ~Strand() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }
  // Returns once every task posted before the call has run.
  void drain() {
    std::promise<void> done;
    post([&done] { done.set_value(); });
    done.get_future().wait();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        fn = std::move(tasks_.front());
        tasks_.pop_front();
      }
      fn();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;
};

// The results of the requests handed to the routes, filled as their responses complete.
struct Results {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::optional<json>> lines;
  size_t done = 0;
  void set(size_t i, json line) {
    {
      std::lock_guard lock(mutex);
      lines[i] = std::move(line);
      ++done;
    }
    cv.notify_all();
  }
};

// A response kept in memory instead of written to a socket.
class CapturingWriter : public server::ResponseWriter {
 public:
  CapturingWriter(Strand& strand, std::shared_ptr<Results> results, size_t index,
                  const server::BatchRequestLine& request)
      : strand_(strand), results_(std::move(results)), index_(index), request_(request) {}
  void respond(int status, const std::string&, std::string body, const std::string&) override {
    json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) parsed = body;
    results_->set(index_, server::batch_output(request_, status, std::move(parsed)));
  }
  // Streams are refused before the routes see them (batch_request_refusal); one that starts anyway
  // ends as that refusal.
  void start_stream(int, const std::string&) override {}
  void write_chunk(std::string) override {}
  void end_stream() override {
    results_->set(index_,
                  server::batch_error_output(request_, "Request must not be sent in stream mode"));
  }
  void on_disconnect(std::function<void()>) override {}
  bool disconnected() const override { return false; }
  void post(std::function<void()> fn) override { strand_.post(std::move(fn)); }

 private:
  Strand& strand_;
  std::shared_ptr<Results> results_;  // shared: a writer the routes keep never outlives it
  size_t index_;
  const server::BatchRequestLine& request_;
};

struct BatchFlags {
  std::string input_file, output_file, served_model_name;
  bool disable_log_requests = false;
};

void add_batch_flags(CLI::App& app, BatchFlags& f) {
  app.add_option("-i,--input-file", f.input_file, "the batch: one request per JSONL line")
      ->required();
  app.add_option("-o,--output-file", f.output_file,
                 "the results, one JSONL line per request ('-': stdout)")
      ->required();
  app.add_option("--served-model-name", f.served_model_name,
                 "model name the requests may give (default: the model as given)");
  app.add_flag("--disable-log-requests", f.disable_log_requests,
               "no per-request log lines (the default; --enable-log-requests turns them on)");
}

std::string read_input(const std::string& path) {
  if (path.starts_with("http://") || path.starts_with("https://"))
    invalid_argument("--input-file " + path + ": URLs are not read here; download the file first");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kNotFound, "--input-file " + path + ": cannot open");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Hands every runnable request to the routes and waits for all of them (or for a dead engine);
// the tasks they left on the strand have run when it returns.
std::vector<json> run_requests(Strand& strand, server::ApiServer& api,
                               const server::EngineClient& client,
                               const std::vector<server::BatchRequestLine>& requests) {
  const auto shared = std::make_shared<Results>();
  Results& results = *shared;
  results.lines.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string refusal = server::batch_request_refusal(requests[i]);
    if (!refusal.empty()) {
      results.set(i, server::batch_error_output(requests[i], refusal));
      continue;
    }
    server::HttpRequest http{
        "POST", requests[i].url, "", "application/json", requests[i].body.dump(), "run-batch"};
    auto writer = std::make_shared<CapturingWriter>(strand, shared, i, requests[i]);
    strand.post(
        [&api, http = std::move(http), writer]() mutable { api.handle(std::move(http), writer); });
  }
  {
    std::unique_lock lock(results.mutex);
    size_t reported = 0;
    while (!results.cv.wait_for(lock, std::chrono::seconds(5),
                                [&] { return results.done == requests.size(); })) {
      if (!client.healthy()) {
        lock.unlock();
        strand.drain();  // what the routes left queued runs while they exist
        throw_error(ErrorKind::kInternal, "run-batch: the engine has stopped");
      }
      if (results.done != reported)
        log::info("run-batch: " + std::to_string(results.done) + " / " +
                  std::to_string(requests.size()) + " requests done");
      reported = results.done;
    }
  }
  strand.drain();
  std::vector<json> lines;
  for (auto& l : results.lines) lines.push_back(std::move(*l));
  return lines;
}

void write_output(const std::string& path, const std::vector<json>& lines) {
  std::ofstream file;
  if (path != "-") {
    file.open(path, std::ios::binary | std::ios::trunc);
    if (!file) throw_error(ErrorKind::kNotFound, "--output-file " + path + ": cannot write");
  }
  std::ostream& out = path == "-" ? std::cout : file;
  for (const json& l : lines) out << l.dump() << '\n';
  out.flush();
}

// The output file's folder must exist (checked before the model loads; nothing is created).
void check_output_place(const std::string& path) {
  if (path == "-") return;
  if (path.starts_with("http://") || path.starts_with("https://"))
    invalid_argument("--output-file " + path + ": URLs are not written here; give a file");
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw_error(ErrorKind::kNotFound, "--output-file " + path + ": no folder " + parent.string());
}

int run(int argc, char** argv) {
  CLI::App app{"Run an OpenAI batch file offline (like `vllm run-batch`)"};
  EngineArgs args;
  add_engine_flags(app, args);
  VllmCompatFlags vllm;
  add_vllm_compat_flags(app, vllm);
  BatchFlags f;
  add_batch_flags(app, f);
  PAGELLM_PARSE(app, argc, argv);
  apply_vllm_compat_flags(vllm, args);
  // The file is read and checked before the model loads, and the output place too.
  const std::vector<server::BatchRequestLine> requests =
      server::parse_batch_file(read_input(f.input_file), f.input_file);
  check_output_place(f.output_file);
  const std::string model_as_given = args.model;
  args.resolve();
  if (const std::optional<int> code = runner::run_worker_process(args)) return *code;
  server::ServerConfig config;
  apply_vllm_server_flags(vllm, config);
  const io::GenerationConfig generation = resolve_generation_config(vllm, args);
  Strand strand;  // outlives the engines and routes whose callbacks it runs
  const EngineClients engines = start_engines(args, chat_config(args));
  apply_model_settings(f.served_model_name, model_as_given, args, generation, *engines.client,
                       config);
  config.log_requests = vllm.enable_log_requests && !f.disable_log_requests;
  server::ApiServer api(*engines.client, config);
  log::info("run-batch: " + std::to_string(requests.size()) + " requests from " + f.input_file);
  const std::vector<json> lines = run_requests(strand, api, *engines.client, requests);
  write_output(f.output_file, lines);
  size_t ok = 0;
  for (const json& l : lines) ok += l["response"]["status_code"] == 200;
  log::info("run-batch: " + std::to_string(ok) + " of " + std::to_string(lines.size()) +
            " requests succeeded; results in " + f.output_file);
  return 0;
}

}  // namespace

PAGELLM_COMMAND("run-batch", "run an OpenAI batch file offline (like `vllm run-batch`)", run);

}  // namespace pagellm::cli
