// A model runner with no model, for engine tests. It keeps a "KV cache" of token ids: every scheduled
// token is written to the slot its block table names, and before sampling it reads the whole context
// back through the block table and checks it against the sequence's real tokens. So any bookkeeping
// bug (wrong table, missed copy-on-write, a prefix hit on stale content, a lost swap) shows up as a
// kv_errors count, and outputs are a pure function of the context (plus the seed when sampling).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/scheduler_output.h"
#include "io/hf_config.h"
#include "runner/model_runner.h"

namespace pagellm::testing {

class FakeRunner : public runner::ModelRunner {
 public:
  // next(context, seq) → token. Default: a hash of the context (and of the seed unless greedy).
  using NextFn = std::function<int32_t(std::span<const int32_t>, const engine::ScheduledSeq&)>;

  FakeRunner(int num_blocks, int block_size, int num_swap_blocks = 0, int vocab_size = 512)
      : num_blocks_(num_blocks), block_size_(block_size), num_swap_blocks_(num_swap_blocks),
        kv_(static_cast<size_t>(num_blocks) * block_size, -1),
        host_(static_cast<size_t>(num_swap_blocks) * block_size, -1) {
    config_.vocab_size = vocab_size;
    config_.max_position_embeddings = 4096;
  }

  int num_kv_blocks() const override { return num_blocks_; }
  int num_swap_blocks() const override { return num_swap_blocks_; }
  int block_size() const override { return block_size_; }
  const io::ModelConfig& config() const override { return config_; }

  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override {
    batches.push_back(batch_summary(batch));
    for (auto [dev, host] : batch.blocks_to_swap_out) copy_block(kv_, dev, host_, host);
    for (auto [host, dev] : batch.blocks_to_swap_in) copy_block(host_, host, kv_, dev);
    for (auto [src, dst] : batch.blocks_to_copy) copy_block(kv_, src, kv_, dst);
    num_copies += static_cast<int>(batch.blocks_to_copy.size());
    num_swaps += static_cast<int>(batch.blocks_to_swap_out.size() + batch.blocks_to_swap_in.size());
    engine::ModelRunnerOutput out;
    for (const auto& s : batch.seqs) {
      for (size_t k = 0; k < s.token_ids.size(); ++k) {
        const int pos = s.num_computed_tokens + static_cast<int>(k);
        const size_t slot = slot_of(s, pos);
        if (slot >= kv_.size()) { ++kv_errors; continue; }
        kv_[slot] = s.token_ids[k];
      }
      std::vector<TokenLogprobs> plps;
      if (s.prompt_logprobs > 0) {
        const int num_prompt = static_cast<int>(s.prompt_token_ids.size());
        for (size_t k = 0; k < s.token_ids.size(); ++k) {
          const int pos = s.num_computed_tokens + static_cast<int>(k);
          if (pos + 1 >= num_prompt) break;
          const int32_t next = s.prompt_token_ids[static_cast<size_t>(pos + 1)];
          plps.push_back({next, -0.5f * static_cast<float>(pos + 1), {{next, -0.5f}, {0, -9.0f}}});
        }
      }
      out.prompt_logprobs.push_back(std::move(plps));
      if (!s.needs_sample) {
        out.sampled_token_ids.push_back(-1);
        out.sampled_logprobs.emplace_back();
        continue;
      }
      const std::vector<int32_t> context = read_context(s);
      int32_t token = next ? next(context, s) : default_next(context, s);
      for (int32_t banned : s.banned_token_ids) {
        if (token == banned) token = 3 + banned % 7;  // min_tokens: never emit a banned id
      }
      out.sampled_token_ids.push_back(token);
      const float lp = -static_cast<float>(token % 13) / 8.0f;
      out.sampled_logprobs.push_back(TokenLogprobs{token, lp, {{token, lp}}});
    }
    return out;
  }

  struct BatchSummary {
    int num_tokens = 0;
    std::vector<std::pair<int64_t, int>> seqs;  // (seq_id, num scheduled tokens)
  };
  std::vector<BatchSummary> batches;
  NextFn next;
  int kv_errors = 0;  // reads of slots that do not hold the sequence's token, or bad tables
  int num_copies = 0;
  int num_swaps = 0;

  static int32_t default_next(std::span<const int32_t> context, const engine::ScheduledSeq& s) {
    uint64_t h = 1469598103934665603ULL;
    for (int32_t t : context) h = (h ^ static_cast<uint64_t>(t)) * 1099511628211ULL;
    if (s.params != nullptr && !s.params->greedy()) h ^= s.seed * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 29;
    return static_cast<int32_t>(3 + h % 200);  // never 0..2 (2 is the tests' EOS)
  }

 private:
  static BatchSummary batch_summary(const engine::SchedulerOutput& b) {
    BatchSummary s;
    s.num_tokens = b.num_scheduled_tokens;
    for (const auto& q : b.seqs) s.seqs.emplace_back(q.seq_id, static_cast<int>(q.token_ids.size()));
    return s;
  }
  size_t slot_of(const engine::ScheduledSeq& s, int pos) const {
    const size_t index = static_cast<size_t>(pos / block_size_);
    if (index >= s.block_tables[0].size()) return kv_.size();
    const int32_t block = s.block_tables[0][index];
    if (block < 0 || block >= num_blocks_) return kv_.size();
    return static_cast<size_t>(block) * block_size_ + static_cast<size_t>(pos % block_size_);
  }
  std::vector<int32_t> read_context(const engine::ScheduledSeq& s) {
    const int n = s.num_computed_tokens + static_cast<int>(s.token_ids.size());
    std::vector<int32_t> context(static_cast<size_t>(n));
    const size_t num_prompt = s.prompt_token_ids.size();
    for (int pos = 0; pos < n; ++pos) {
      const size_t slot = slot_of(s, pos);
      const size_t p = static_cast<size_t>(pos);
      const int32_t truth = p < num_prompt ? s.prompt_token_ids[p] : s.output_token_ids[p - num_prompt];
      const int32_t got = slot < kv_.size() ? kv_[slot] : -1;
      if (got != truth) ++kv_errors;
      context[p] = got;
    }
    return context;
  }
  void copy_block(const std::vector<int32_t>& from, int32_t src, std::vector<int32_t>& to, int32_t dst) {
    for (int i = 0; i < block_size_; ++i) {
      to[static_cast<size_t>(dst) * block_size_ + i] = from[static_cast<size_t>(src) * block_size_ + i];
    }
  }

  int num_blocks_;
  int block_size_;
  int num_swap_blocks_;
  io::ModelConfig config_;
  std::vector<int32_t> kv_;    // [num_blocks, block_size] token ids, -1 = never written
  std::vector<int32_t> host_;  // [num_swap_blocks, block_size]
};

}  // namespace pagellm::testing
