// Results of generation, mirroring vLLM's RequestOutput / CompletionOutput.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pagellm {

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"; nullptr for kNone

// Logprob of the chosen token plus the top-N alternatives at one position.
struct TokenLogprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // best first, N entries
};

struct CompletionOutput {
  int index = 0;                    // sample index within the request
  std::string text;                 // full text so far (or the delta, for streaming deltas)
  std::vector<int32_t> token_ids;   // full ids so far (or the delta)
  double cumulative_logprob = 0.0;
  std::vector<TokenLogprobs> logprobs;  // when requested; aligned with token_ids
  FinishReason finish_reason = FinishReason::kNone;
  std::optional<std::string> stop_reason;  // the stop string hit, when finish_reason is stop by string
  std::optional<int32_t> stop_token;       // the stop token id hit
};

struct RequestOutput {
  std::string request_id;
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;
  std::vector<std::optional<TokenLogprobs>> prompt_logprobs;  // first entry empty, when requested
  std::vector<CompletionOutput> outputs;
  bool finished = false;
  int num_cached_tokens = 0;  // prompt tokens served from the prefix cache
  std::string error;          // set when the request failed inside the engine (finish reason kError)
  std::vector<float> embedding;  // pooling requests, in the final output
};

}  // namespace pagellm
