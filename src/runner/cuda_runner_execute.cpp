// CudaRunner::execute: flattening a SchedulerOutput into the step inputs, running it (decode-only
// steps padded to a graph size and replayed from its graph, or run eagerly on the same shapes under
// --enforce-eager; other steps eagerly), and sampling on the host with the shared sampler.
#include <algorithm>
#include <cstring>
#include <span>

#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "runner/cuda_runner_impl.h"

namespace pagellm::runner {

namespace {

// A row of the flattened batch whose logits are needed (as in the CPU runner).
struct LogitsRow {
  int32_t row = 0;       // index into the flattened tokens
  size_t seq = 0;        // index into batch.seqs
  int32_t position = 0;  // the row's position in its sequence
  bool sample = false;   // the seq's sampling row (else a prompt-logprobs row)
};

struct Flat {
  std::vector<int32_t> ids, pos, qsl{0}, lens;
  std::vector<int64_t> slots;
  std::vector<const int32_t*> tables;
  std::vector<int> table_lens;
  std::vector<LogitsRow> rows;
};

// What a step brings back: logits of every row, or (greedy steps) only each row's choice.
struct StepResult {
  std::vector<float> logits;    // [rows, vocab] fp32; empty for greedy steps
  std::vector<int32_t> tokens;  // [rows] greedy steps only
  std::vector<float> logprobs;  // [rows] greedy steps only
};

// A row the GPU's greedy choice serves exactly as engine::sample_token would.
bool plain_greedy(const engine::ScheduledSeq& seq) {
  const SamplingParams* p = seq.params;
  return p && p->greedy() && !p->logprobs && p->repetition_penalty == 1.0f &&
         p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f &&
         seq.banned_token_ids.empty() && seq.prompt_logprobs == 0;
}

}  // namespace

// Shared by execute and execute_logits: validates and flattens, copies blocks, runs the forward
// pass and returns the logits of `rows` as fp32 [rows, vocab], or with `greedy` only the choices.
static StepResult run_step(CudaRunner::Impl& m, const engine::SchedulerOutput& batch,
                           bool with_prompt_rows, bool greedy, std::vector<LogitsRow>& rows_out) {
  if (!batch.blocks_to_swap_in.empty() || !batch.blocks_to_swap_out.empty())
    internal("swap requested but this runner has no swap space");
  const int64_t bs = m.opt.block_size;
  const size_t layer_bytes = size_t(m.num_blocks) * m.block_bytes;
  for (const auto& [src, dst] : batch.blocks_to_copy) {
    if (src < 0 || src >= m.num_blocks || dst < 0 || dst >= m.num_blocks)
      internal("copy of an invalid KV block");
    for (int l = 0; l < 2 * m.num_layers; ++l) {
      unsigned char* base = m.kv_pool.as<unsigned char>() + size_t(l) * layer_bytes;
      check(cudaMemcpyAsync(base + size_t(dst) * m.block_bytes, base + size_t(src) * m.block_bytes,
                            m.block_bytes, cudaMemcpyDeviceToDevice, m.stream),
            "copying a KV block");
    }
  }
  Flat f;
  bool decode_only = true;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const engine::ScheduledSeq& seq = batch.seqs[s];
    const int64_t n = int64_t(seq.token_ids.size());
    const int32_t begin = int32_t(f.ids.size());
    if (n == 0 || seq.num_computed_tokens < 0)
      internal("seq " + std::to_string(seq.seq_id) + " has no tokens");
    const int64_t ctx = seq.num_computed_tokens + n;
    if (int64_t(seq.block_table.size()) * bs < ctx)
      internal("block table of seq " + std::to_string(seq.seq_id) + " is too short");
    if (ctx > int64_t(m.max_blocks) * bs)
      invalid_argument("sequence of " + std::to_string(ctx) +
                       " tokens exceeds the max model length " +
                       std::to_string(m.opt.max_model_len));
    for (int32_t b : seq.block_table)
      if (b < 0 || b >= m.num_blocks)
        internal("seq " + std::to_string(seq.seq_id) + " uses an invalid KV block");
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = seq.token_ids[size_t(i)];
      if (id < 0 || id >= m.vocab)
        invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                         std::to_string(m.vocab) + ")");
      const int64_t p = seq.num_computed_tokens + i;
      f.ids.push_back(id);
      f.pos.push_back(int32_t(p));
      f.slots.push_back(int64_t(seq.block_table[size_t(p / bs)]) * bs + p % bs);
    }
    f.qsl.push_back(int32_t(f.ids.size()));
    f.lens.push_back(int32_t(ctx));
    f.tables.push_back(seq.block_table.data());
    f.table_lens.push_back(int(seq.block_table.size()));
    if (with_prompt_rows && seq.prompt_logprobs > 0) {
      const int64_t prompt_len = int64_t(seq.prompt_token_ids.size());
      for (int64_t i = 0; i < n && seq.num_computed_tokens + i + 1 < prompt_len; ++i)
        f.rows.push_back({int32_t(begin + i), s, int32_t(seq.num_computed_tokens + i), false});
    }
    if (seq.needs_sample) f.rows.push_back({int32_t(begin + n - 1), s, int32_t(ctx - 1), true});
    decode_only =
        decode_only && n == 1 && seq.needs_sample && !(with_prompt_rows && seq.prompt_logprobs > 0);
  }
  rows_out = f.rows;
  const int num_seqs = int(f.lens.size());
  const int num_rows = int(f.rows.size());
  const size_t row_bytes = size_t(m.vocab) * m.esz;
  StepResult result;
  if (!greedy) result.logits.resize(size_t(num_rows) * size_t(m.vocab));  // [num_rows, vocab]
  std::vector<float>& logits = result.logits;
  if (num_seqs == 0) return result;

  auto fetch = [&](int first, int count) {
    if (greedy) {
      check(cudaMemcpyAsync(m.greedy_host, m.x_greedy_tokens.get(), size_t(count) * 4,
                            cudaMemcpyDeviceToHost, m.stream),
            "downloading greedy tokens");
      check(cudaMemcpyAsync(static_cast<char*>(m.greedy_host) + size_t(m.max_seqs) * 4,
                            m.x_greedy_logprobs.get(), size_t(count) * 4, cudaMemcpyDeviceToHost,
                            m.stream),
            "downloading greedy logprobs");
      check(cudaStreamSynchronize(m.stream), "running the step");
      const auto* tok = static_cast<const int32_t*>(m.greedy_host);
      const auto* lp = reinterpret_cast<const float*>(static_cast<const char*>(m.greedy_host) +
                                                      size_t(m.max_seqs) * 4);
      result.tokens.insert(result.tokens.end(), tok, tok + count);
      result.logprobs.insert(result.logprobs.end(), lp, lp + count);
      return;
    }
    check(cudaMemcpyAsync(m.logits_host, m.x_logits.get(), size_t(count) * row_bytes,
                          cudaMemcpyDeviceToHost, m.stream),
          "downloading logits");
    check(cudaStreamSynchronize(m.stream), "running the step");
    const size_t total = size_t(count) * size_t(m.vocab);
    float* out = logits.data() + size_t(first) * size_t(m.vocab);
    if (m.dt == DType::kF32) {
      std::memcpy(out, m.logits_host, total * 4);
    } else {
      const auto* in = static_cast<const uint16_t*>(m.logits_host);
      const bool bf16 = m.dt == DType::kBF16;
      ThreadPool::global().parallel_for(
          total,
          [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) out[i] = bf16 ? bf16_to_f32(in[i]) : f16_to_f32(in[i]);
          },
          size_t(1) << 16);
    }
  };

  if (decode_only) {
    // Pad to the decode shape's batch size with 1-token seqs that write nothing and read block 0,
    // then replay its graph, or (--enforce-eager) run the same kernels on the same shapes.
    const CudaRunner::Impl::DecodeShape shape = m.decode_shape(num_seqs);
    const int b = shape.padded_seqs;
    static const int32_t kZeroBlock = 0;
    for (int i = num_seqs; i < b; ++i) {
      f.ids.push_back(0);
      f.pos.push_back(0);
      f.slots.push_back(-1);
      f.qsl.push_back(i + 1);
      f.lens.push_back(1);
      f.tables.push_back(&kZeroBlock);
      f.table_lens.push_back(1);
    }
    const CudaRunner::Impl::Staged st =
        m.stage(f.ids, f.pos, f.slots, f.qsl, f.lens, f.tables, f.table_lens, shape.num_splits);
    for (int r = 0; r < b; ++r) m.host<int32_t>(m.lay.rows)[r] = r;
    m.upload_inputs();
    const auto graph = m.graphs.find(b);
    if (graph != m.graphs.end()) {
      check(cudaGraphLaunch(graph->second, m.stream), "launching a decode graph");
    } else {
      m.forward(st, m.kv_pool.get());
      m.compute_logits(0, b);
    }
    fetch(0, num_rows);
    return result;
  }
  CudaRunner::Impl::Staged st =
      m.stage(f.ids, f.pos, f.slots, f.qsl, f.lens, f.tables, f.table_lens, 0);
  for (int r = 0; r < num_rows; ++r) m.host<int32_t>(m.lay.rows)[r] = f.rows[size_t(r)].row;
  m.upload_inputs();
  m.forward(st, m.kv_pool.get());
  for (int first = 0; first < num_rows; first += m.max_seqs) {
    const int count = std::min(m.max_seqs, num_rows - first);
    m.compute_logits(first, count);
    fetch(first, count);
  }
  if (num_rows == 0) check(cudaStreamSynchronize(m.stream), "running the step");
  return result;
}

