// Host side of the GPU sampler: turns the engine's per-seq sampling context into the kernel's
// plain-data rows (backends/cuda/sample_rows.h) and the kernel's outputs back into TokenLogprobs.
// CUDA-free, so it lives in pagellm_core and is unit-tested without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/sample_rows.h"
#include "engine/scheduler_output.h"
#include "pagellm/outputs.h"

namespace pagellm::runner {

// The sampling row of `seq` (params must be set). Appends the row's id lists to `ids` (banned ids,
// then the prompt ids when a repetition penalty is set, then the output ids when any penalty is
// set, then the logit_bias (id, float bits) pairs, then the structured-output mask words when the
// seq has one) and records where they start;
// u = engine::sample_uniform(seed, num output tokens). copy_mask false: the mask words are left
// out (mask_begin -1): place_sample_masks gives them a place after every list, and
// put_sample_mask writes them there once they are built (wait_for_masks).
cuda::SampleRow pack_sample_row(const engine::ScheduledSeq& seq, std::vector<int32_t>& ids,
                                bool copy_mask = true);
// Places the masks that pack_sample_row left out, one after another from `lists_size` (the id
// lists' length); returns the buffer's length with them.
size_t place_sample_masks(std::span<cuda::SampleRow> rows, size_t lists_size);
// Copies seq's mask words to their place in `buffer` (row: what pack_sample_row returned for seq,
// placed). Nothing when the row has no mask.
void put_sample_mask(const engine::ScheduledSeq& seq, const cuda::SampleRow& row,
                     std::span<int32_t> buffer);

// A prompt-logprob row: the raw logprob of `next_token` and the seq's prompt_logprobs top-N.
// Throws if next_token is outside [0, vocab).
cuda::SampleRow pack_score_row(const engine::ScheduledSeq& seq, int32_t next_token, int vocab);

// The kernel's answer for one row as the engine's TokenLogprobs (top-N best first).
TokenLogprobs to_token_logprobs(const cuda::SampleOutput& out);

}  // namespace pagellm::runner
