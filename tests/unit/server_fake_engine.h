// A deterministic stand-in for the engine so the HTTP layer is tested without a model. Tokens are
// bytes shifted by 3 (ids 0..2 are <unk>, <s>, </s>); generation emits one letter per step per
// sample, derived from the prompt, the step and (when sampling) the seed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "server/engine_client.h"

namespace pagellm::server::testing {

class FakeEngine : public EngineClient {
 public:
  explicit FakeEngine(int max_model_len = 256, std::chrono::microseconds step = std::chrono::microseconds(500))
      : step_(step) {
    info_.name = "fake-model";
    info_.max_model_len = max_model_len;
    info_.vocab_size = 259;
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeEngine() override { stop(); }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void add_request(const std::string& id, const PromptInput& prompt, const SamplingParams& params,
                   OutputCallback on_output, const RequestOptions&) override {
    if (reject_next_.exchange(false)) throw Error(ErrorKind::kInvalidArgument, "fake engine rejects this request");
    std::lock_guard lock(mutex_);
    if (requests_.count(id)) throw Error(ErrorKind::kInvalidArgument, "duplicate request id " + id);
    Req r;
    r.prompt = prompt.token_ids;
    r.params = params;
    r.cb = std::move(on_output);
    r.samples.resize(static_cast<size_t>(params.n));
    requests_[id] = std::move(r);
    ++num_added_;
    cv_.notify_all();
  }
  void abort_request(const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = requests_.find(id);
    if (it != requests_.end()) it->second.aborted = true;
    ++num_abort_calls_;
  }
  bool healthy() const override { return healthy_.load(); }
  EngineStats take_stats() override {
    std::lock_guard lock(mutex_);
    EngineStats s;
    s.num_running = static_cast<int>(requests_.size());
    s.kv_usage = 0.01 * static_cast<double>(requests_.size());
    s.requests_finished_abort = num_finished_abort_;
    s.requests_finished_length = num_finished_length_;
    return s;
  }
  const ModelInfo& model_info() const override { return info_; }
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(1);
    for (unsigned char c : text) ids.push_back(static_cast<int32_t>(c) + 3);
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 3) out += static_cast<char>(id - 3);
      else if (!skip_special) out += id == 1 ? "<s>" : id == 2 ? "</s>" : "<unk>";
    }
    return out;
  }
  int32_t vocab_size() const override { return info_.vocab_size; }
  std::string render_chat(const nlohmann::json& messages, bool add_generation_prompt,
                          const nlohmann::json&) const override {
    std::string out;
    for (const auto& m : messages) {
      out += m["role"].get<std::string>() + ": " + (m["content"].is_string() ? m["content"].get<std::string>() : "") + "\n";
    }
    if (add_generation_prompt) out += "assistant:";
    return out;
  }
  void shutdown(double) override { stop(); }

  void set_healthy(bool h) { healthy_ = h; }
  void reject_next() { reject_next_ = true; }
  int num_active() {
    std::lock_guard lock(mutex_);
    return static_cast<int>(requests_.size());
  }
  int num_added() const { return num_added_.load(); }
  int num_abort_calls() const { return num_abort_calls_.load(); }

  // The letter the fake emits for (prompt, step, sample); tests use it to predict outputs.
  static char letter(const std::vector<int32_t>& prompt, const SamplingParams& p, int step, int sample) {
    uint64_t h = 0;
    for (int32_t id : prompt) h = h * 31 + static_cast<uint64_t>(id);
    if (!p.greedy()) h += p.seed.value_or(12345) * 7 + static_cast<uint64_t>(sample) * 13;
    return static_cast<char>('a' + (h + static_cast<uint64_t>(step)) % 26);
  }

 private:
  struct Sample {
    int num_generated = 0;
    std::string text;
    bool done = false;
  };
  struct Req {
    std::vector<int32_t> prompt;
    SamplingParams params;
    OutputCallback cb;
    std::vector<Sample> samples;
    bool aborted = false;
  };

  void loop() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (requests_.empty()) {
        cv_.wait(lock, [this] { return stopping_ || !requests_.empty(); });
        continue;
      }
      std::vector<std::pair<OutputCallback, RequestOutput>> outputs;
      for (auto it = requests_.begin(); it != requests_.end();) {
        RequestOutput out = step_request(it->first, it->second);
        const bool finished = out.finished;
        outputs.emplace_back(finished ? std::move(it->second.cb) : it->second.cb, std::move(out));
        it = finished ? requests_.erase(it) : std::next(it);
      }
      lock.unlock();
      for (auto& [cb, out] : outputs) cb(std::move(out));
      std::this_thread::sleep_for(step_);
      lock.lock();
    }
    // Unfinished requests get a final abort output, as AsyncEngine's destructor promises.
    for (auto& [id, r] : requests_) {
      RequestOutput out;
      out.request_id = id;
      out.finished = true;
      for (size_t i = 0; i < r.samples.size(); ++i) {
        CompletionOutput co;
        co.index = static_cast<int>(i);
        co.finish_reason = FinishReason::kAbort;
        out.outputs.push_back(co);
      }
      auto cb = std::move(r.cb);
      lock.unlock();
      cb(std::move(out));
      lock.lock();
    }
    requests_.clear();
  }

  RequestOutput step_request(const std::string& id, Req& r) {
    RequestOutput out;
    out.request_id = id;
    out.prompt_token_ids = r.prompt;
    bool all_done = true;
    for (size_t i = 0; i < r.samples.size(); ++i) {
      Sample& s = r.samples[i];
      if (s.done) continue;
      CompletionOutput co;
      co.index = static_cast<int>(i);
      if (r.aborted) {
        co.finish_reason = FinishReason::kAbort;
        s.done = true;
        ++num_finished_abort_;
      } else {
        char c = letter(r.prompt, r.params, s.num_generated, static_cast<int>(i));
        ++s.num_generated;
        co.text = std::string(1, c);
        co.token_ids = {static_cast<int32_t>(c) + 3};
        if (r.params.logprobs) {
          TokenLogprobs lp{co.token_ids[0], -0.5f, {}};
          for (int k = 0; k < *r.params.logprobs; ++k) lp.top.emplace_back(3 + 'a' + k, -1.0f - static_cast<float>(k));
          co.logprobs.push_back(lp);
        }
        s.text += c;
        for (const auto& stop : r.params.stop) {
          if (s.text.size() >= stop.size() && s.text.compare(s.text.size() - stop.size(), stop.size(), stop) == 0) {
            co.finish_reason = FinishReason::kStop;
            co.stop_reason = stop;
            co.text = r.params.include_stop_str_in_output ? co.text : std::string();
            s.done = true;
          }
        }
        if (!s.done && s.num_generated >= r.params.max_tokens) {
          co.finish_reason = FinishReason::kLength;
          s.done = true;
          ++num_finished_length_;
        }
      }
      all_done &= s.done;
      out.outputs.push_back(std::move(co));
    }
    out.finished = all_done;
    return out;
  }

  std::chrono::microseconds step_;
  ModelInfo info_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::string, Req> requests_;
  bool stopping_ = false;
  std::atomic<bool> healthy_{true};
  std::atomic<bool> reject_next_{false};
  std::atomic<int> num_added_{0};
  std::atomic<int> num_abort_calls_{0};
  uint64_t num_finished_abort_ = 0;
  uint64_t num_finished_length_ = 0;
  std::thread thread_;
};

}  // namespace pagellm::server::testing
