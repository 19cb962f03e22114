// Helpers for tests that drive the CPU runner directly: a fixed per-seq block allocation, one-step
// SchedulerOutputs, greedy decoding by argmax (independent of the engine's sampler), and a decoder
// of token ids through a tokenizer.json vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/cpu_runner.h"

namespace pagellm::testing {

// A sequence with a fixed range of KV blocks: seq `index` owns blocks [index * blocks_per_seq,
// ...).
struct TestSeq {
  int64_t id = 0;
  std::vector<int32_t> tokens;       // all tokens known so far
  std::vector<int32_t> block_table;  // [blocks_per_seq]
  int32_t num_computed = 0;

  TestSeq(int64_t index, int blocks_per_seq, std::vector<int32_t> prompt)
      : id(index), tokens(std::move(prompt)) {
    for (int b = 0; b < blocks_per_seq; ++b)
      block_table.push_back(static_cast<int32_t>(index * blocks_per_seq + b));
  }

  // Schedules the next `count` uncomputed tokens (all when count < 0); samples when they reach the
  // end.
  engine::ScheduledSeq schedule(int count = -1) const {
    engine::ScheduledSeq s;
    s.seq_id = id;
    const int remaining = static_cast<int>(tokens.size()) - num_computed;
    const int n = count < 0 ? remaining : std::min(count, remaining);
    s.token_ids = std::span<const int32_t>(tokens.data() + num_computed, static_cast<size_t>(n));
    s.num_computed_tokens = num_computed;
    s.block_tables[0] = block_table;
    s.needs_sample = num_computed + n == static_cast<int>(tokens.size());
    return s;
  }
};

inline engine::SchedulerOutput make_batch(const std::vector<engine::ScheduledSeq>& seqs) {
  engine::SchedulerOutput out;
  out.seqs = seqs;
  for (const auto& s : seqs) out.num_scheduled_tokens += static_cast<int32_t>(s.token_ids.size());
  return out;
}

inline int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Greedy decoding of one sequence, one token per step after the prompt.
inline std::vector<int32_t> greedy(runner::CpuRunner& runner, std::vector<int32_t> prompt,
                                   int max_tokens, int blocks_per_seq) {
  TestSeq seq(0, blocks_per_seq, std::move(prompt));
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < max_tokens) {
    const auto logits = runner.execute_logits(make_batch({seq.schedule()}));
    seq.num_computed = static_cast<int32_t>(seq.tokens.size());
    const int32_t next = argmax(logits[0]);
    out.push_back(next);
    seq.tokens.push_back(next);
  }
  return out;
}

// Decodes ids the way a SentencePiece tokenizer.json does: "▁" -> space, <0xNN> -> byte, the
// leading space after BOS stripped.
inline std::string decode_with_vocab(const std::filesystem::path& tokenizer_json,
                                     const std::vector<int32_t>& ids) {
  std::ifstream in(tokenizer_json);
  const auto j = nlohmann::json::parse(in);
  std::vector<std::string> pieces(j["model"]["vocab"].size());
  for (const auto& [piece, id] : j["model"]["vocab"].items()) pieces.at(id.get<size_t>()) = piece;
  std::string text;
  for (int32_t id : ids) {
    const std::string& p = pieces.at(static_cast<size_t>(id));
    if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>') {
      text += static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16));
      continue;
    }
    for (size_t i = 0; i < p.size(); ++i) {
      if (p.compare(i, 3, "\xe2\x96\x81") == 0) {
        text += ' ';
        i += 2;
      } else {
        text += p[i];
      }
    }
  }
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace pagellm::testing
