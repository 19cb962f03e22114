// LLMEngine (step-wise) and LLM (offline batches) over EngineCore.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

#include "common/error.h"
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

LLM::LLM(const EngineArgs& args) : engine_(std::make_unique<LLMEngine>(args)) {}
LLM::~LLM() = default;

std::vector<RequestOutput> LLM::generate(const std::vector<PromptInput>& prompts, const SamplingParams& params,
                                         bool show_progress) {
  return generate(prompts, std::vector<SamplingParams>(prompts.size(), params), show_progress);
}

std::vector<RequestOutput> LLM::generate(const std::vector<PromptInput>& prompts,
                                         const std::vector<SamplingParams>& params, bool show_progress) {
  if (params.size() != prompts.size()) {
    invalid_argument("generate: " + std::to_string(params.size()) + " sampling params for " +
                     std::to_string(prompts.size()) + " prompts");
  }
  // Ids unique across calls on the same engine; index recovered from the suffix.
  static std::atomic<uint64_t> batch_counter{0};
  const std::string prefix = "llm-" + std::to_string(batch_counter++) + "-";
  std::vector<RequestOutput> results(prompts.size());
  size_t num_added = 0;
  try {
    for (size_t i = 0; i < prompts.size(); ++i, ++num_added) {
      engine_->add_request(prefix + std::to_string(i), prompts[i], params[i]);
    }
  } catch (...) {
    // Leave the engine clean: nothing of this batch keeps running.
    for (size_t i = 0; i < num_added; ++i) engine_->abort_request(prefix + std::to_string(i));
    while (engine_->has_unfinished_requests()) engine_->step();
    throw;
  }
  ProgressBar bar(prompts.size());
  size_t num_done = 0;
  uint64_t num_prompt_tokens = 0;
  uint64_t num_output_tokens = 0;
  while (engine_->has_unfinished_requests()) {
    for (RequestOutput& out : engine_->step()) {
      if (!out.finished || out.request_id.rfind(prefix, 0) != 0) continue;
      const size_t index = std::stoull(out.request_id.substr(prefix.size()));
      num_prompt_tokens += out.prompt_token_ids.size();
      for (const auto& c : out.outputs) num_output_tokens += c.token_ids.size();
      results[index] = std::move(out);
      ++num_done;
    }
    if (show_progress) bar.update(num_done, num_prompt_tokens, num_output_tokens);
  }
  if (show_progress) {
    bar.update(num_done, num_prompt_tokens, num_output_tokens, true);
    bar.finish();
  }
  return results;
}

}  // namespace pagellm
