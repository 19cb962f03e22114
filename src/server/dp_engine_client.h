// EngineClient over N engine replicas (--data-parallel-size): the HTTP layer sees one engine. New
// requests are routed by engine::DpRouter (fewest outstanding tokens, prefix-cache affinity);
// aborts go to the replica that owns the request; stats are kept per replica for /metrics. The
// server is healthy only while every replica is; a dead replica receives no new requests.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "engine/dp_router.h"
#include "server/engine_client.h"

namespace pagellm::server {

class DataParallelClient : public EngineClient {
 public:
  // `replicas` serve the same model (the first one answers tokenizer and chat-template calls).
  // Throws pagellm::Error (kInvalidArgument) when there is none.
  DataParallelClient(std::vector<std::unique_ptr<EngineClient>> replicas,
                     engine::RouterConfig config);
  // Stops the replicas first: their last outputs call back into this router.
  ~DataParallelClient() override;

  void add_request(const std::string& request_id, const PromptInput& prompt,
                   const SamplingParams& params, OutputCallback on_output,
                   const RequestOptions& options) override;
  void abort_request(const std::string& request_id) override;
  bool healthy() const override;
  EngineStats take_stats() override;
  std::vector<EngineStats> take_engine_stats() override;
  const ModelInfo& model_info() const override { return replicas_[0]->model_info(); }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return replicas_[0]->vocab_size(); }
  std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt,
                          const nlohmann::json& extra_context) const override;
  // Shuts the replicas down concurrently, so all of them share the one deadline.
  void shutdown(double timeout_s) override;

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  // The router's view of the replicas' loads (a copy).
  std::vector<engine::ReplicaLoad> loads() const;

 private:
  OutputCallback track(const std::string& request_id, OutputCallback on_output);

  std::vector<std::unique_ptr<EngineClient>> replicas_;
  mutable std::mutex mutex_;  // guards router_
  engine::DpRouter router_;
};

}  // namespace pagellm::server
