#include "server/dp_engine_client.h"

#include <thread>

#include "common/error.h"
#include "engine/stats.h"

namespace pagellm::server {

namespace {

std::vector<std::unique_ptr<EngineClient>> checked(
    std::vector<std::unique_ptr<EngineClient>> replicas) {
  if (replicas.empty()) invalid_argument("data parallel: needs at least one engine replica");
  for (const auto& r : replicas)
    if (!r) invalid_argument("data parallel: an engine replica is missing");
  return replicas;
}

}  // namespace

DataParallelClient::DataParallelClient(std::vector<std::unique_ptr<EngineClient>> replicas,
                                       engine::RouterConfig config)
    : replicas_(checked(std::move(replicas))),
      router_(static_cast<int>(replicas_.size()), config) {}

DataParallelClient::~DataParallelClient() {
  for (auto& r : replicas_) r->shutdown(0.0);
}

OutputCallback DataParallelClient::track(const std::string& request_id, OutputCallback on_output) {
  return [this, request_id, cb = std::move(on_output)](RequestOutput&& out) {
    {
      std::lock_guard lock(mutex_);
      if (out.finished) {
        router_.finish(request_id);
      } else {
        int64_t num_new = 0;
        for (const CompletionOutput& c : out.outputs)
          num_new += static_cast<int64_t>(c.token_ids.size());
        router_.on_progress(request_id, num_new);
      }
    }
    cb(std::move(out));
  };
}

void DataParallelClient::add_request(const std::string& request_id, const PromptInput& prompt,
                                     const SamplingParams& params, OutputCallback on_output,
                                     const RequestOptions& options) {
  if (!on_output) invalid_argument("add_request: an output callback is required");
  const std::vector<int32_t> ids =
      prompt.token_ids.empty() ? encode(prompt.text, true) : prompt.token_ids;
  const int64_t cost =
      engine::request_cost(static_cast<int64_t>(ids.size()), params, model_info().max_model_len);
  int replica = -1;
  {
    std::lock_guard lock(mutex_);
    for (size_t r = 0; r < replicas_.size(); ++r)
      router_.set_healthy(static_cast<int>(r), replicas_[r]->healthy());
    replica = router_.route(request_id, ids, options.cache_salt, cost);
  }
  if (replica < 0)
    throw_error(ErrorKind::kInternal, "engine is not running (every replica has failed)");
  try {
    replicas_[size_t(replica)]->add_request(request_id, prompt, params,
                                            track(request_id, std::move(on_output)), options);
  } catch (...) {
    std::lock_guard lock(mutex_);
    router_.finish(request_id);
    throw;
  }
}

void DataParallelClient::abort_request(const std::string& request_id) {
  int replica = -1;
  {
    std::lock_guard lock(mutex_);
    replica = router_.owner(request_id);
  }
  if (replica >= 0) replicas_[size_t(replica)]->abort_request(request_id);
}

bool DataParallelClient::healthy() const {
  for (const auto& r : replicas_)
    if (!r->healthy()) return false;
  return true;
}

std::vector<EngineStats> DataParallelClient::take_engine_stats() {
  std::vector<EngineStats> per;
  for (auto& r : replicas_) per.push_back(r->take_stats());
  return per;
}

EngineStats DataParallelClient::take_stats() { return engine::sum_stats(take_engine_stats()); }

std::vector<int32_t> DataParallelClient::encode(std::string_view text,
                                                bool add_special_tokens) const {
  return replicas_[0]->encode(text, add_special_tokens);
}

std::string DataParallelClient::decode(std::span<const int32_t> ids,
                                       bool skip_special_tokens) const {
  return replicas_[0]->decode(ids, skip_special_tokens);
}

std::string DataParallelClient::render_chat(const nlohmann::json& messages,
                                            bool add_generation_prompt,
                                            const nlohmann::json& extra_context) const {
  return replicas_[0]->render_chat(messages, add_generation_prompt, extra_context);
}

void DataParallelClient::shutdown(double timeout_s) {
  std::vector<std::thread> threads;
  for (auto& r : replicas_) threads.emplace_back([&r, timeout_s] { r->shutdown(timeout_s); });
  for (std::thread& t : threads) t.join();
}

std::vector<engine::ReplicaLoad> DataParallelClient::loads() const {
  std::lock_guard lock(mutex_);
  return router_.loads();
}

}  // namespace pagellm::server
