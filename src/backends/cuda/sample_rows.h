// Plain-data description of the GPU sampler's per-row inputs and outputs (sampler.cu). CUDA-free so
// that the host-side packing (runner/sample_pack.h) builds and is unit-tested without the toolkit.
#pragma once

#include <cstdint>

namespace pagellm::cuda {

constexpr int kMaxTopLogprobs = 20;  // SamplingParams::kMaxLogprobs

// One logits row to sample or score. The row's id lists are consecutive in the batch's flat id
// buffer, starting at ids_begin: num_banned banned ids, then num_prompt prompt ids, then num_output
// output ids. The prompt ids are packed only with a repetition penalty, the output ids only with a
// repetition, frequency or presence penalty. Ids outside the vocabulary are ignored (as on the
// CPU). A structured-output row also packs its allowed-token mask there: num_mask_words uint32
// words (stored as int32) from mask_begin; token t may be sampled iff bit t % 32 of word t / 32 is
// set (ids past the mask are disallowed). The kernel applies it to the row before anything else.
// logit_bias pairs are packed there too (bias_begin, num_bias).
struct SampleRow {
  double u = 0.0;            // engine::sample_uniform(seed, num_output_tokens), in [0, 1)
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t top_k = -1;   // <= 0: off
  int32_t num_top = 0;  // top-N raw logprobs to return, 0..kMaxTopLogprobs
  int32_t score_token =
      -1;  // >= 0: a prompt-logprob row scoring this token (no penalties, no draw)
  int32_t ids_begin = 0;
  int32_t num_banned = 0;
  int32_t num_prompt = 0;
  int32_t num_output = 0;
  int32_t mask_begin = 0;
  int32_t num_mask_words = 0;  // 0: unconstrained
  // logit_bias: num_bias (token id, bias as float bits) pairs from bias_begin, ids distinct; each
  // bias is added to its logit before the penalties (as the CPU does, after the bans).
  int32_t bias_begin = 0;
  int32_t num_bias = 0;
};

// What comes back per row: the token (sampled or scored), its raw-model logprob and the top-N.
struct SampleOutput {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t num_top = 0;
  int32_t top_ids[kMaxTopLogprobs] = {};
  float top_logprobs[kMaxTopLogprobs] = {};
};

}  // namespace pagellm::cuda