engine::ModelRunnerOutput CudaRunner::execute(const engine::SchedulerOutput& batch) {
  for (const engine::ScheduledSeq& seq : batch.seqs)
    if ((seq.needs_sample || seq.prompt_logprobs > 0) && seq.params == nullptr)
      internal("seq " + std::to_string(seq.seq_id) + " has no sampling params");
  bool greedy = true;
  for (const engine::ScheduledSeq& seq : batch.seqs)
    greedy = greedy && seq.prompt_logprobs == 0 && (!seq.needs_sample || plain_greedy(seq));
  std::vector<LogitsRow> rows;
  StepResult step = run_step(*impl_, batch, true, greedy, rows);
  const size_t vocab = size_t(impl_->vocab);
  engine::ModelRunnerOutput out;
  out.sampled_token_ids.assign(batch.seqs.size(), -1);
  out.sampled_logprobs.resize(batch.seqs.size());
  out.prompt_logprobs.resize(batch.seqs.size());
  if (greedy) {
    for (size_t r = 0; r < rows.size(); ++r) {
      // Token -1: every logit was -inf; the CPU sampler's fallback is then token 0 (nothing
      // banned).
      const int32_t token = step.tokens[r] >= 0 ? step.tokens[r] : 0;
      TokenLogprobs lp;
      lp.token_id = token;
      lp.logprob = step.logprobs[r];
      out.sampled_token_ids[rows[r].seq] = token;
      out.sampled_logprobs[rows[r].seq] = std::move(lp);
    }
    return out;
  }
  std::vector<float>& logits = step.logits;
  // Rows are independent (each draw depends only on its row, params, seed and counter), so they are
  // sampled in parallel; results land in per-row slots and are gathered in order.
  std::vector<engine::SampleResult> sampled(rows.size());
  std::vector<TokenLogprobs> prompt_lp(rows.size());
  ThreadPool::global().parallel_for(rows.size(), [&](size_t b, size_t e) {
    for (size_t r = b; r < e; ++r) {
      const LogitsRow& row = rows[r];
      const engine::ScheduledSeq& seq = batch.seqs[row.seq];
      const std::span<float> row_logits(logits.data() + r * vocab, vocab);
      if (row.sample) {
        sampled[r] = engine::sample_token(row_logits, seq);
      } else {
        const int32_t next = seq.prompt_token_ids[size_t(row.position) + 1];
        prompt_lp[r] = engine::compute_logprobs(row_logits, next, seq.prompt_logprobs);
      }
    }
  });
  for (size_t r = 0; r < rows.size(); ++r) {
    const LogitsRow& row = rows[r];
    if (row.sample) {
      out.sampled_token_ids[row.seq] = sampled[r].token_id;
      out.sampled_logprobs[row.seq] = std::move(sampled[r].logprobs);
    } else {
      out.prompt_logprobs[row.seq].push_back(std::move(prompt_lp[r]));
    }
  }
  return out;
}

std::vector<std::vector<float>> CudaRunner::execute_logits(const engine::SchedulerOutput& batch) {
  std::vector<LogitsRow> rows;
  const std::vector<float> logits = run_step(*impl_, batch, false, false, rows).logits;
  const size_t vocab = size_t(impl_->vocab);
  std::vector<std::vector<float>> out(batch.seqs.size());
  for (size_t r = 0; r < rows.size(); ++r)
    out[rows[r].seq].assign(logits.begin() + ptrdiff_t(r * vocab),
                            logits.begin() + ptrdiff_t((r + 1) * vocab));
  return out;
}

}  // namespace pagellm::runner
