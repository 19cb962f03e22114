#include "runner/sample_pack.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "engine/sampler.h"

namespace pagellm::runner {
namespace {

int32_t clamp_top(int n) { return std::clamp(n, 0, cuda::kMaxTopLogprobs); }

// The flat id buffer is indexed with int32 offsets.
int32_t checked_size(size_t n) {
  if (n > size_t(std::numeric_limits<int32_t>::max()))
    throw_error(ErrorKind::kInternal, "gpu sampler: id lists exceed 2^31 entries in one step");
  return static_cast<int32_t>(n);
}

void append(std::vector<int32_t>& ids, std::span<const int32_t> list) {
  ids.insert(ids.end(), list.begin(), list.end());
}

}  // namespace

cuda::SampleRow pack_sample_row(const engine::ScheduledSeq& seq, std::vector<int32_t>& ids,
                                bool copy_mask) {
  if (seq.params == nullptr)
    throw_error(ErrorKind::kInternal,
                "gpu sampler: seq " + std::to_string(seq.seq_id) + " has no sampling params");
  const SamplingParams& p = *seq.params;
  cuda::SampleRow row;
  row.u = p.greedy() ? 0.0 : engine::sample_uniform(seq.seed, seq.output_token_ids.size());
  row.temperature = p.temperature;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.repetition_penalty = p.repetition_penalty;
  row.frequency_penalty = p.frequency_penalty;
  row.presence_penalty = p.presence_penalty;
  row.top_k = p.top_k;
  row.num_top = clamp_top(p.logprobs.value_or(0));
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool frequency = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  row.ids_begin = checked_size(ids.size());
  row.num_banned = checked_size(seq.banned_token_ids.size());
  append(ids, seq.banned_token_ids);
  if (repetition) {
    row.num_prompt = checked_size(seq.prompt_token_ids.size());
    append(ids, seq.prompt_token_ids);
  }
  if (repetition || frequency) {
    row.num_output = checked_size(seq.output_token_ids.size());
    append(ids, seq.output_token_ids);
  }
  if (!p.logit_bias.empty()) {
    row.bias_begin = checked_size(ids.size());
    row.num_bias = checked_size(p.logit_bias.size());
    for (const auto& [id, bias] : p.logit_bias) {
      ids.push_back(id);
      ids.push_back(std::bit_cast<int32_t>(bias));
    }
  }
  if (!seq.allowed_token_mask.empty()) {
    row.num_mask_words = checked_size(seq.allowed_token_mask.size());
    row.mask_begin = -1;
    if (copy_mask) {
      row.mask_begin = checked_size(ids.size());
      ids.resize(ids.size() + seq.allowed_token_mask.size());
      put_sample_mask(seq, row, ids);
    }
  }
  checked_size(ids.size());
  return row;
}

size_t place_sample_masks(std::span<cuda::SampleRow> rows, size_t lists_size) {
  size_t end = lists_size;
  for (cuda::SampleRow& row : rows) {
    if (row.num_mask_words == 0 || row.mask_begin >= 0) continue;
    row.mask_begin = checked_size(end);
    end += size_t(row.num_mask_words);
  }
  checked_size(end);
  return end;
}

void put_sample_mask(const engine::ScheduledSeq& seq, const cuda::SampleRow& row,
                     std::span<int32_t> buffer) {
  if (row.num_mask_words == 0) return;
  if (size_t(row.num_mask_words) != seq.allowed_token_mask.size() || row.mask_begin < 0 ||
      size_t(row.mask_begin) + size_t(row.num_mask_words) > buffer.size())
    throw_error(ErrorKind::kInternal, "gpu sampler: seq " + std::to_string(seq.seq_id) +
                                          "'s mask does not fit the place packed for it");
  // Same bits as int32 (the kernel reads the words through the id list's int32 view).
  std::memcpy(buffer.data() + row.mask_begin, seq.allowed_token_mask.data(),
              seq.allowed_token_mask.size_bytes());
}

cuda::SampleRow pack_score_row(const engine::ScheduledSeq& seq, int32_t next_token, int vocab) {
  if (next_token < 0 || next_token >= vocab)
    throw_error(ErrorKind::kInvalidArgument, "prompt token " + std::to_string(next_token) +
                                                 " of seq " + std::to_string(seq.seq_id) +
                                                 " is outside the vocabulary (" +
                                                 std::to_string(vocab) + ")");
  cuda::SampleRow row;
  row.score_token = next_token;
  row.num_top = clamp_top(seq.prompt_logprobs);
  return row;
}

TokenLogprobs to_token_logprobs(const cuda::SampleOutput& out) {
  TokenLogprobs lp;
  lp.token_id = out.token;
  lp.logprob = out.logprob;
  const int n = clamp_top(out.num_top);
  lp.top.reserve(size_t(n));
  for (int i = 0; i < n; ++i) lp.top.emplace_back(out.top_ids[i], out.top_logprobs[i]);
  return lp;
}

}  // namespace pagellm::runner
