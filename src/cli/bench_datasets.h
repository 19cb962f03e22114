// The prompt datasets of `pagellm bench serve`, with `vllm bench serve`'s names and flags:
//   random   token-id prompts (--random-input-len / -output-len / -range-ratio / -prefix-len);
//   sonnet   vLLM's sonnet benchmark: lines of a poem file (--dataset-path, e.g. vLLM's
//            benchmarks/sonnet.txt) after "Pick as many lines as you can from these poem lines:",
//            --sonnet-prefix-len tokens of lines shared by every prompt, --sonnet-input-len in
//            all, formatted with the tokenizer's chat template for /v1/completions;
//   sharegpt the ShareGPT JSON (first human turn = prompt, the reply's token count = output length
//            unless --sharegpt-output-len; pairs vLLM skips are skipped: < 4 tokens either side,
//            prompt > 1024 or prompt + output > 2048 tokens);
//   custom   JSONL with a "prompt" per line (--custom-output-len); `jsonl` is the same with
//            per-line "output_len" / "max_tokens".
// Token counts come from the model's tokenizer (--tokenizer, else --model when it is a folder).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagellm/llm.h"
#include "server/bench_client.h"

namespace pagellm::cli {

struct DatasetFlags {
  std::string name = "random";
  std::string path;
  std::string tokenizer;       // folder with tokenizer.json (sonnet, sharegpt)
  bool chat = false;           // prompts go to /v1/chat/completions
  int num_prompts = 100;
  int input_len = 32;
  int output_len = 32;
  double range_ratio = 0.0;    // lengths drawn from [len * (1 - r), len * (1 + r)]
  int prefix_len = 0;          // random: shared leading tokens
  int vocab_size = 512;        // random token ids are drawn from [3, vocab_size)
  int sonnet_input_len = 550, sonnet_output_len = 150, sonnet_prefix_len = 200;
  int sharegpt_output_len = 0;  // 0: the reply's length
  int custom_output_len = 256;
  uint64_t seed = 0;
};

// `count` prompts of `len` token ids drawn uniformly from [lo, hi], seeded (the offline benches'
// random prompts: `bench throughput`, `bench latency`).
std::vector<PromptInput> random_token_prompts(int count, int len, int32_t lo, int32_t hi,
                                              uint64_t seed);

// The prompts of the dataset `f.name`; one-line errors for missing files and malformed rows.
std::vector<server::BenchPrompt> load_dataset(const DatasetFlags& f);

}  // namespace pagellm::cli
