// CudaRunner::execute: flattening a SchedulerOutput into the step inputs, running it (decode-only
// steps padded to a graph size and replayed from its graph, or run eagerly on the same shapes under
// --enforce-eager; other steps eagerly), and sampling every row on the GPU (cuda::sample, the CPU
// sampler's pipeline): only (token, logprob, top-N) per row comes back to the host. Speculative
// rows (1 + k positions of a seq with drafts) are the exception: their logits come back and the
// drafts are verified on the host by spec::verify_drafts, the code the CPU runner uses.
#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>

#include "common/phase_times.h"
#include "common/thread_pool.h"
#include "pagellm/engine_args.h"
#include "runner/block_ops.h"
#include "runner/cuda_runner_impl.h"
#include "runner/sample_pack.h"
#include "spec/rejection_sampler.h"

namespace pagellm::runner {

namespace {

// A row of the flattened batch whose logits are needed (as in the CPU runner).
struct LogitsRow {
  int32_t row = 0;       // index into the flattened tokens
  size_t seq = 0;        // index into batch.seqs
  int32_t position = 0;  // the row's position in its sequence
  bool sample = false;   // the seq's sampling row (else a prompt-logprobs row)
  bool spec = false;     // one of a speculating seq's 1 + k rows (draft_index j: after j drafts)
  int32_t draft_index = 0;
  int32_t host_index = -1;  // >= 0: the row's logits come back (StepResult::logits row)
};

struct Flat {
  std::vector<int32_t> ids, pos, qsl{0}, lens;
  std::vector<int64_t> slots;  // KV cache group 0's (the others': more)
  std::vector<const int32_t*> tables;
  std::vector<int> table_lens;
  CudaRunner::Impl::MoreKvGroups more;
  std::vector<LogitsRow> rows;
  // Per seq: the flattened rows [first, first + count) whose final-normed hidden states its
  // pooling sums (count 0: none).
  std::vector<std::pair<int32_t, int32_t>> pool;
};

// What a step brings back: the logits of every row (execute_logits), or the GPU sampler's answer
// per row and the logits of the rows verified on the host (execute).
struct StepResult {
  std::vector<float> logits;                // [rows with a host_index, vocab] fp32
  std::vector<cuda::SampleOutput> sampled;  // [rows] sampling steps only
  std::vector<std::vector<float>> pooled;   // per seq: ModelRunnerOutput::pooled (leader only)
  std::vector<float> hidden;  // ModelRunnerOutput::hidden_states (Impl::return_hidden, sampling)
};

// The pooled pieces of the step's pooling seqs from x_normed (the final-normed hidden states, left
// there by forward()): one download per seq, summed in fp32 on the host.
std::vector<std::vector<float>> download_pooled(CudaRunner::Impl& m, const Flat& f) {
  std::vector<std::vector<float>> out(f.pool.size());
  const size_t hidden = size_t(m.hidden);
  std::vector<uint8_t> raw;
  check(cudaStreamSynchronize(m.stream), "running the step");
  for (size_t s = 0; s < f.pool.size(); ++s) {
    const auto [first, count] = f.pool[s];
    if (count == 0) continue;
    raw.resize(size_t(count) * hidden * m.esz);
    check(cudaMemcpy(raw.data(), m.x_normed.as<uint8_t>() + size_t(first) * hidden * m.esz,
                     raw.size(), cudaMemcpyDeviceToHost),
          "downloading hidden states for pooling");
    std::vector<float> row(size_t(count) * hidden);
    convert_to_f32(m.dt, raw.data(), row.data(), row.size());
    std::vector<float>& v = out[s];
    v.assign(hidden, 0.f);
    for (int32_t r = 0; r < count; ++r)
      for (size_t d = 0; d < hidden; ++d) v[d] += row[size_t(r) * hidden + d];
  }
  return out;
}

// The sampler inputs of every logits row, in row order, and the rows' flat id lists.
struct SampleInputs {
  std::vector<cuda::SampleRow> rows;  // [num_rows]
  std::vector<int32_t> ids;           // [sum of list lengths]
  size_t size = 0;                    // the lists, then the masks' words (placed after them)
};

// The masks' words are left out (placed after the lists): they may still be in the making, and
// upload_sample_inputs writes them into the upload buffer once they are ready.
SampleInputs pack_rows(const engine::SchedulerOutput& batch, std::span<const LogitsRow> rows,
                       int vocab) {
  SampleInputs in;
  in.rows.reserve(rows.size());
  std::vector<int32_t> output;  // position_context's extended output
  for (const LogitsRow& row : rows) {
    const engine::ScheduledSeq& seq = batch.seqs[row.seq];
    if (row.sample) {
      in.rows.push_back(pack_sample_row(seq, in.ids, /*copy_mask=*/false));
    } else if (row.spec) {  // the target's choice after draft_index drafts (never masked)
      const auto drafts = seq.token_ids.last(size_t(seq.num_spec_tokens));
      in.rows.push_back(
          pack_sample_row(spec::position_context(seq, drafts, row.draft_index, output), in.ids));
    } else
      in.rows.push_back(
          pack_score_row(seq, seq.prompt_token_ids[size_t(row.position) + 1], vocab));
  }
  in.size = place_sample_masks(in.rows, in.ids.size());
  return in;
}

// Called once the step's forward pass is queued: waits for the allowed-token masks (built on the
// host meanwhile), writes the id lists and them into the pinned buffer and uploads it on the
// stream, ahead of sampling.
void upload_sample_inputs(CudaRunner::Impl& m, const engine::SchedulerOutput& batch,
                          std::span<const LogitsRow> rows, SampleInputs& in) {
  {
    phase::Scope timed(phase::kMaskWait);
    engine::wait_for_masks(batch);
  }
  phase::Scope timed(phase::kSampleUpload);
  const std::span<int32_t> buffer = m.sample_ids_buffer(in.size);
  std::copy(in.ids.begin(), in.ids.end(), buffer.begin());
  for (size_t r = 0; r < rows.size(); ++r)
    if (rows[r].sample) put_sample_mask(batch.seqs[rows[r].seq], in.rows[r], buffer);
  m.upload_sample_ids(in.size);
}

// Applies the step's block operations on the runner stream, in SchedulerOutput's order (swap out,
// swap in, copy), before the step's compute (stream order; the host pool is pinned, and nothing on
// the host touches it): swap-out = D2H of every layer's K and V of the device block into the host
// block, swap-in = H2D, copy = D2D (copy-on-write). All ids are validated first, so a bad list
// moves nothing.
void apply_block_ops(CudaRunner::Impl& m, const engine::SchedulerOutput& batch) {
  check_block_ops(batch, m.num_blocks, m.num_swap_blocks, "cuda runner");
  const size_t layer_bytes = size_t(m.num_blocks) * m.block_bytes;  // one layer's K (or V)
  const int num_slots = m.kv_layout.slots;
  const size_t host_block_bytes = 2 * size_t(num_slots) * m.block_bytes;
  auto move = [&](int32_t device, int32_t host, bool to_host) {
    unsigned char* h = m.swap_pool + size_t(host) * host_block_bytes;
    for (int l = 0; l < 2 * num_slots; ++l) {
      unsigned char* d =
          m.kv_pool.as<unsigned char>() + size_t(l) * layer_bytes + size_t(device) * m.block_bytes;
      unsigned char* hl = h + size_t(l) * m.block_bytes;
      check(cudaMemcpyAsync(to_host ? hl : d, to_host ? d : hl, m.block_bytes,
                            to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, m.stream),
            to_host ? "swapping out a KV block" : "swapping in a KV block");
    }
  };
  for (const auto& [device, host] : batch.blocks_to_swap_out) move(device, host, true);
  for (const auto& [host, device] : batch.blocks_to_swap_in) move(device, host, false);
  for (const auto& [src, dst] : batch.blocks_to_copy) {
    for (int l = 0; l < 2 * num_slots; ++l) {
      unsigned char* base = m.kv_pool.as<unsigned char>() + size_t(l) * layer_bytes;
      check(cudaMemcpyAsync(base + size_t(dst) * m.block_bytes, base + size_t(src) * m.block_bytes,
                            m.block_bytes, cudaMemcpyDeviceToDevice, m.stream),
            "copying a KV block");
    }
  }
}

// The logits of a chunk's rows that have a host_index (chunk: the rows whose logits x_logits holds,
// in order), into logits[host_index] as fp32. Synchronizes the stream when there are any.
void download_host_rows(CudaRunner::Impl& m, std::span<const LogitsRow> chunk, size_t row_bytes,
                        std::vector<float>& logits) {
  std::vector<std::pair<size_t, int32_t>> wanted;  // (row in the chunk, host index)
  for (size_t r = 0; r < chunk.size(); ++r)
    if (chunk[r].host_index >= 0) wanted.emplace_back(r, chunk[r].host_index);
  if (wanted.empty()) return;  // a sampling chunk: sample_rows has synchronized already
  for (size_t i = 0; i < wanted.size();) {  // runs of consecutive rows in one copy each
    size_t j = i + 1;
    while (j < wanted.size() && wanted[j].first == wanted[j - 1].first + 1) ++j;
    check(cudaMemcpyAsync(static_cast<uint8_t*>(m.logits_host) + wanted[i].first * row_bytes,
                          m.x_logits.as<uint8_t>() + wanted[i].first * row_bytes,
                          (j - i) * row_bytes, cudaMemcpyDeviceToHost, m.stream),
          "downloading logits");
    i = j;
  }
  check(cudaStreamSynchronize(m.stream), "running the step");
  const size_t vocab = size_t(m.vocab);
  ThreadPool::global().parallel_for(
      wanted.size() * vocab,
      [&](size_t b, size_t e) {
        for (size_t i = b; i < e;) {  // the part of each row in [b, e)
          const auto [r, host] = wanted[i / vocab];
          const size_t c = i % vocab, len = std::min(e - i, vocab - c);
          convert_to_f32(m.dt, static_cast<const uint8_t*>(m.logits_host) + r * row_bytes + c * m.esz,
                         logits.data() + size_t(host) * vocab + c, len);
          i += len;
        }
      },
      size_t(1) << 16);
}

// Greedy verification from the GPU sampler's answers at a seq's 1 + k rows (answers[j]: the
// target's choice after j drafts, in its position's context): accept draft j while it equals
// answers[j], then append the target's token; the logprobs are each position's. What
// spec::verify_drafts does for a greedy seq, without the logits leaving the GPU.
spec::VerifyResult verify_greedy(const engine::ScheduledSeq& seq,
                                 std::span<const cuda::SampleOutput> answers) {
  const auto drafts = seq.token_ids.last(size_t(seq.num_spec_tokens));
  spec::VerifyResult v;
  for (size_t j = 0; j < answers.size(); ++j) {
    v.logprobs.push_back(to_token_logprobs(answers[j]));
    v.token_ids.push_back(v.logprobs.back().token_id);
    if (j == drafts.size() || v.token_ids.back() != drafts[j]) break;
  }
  return v;
}

// The speculating seqs' drafts (their 1 + num_spec_tokens rows come last in `rows`, in seq order):
// greedy seqs from the GPU sampler's answers, the others by spec::verify_drafts on their logits
// (host_index rows of `logits`), in parallel: both are pure functions of their rows.
void verify_spec_rows(const engine::SchedulerOutput& batch, const std::vector<LogitsRow>& rows,
                      StepResult& step, size_t vocab, engine::ModelRunnerOutput& out) {
  const auto first_spec = std::find_if(rows.begin(), rows.end(), [](auto& r) { return r.spec; });
  if (first_spec == rows.end()) return;
  out.spec_token_ids.resize(batch.seqs.size());
  out.spec_logprobs.resize(batch.seqs.size());
  std::vector<size_t> groups;  // each seq's first row
  for (auto it = first_spec; it != rows.end(); it += batch.seqs[it->seq].num_spec_tokens + 1)
    groups.push_back(size_t(it - rows.begin()));
  std::vector<float>& logits = step.logits;  // verify_drafts modifies its rows
  std::exception_ptr error;
  std::mutex error_mutex;
  ThreadPool::global().parallel_for(groups.size(), [&](size_t begin, size_t end) {
    try {
      for (size_t g = begin; g < end; ++g) {
        const LogitsRow& first = rows[groups[g]];
        const engine::ScheduledSeq& seq = batch.seqs[first.seq];
        const size_t n = size_t(seq.num_spec_tokens) + 1;
        spec::VerifyResult v =
            first.host_index < 0
                ? verify_greedy(seq, std::span<const cuda::SampleOutput>(step.sampled)
                                         .subspan(groups[g], n))
                : spec::verify_drafts(
                      std::span<float>(logits).subspan(size_t(first.host_index) * vocab, n * vocab),
                      seq);
        out.spec_token_ids[first.seq] = std::move(v.token_ids);
        out.spec_logprobs[first.seq] = std::move(v.logprobs);
      }
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

// An empty step of the runner's KV cache groups.
Flat empty_flat(const CudaRunner::Impl& m) {
  Flat f;
  f.more.slots.resize(size_t(m.kv_layout.num_groups() - 1));
  f.more.tables.resize(size_t(m.kv_layout.num_groups() - 1));
  return f;
}

// Appends a padding seq of q tokens to f: it writes no KV and reads block 0.
void append_padding_seq(Flat& f, int q) {
  static const int32_t kZeroBlock = 0;
  for (int t = 0; t < q; ++t) {
    f.ids.push_back(0);
    f.pos.push_back(t);
    f.slots.push_back(-1);
    for (auto& slots : f.more.slots) slots.push_back(-1);
  }
  f.qsl.push_back(f.qsl.back() + q);
  f.lens.push_back(q);
  f.tables.push_back(&kZeroBlock);
  for (auto& tables : f.more.tables) tables.push_back(&kZeroBlock);
  f.table_lens.push_back(1);
}

// A step of num_seqs seqs of q tokens each (f, flattened), padded to shape.padded_seqs with seqs of
// q tokens that write nothing and read block 0, then replayed from its graph (captured here on
// first use when q > 1), or (--enforce-eager) run with the same kernels on the same shapes. Leaves
// the logits of every row in x_logits (row r: token r).
// after_upload (if set) runs once the inputs' upload is queued, before the forward pass. With
// last_rows, x_logits' first rows are instead each seq's last token's (row i: seq i).
void run_graph_shape(CudaRunner::Impl& m, Flat& f, int q, const CudaRunner::Impl::DecodeShape& shape,
                     const std::function<void()>& after_upload = {}, bool last_rows = false) {
  const int num_seqs = int(f.lens.size());
  const int b = shape.padded_seqs;
  for (int i = num_seqs; i < b; ++i) append_padding_seq(f, q);
  // A capture runs dummy steps: before this step's inputs are staged, and never while the FP8
  // cache's scales wait for real keys.
  if (q > 1 && !m.kv_scales_pending) m.capture_graph(b, q);
  std::optional<phase::Scope> staging(phase::kRunnerStage);
  const CudaRunner::Impl::Staged st = m.stage(f.ids, f.pos, f.slots, f.qsl, f.lens, f.tables,
                                              f.table_lens, shape.num_splits, &f.more);
  for (int r = 0; r < b * q; ++r)
    m.host<int32_t>(m.lay.rows)[r] = !last_rows ? r : r < b ? r * q + q - 1 : 0;
  m.upload_inputs();
  staging.reset();
  if (after_upload) after_upload();
  phase::Scope launching(phase::kRunnerLaunch);
  const auto graph = m.graphs.find({b, q});
  if (graph != m.graphs.end() && !m.kv_scales_pending) {
    check(cudaGraphLaunch(graph->second, m.stream), "launching a decode graph");
  } else {
    m.forward(st, m.kv_pool.get());
    m.kv_scales_pending = false;  // this step's K/V set them (graphs read them from then on)
    m.compute_logits(0, b * q);
  }
}

// Validates one seq of the step and appends its tokens, positions, slots and attention layout to f.
void append_seq(const CudaRunner::Impl& m, const engine::ScheduledSeq& seq, Flat& f) {
  const int64_t bs = m.opt.block_size;
  const int64_t n = int64_t(seq.token_ids.size());
  if (n == 0 || seq.num_computed_tokens < 0)
    internal("seq " + std::to_string(seq.seq_id) + " has no tokens");
  const int64_t ctx = seq.num_computed_tokens + n;
  const size_t num_groups = size_t(m.kv_layout.num_groups());
  const std::span<const int32_t> table = seq.block_tables[0];
  for (size_t g = 0; g < num_groups; ++g) {
    if (int64_t(seq.block_tables[g].size()) * bs < ctx ||
        seq.block_tables[g].size() != table.size())
      internal("block tables of seq " + std::to_string(seq.seq_id) +
               " are too short or of different lengths");
    for (int32_t b : seq.block_tables[g])
      if (b < 0 || b >= m.num_blocks)
        internal("seq " + std::to_string(seq.seq_id) + " uses an invalid KV block");
  }
  if (ctx > int64_t(m.max_blocks) * bs)
    invalid_argument("sequence of " + std::to_string(ctx) +
                     " tokens exceeds the max model length " + std::to_string(m.opt.max_model_len));
  if (seq.num_spec_tokens < 0 || seq.num_spec_tokens >= n ||
      (seq.num_spec_tokens > 0 && !seq.needs_sample))
    internal("seq " + std::to_string(seq.seq_id) + " has " + std::to_string(seq.num_spec_tokens) +
             " draft tokens in a row of " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = seq.token_ids[size_t(i)];
    if (id < 0 || id >= m.vocab)
      invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(m.vocab) + ")");
    const int64_t p = seq.num_computed_tokens + i;
    f.ids.push_back(id);
    f.pos.push_back(int32_t(p));
    f.slots.push_back(int64_t(table[size_t(p / bs)]) * bs + p % bs);
  }
  if (f.more.slots.size() + 1 != num_groups) internal("flattened step without its KV groups");
  for (size_t g = 1; g < num_groups; ++g) {
    const std::span<const int32_t> t = seq.block_tables[g];
    for (int64_t p = seq.num_computed_tokens; p < ctx; ++p)
      f.more.slots[g - 1].push_back(int64_t(t[size_t(p / bs)]) * bs + p % bs);
    f.more.tables[g - 1].push_back(t.data());
  }
  f.qsl.push_back(int32_t(f.ids.size()));
  f.lens.push_back(int32_t(ctx));
  f.tables.push_back(table.data());
  f.table_lens.push_back(int(table.size()));
}

// Flattens the step (append_seq) and lists the rows whose logits it needs: the plain rows (prompt
// logprobs, sampling) in seq order, then every speculating seq's 1 + k rows. graph_q: 1 for a decode
// step, 1 + k for a verification step (every seq its last verified token and k drafts, the same k),
// else 0.
Flat flatten(const CudaRunner::Impl& m, const engine::SchedulerOutput& batch, bool with_prompt_rows,
             int& graph_q) {
  Flat f = empty_flat(m);
  std::vector<LogitsRow> spec_rows;  // appended to f.rows after the loop: they come last
  bool decode_only = true;
  int uniform_q = 0;  // > 0: every seq so far has this many tokens, all but the first drafts
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const engine::ScheduledSeq& seq = batch.seqs[s];
    const int32_t n = int32_t(seq.token_ids.size());
    const int32_t begin = int32_t(f.ids.size()), first_pos = seq.num_computed_tokens;
    append_seq(m, seq, f);
    if (with_prompt_rows && seq.prompt_logprobs > 0) {
      const int32_t prompt_len = int32_t(seq.prompt_token_ids.size());
      for (int32_t i = 0; i < n && first_pos + i + 1 < prompt_len; ++i)
        f.rows.push_back({begin + i, s, first_pos + i, false});
    }
    const int32_t k = seq.num_spec_tokens;
    if (k > 0) {  // the last verified token's row and each draft's
      for (int32_t j = 0; j <= k; ++j)
        spec_rows.push_back({begin + n - 1 - k + j, s, first_pos + n - 1 - k + j, false, true, j});
    } else if (seq.needs_sample) {
      f.rows.push_back({begin + n - 1, s, first_pos + n - 1, true});
    }
    // kMean: every row of the step; kLast: the prompt's last row, on its final step.
    f.pool.push_back(seq.pooling == PoolingType::kMean ? std::pair{begin, n}
                     : seq.pooling == PoolingType::kLast && seq.needs_sample
                         ? std::pair{begin + n - 1, 1}
                         : std::pair{0, 0});
    const bool plain_row = seq.needs_sample && seq.pooling == PoolingType::kNone &&
                           !(with_prompt_rows && seq.prompt_logprobs > 0);
    decode_only = decode_only && n == 1 && plain_row;
    const bool verify_row = plain_row && k > 0 && n == k + 1;
    uniform_q = verify_row && (s == 0 || uniform_q == n) ? n : 0;
  }
  f.rows.insert(f.rows.end(), spec_rows.begin(), spec_rows.end());
  graph_q = decode_only ? 1 : uniform_q;
  return f;
}

}  // namespace

// Sampler rows [first, first + count) into the pinned step inputs.
static void put_sample_rows(CudaRunner::Impl& m, const SampleInputs& sin, int first, int count) {
  std::memcpy(m.host<cuda::SampleRow>(m.lay.sample_rows), sin.rows.data() + first,
              size_t(count) * sizeof(cuda::SampleRow));
}

// Rows [first, first + count), x_logits' current chunk: sampled on the GPU (sampling steps; a
// chunk after the first uploads its sampler rows here, the previous fetch having synchronized the
// stream), and those with a host_index downloaded.
static void fetch_rows(CudaRunner::Impl& m, const Flat& f, const SampleInputs& sin, bool sample,
                       int first, int count, StepResult& result) {
  if (!m.leader) {
    check(cudaStreamSynchronize(m.stream), "running the step");
    return;
  }
  if (sample) {
    if (first > 0) {
      put_sample_rows(m, sin, first, count);
      check(cudaMemcpyAsync(m.dev<cuda::SampleRow>(m.lay.sample_rows),
                            m.host<cuda::SampleRow>(m.lay.sample_rows),
                            size_t(count) * sizeof(cuda::SampleRow), cudaMemcpyHostToDevice,
                            m.stream),
            "uploading sampler rows");
    }
    m.sample_rows(count, result.sampled.data() + first);
  }
  download_host_rows(m, std::span<const LogitsRow>(f.rows).subspan(size_t(first), size_t(count)),
                     size_t(m.vocab) * m.esz, result.logits);
}

// Shared by execute and execute_logits: validates and flattens, copies blocks, runs the forward
// pass and returns the logits of `rows` as fp32 [rows, vocab], or with `sample` the GPU sampler's
// outputs.
static StepResult run_step(CudaRunner::Impl& m, const engine::SchedulerOutput& batch,
                           bool with_prompt_rows, bool sample, std::vector<LogitsRow>& rows_out) {
  std::optional<phase::Scope> preparing(phase::kRunnerPrepare);
  apply_block_ops(m, batch);
  // Ranks other than the leader run the same kernels and collectives but sample nothing.
  sample = sample && m.leader;
  int graph_q = 0;
  Flat f = flatten(m, batch, with_prompt_rows, graph_q);
  // The rows are in the same order on every rank (a tensor-parallel LM head gathers each chunk's
  // rows from every rank). On a sampling step's leader every row goes through the GPU sampler (a
  // speculative row with its position's context: a greedy seq's drafts are verified from those
  // answers); a row comes back as logits (host_index) on a logits step, and for a sampled seq's
  // drafts, whose rejection sampling runs on the host.
  int num_host = 0;
  for (LogitsRow& row : f.rows)
    if (m.leader && (!sample || (row.spec && !batch.seqs[row.seq].params->greedy())))
      row.host_index = num_host++;
  rows_out = f.rows;
  const int num_seqs = int(f.lens.size());
  const int num_rows = int(f.rows.size());
  StepResult result;
  SampleInputs sin;
  if (sample) {
    sin = pack_rows(batch, f.rows, m.vocab);
    result.sampled.resize(size_t(num_rows));
  }
  result.logits.resize(size_t(num_host) * size_t(m.vocab));
  if (num_seqs == 0) return result;
  // The first chunk's sampler rows ride with the step inputs (upload_inputs); later chunks
  // upload theirs in fetch_rows.
  if (sample) put_sample_rows(m, sin, 0, std::min(num_rows, m.max_seqs));
  auto fetch = [&](int first, int count) { fetch_rows(m, f, sin, sample, first, count, result); };

  // Decode steps (1 token per seq) and verification steps (every seq 1 + k tokens, k the same for
  // all) take a graph shape.
  const CudaRunner::Impl::DecodeShape shape =
      graph_q > 0 ? m.decode_shape(num_seqs, graph_q) : CudaRunner::Impl::DecodeShape{};
  // An EAGLE head's target: the final-normed rows of the step's tokens (the padding's come after).
  auto keep_hidden = [&] {
    if (sample && m.return_hidden && engine::any_return_hidden(batch))
      result.hidden = m.download_normed(0, batch.num_scheduled_tokens);
  };
  preparing.reset();
  if (shape.padded_seqs > 0) {
    run_graph_shape(m, f, graph_q, shape);
    if (sample) upload_sample_inputs(m, batch, f.rows, sin);
    fetch(0, num_rows);
    keep_hidden();
    return result;
  }
  std::optional<phase::Scope> staging(phase::kRunnerStage);
  CudaRunner::Impl::Staged st =
      m.stage(f.ids, f.pos, f.slots, f.qsl, f.lens, f.tables, f.table_lens, 0, &f.more);
  for (int r = 0; r < num_rows; ++r) m.host<int32_t>(m.lay.rows)[r] = f.rows[size_t(r)].row;
  m.upload_inputs();
  staging.reset();
  {
    phase::Scope launching(phase::kRunnerLaunch);
    m.forward(st, m.kv_pool.get());
    m.kv_scales_pending = false;
  }
  if (sample) upload_sample_inputs(m, batch, f.rows, sin);
  if (m.leader && std::any_of(f.pool.begin(), f.pool.end(), [](auto& p) { return p.second > 0; }))
    result.pooled = download_pooled(m, f);
  for (int first = 0; first < num_rows; first += m.max_seqs) {
    const int count = std::min(m.max_seqs, num_rows - first);
    m.compute_logits(first, count);
    fetch(first, count);
  }
  if (num_rows == 0) check(cudaStreamSynchronize(m.stream), "running the step");
  keep_hidden();
  return result;
}

engine::ModelRunnerOutput CudaRunner::execute(const engine::SchedulerOutput& batch) {
  for (const engine::ScheduledSeq& seq : batch.seqs) {
    if ((seq.needs_sample || seq.prompt_logprobs > 0) && seq.params == nullptr)
      internal("seq " + std::to_string(seq.seq_id) + " has no sampling params");
  }
  std::vector<LogitsRow> rows;
  StepResult step = run_step(*impl_, batch, true, true, rows);
  engine::ModelRunnerOutput out;
  out.sampled_token_ids.assign(batch.seqs.size(), -1);
  out.sampled_logprobs.resize(batch.seqs.size());
  out.prompt_logprobs.resize(batch.seqs.size());
  if (!impl_->leader) return out;
  out.pooled = std::move(step.pooled);
  out.hidden_states = std::move(step.hidden);
  verify_spec_rows(batch, rows, step, size_t(impl_->vocab), out);
  for (size_t r = 0; r < rows.size(); ++r) {
    const LogitsRow& row = rows[r];
    if (row.spec) continue;
    TokenLogprobs lp = to_token_logprobs(step.sampled[r]);
    if (row.sample) {
      out.sampled_token_ids[row.seq] = lp.token_id;
      out.sampled_logprobs[row.seq] = std::move(lp);
    } else {
      out.prompt_logprobs[row.seq].push_back(std::move(lp));
    }
  }
  return out;
}

std::vector<std::vector<float>> CudaRunner::execute_logits(const engine::SchedulerOutput& batch) {
  std::vector<LogitsRow> rows;
  const std::vector<float> logits = run_step(*impl_, batch, false, false, rows).logits;
  const size_t vocab = size_t(impl_->vocab);
  std::vector<std::vector<float>> out(batch.seqs.size());
  if (!impl_->leader) return out;
  for (size_t r = 0; r < rows.size(); ++r)
    out[rows[r].seq].assign(logits.begin() + ptrdiff_t(r * vocab),
                            logits.begin() + ptrdiff_t((r + 1) * vocab));
  return out;
}

void CudaRunner::set_return_hidden() {
  if (impl_->opt.shard.tp_size > 1 || impl_->opt.shard.pp_size > 1)
    unsupported(
        "EAGLE speculative decoding needs --tensor-parallel-size 1 and "
        "--pipeline-parallel-size 1");
  impl_->return_hidden = true;
}

std::vector<float> CudaRunner::Impl::download_normed(int first, int num_rows) {
  std::vector<uint8_t> raw(size_t(num_rows) * size_t(hidden) * esz);
  std::vector<float> out(size_t(num_rows) * size_t(hidden));
  check(cudaStreamSynchronize(stream), "running the step");
  check(cudaMemcpy(raw.data(), x_normed.as<uint8_t>() + size_t(first) * hidden * esz, raw.size(),
                   cudaMemcpyDeviceToHost),
        "downloading hidden states");
  convert_to_f32(dt, raw.data(), out.data(), out.size());
  return out;
}

void CudaRunner::Impl::upload_features(const engine::SchedulerOutput& batch,
                                       std::span<const float> features) {
  const size_t n = size_t(batch.num_scheduled_tokens), dim = size_t(hidden);
  if (!config.eagle) internal("EAGLE features for a model that is not an EAGLE head");
  if (features.size() != n * dim || n == 0 || n > size_t(max_tokens))
    internal("EAGLE: " + std::to_string(features.size()) + " feature values for " +
             std::to_string(n) + " tokens");
  // In the model dtype, into x_features (the forward pass's fc reads them there), once the
  // previous step has read them.
  check(cudaStreamSynchronize(stream), "finishing the previous step");
  std::vector<uint16_t> raw(esz == 2 ? features.size() : 0);
  for (size_t i = 0; i < raw.size(); ++i)
    raw[i] = dt == DType::kBF16 ? f32_to_bf16(features[i]) : f32_to_f16(features[i]);
  const void* src = esz == 2 ? static_cast<const void*>(raw.data()) : features.data();
  check(cudaMemcpy(x_features.get(), src, n * dim * esz, cudaMemcpyHostToDevice),
        "uploading EAGLE features");
}

ModelRunner::FeatureStep CudaRunner::execute_features(const engine::SchedulerOutput& batch,
                                                      std::span<const float> features) {
  Impl& m = *impl_;
  m.upload_features(batch, features);
  std::vector<LogitsRow> rows;
  const std::vector<float> logits = run_step(m, batch, false, false, rows).logits;
  const size_t vocab = size_t(m.vocab);
  FeatureStep out;
  out.logits.resize(batch.seqs.size());
  out.hidden.resize(batch.seqs.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    out.logits[rows[r].seq].assign(logits.begin() + ptrdiff_t(r * vocab),
                                   logits.begin() + ptrdiff_t((r + 1) * vocab));
    out.hidden[rows[r].seq] = m.download_normed(rows[r].row, 1);
  }
  return out;
}

}  // namespace pagellm::runner

// ---- greedy chains (the draft model's steps) ----------------------------------------------------

namespace pagellm::runner {

namespace {

// Step j >= 1 of a greedy chain: seq i's input (its previous answer, put on the device after the
// upload; 0 here) at position after[i] + j - 1, after[i] being its context after step 0. A seq
// with all its answers runs as a padding seq.
Flat chain_step(const CudaRunner::Impl& m, const engine::SchedulerOutput& batch,
                std::span<const int> steps, const std::vector<int32_t>& after, int j) {
  static const int32_t kPlaceholder = 0;
  Flat f = empty_flat(m);
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    if (j >= steps[i]) {
      append_padding_seq(f, 1);
      continue;
    }
    engine::ScheduledSeq s = batch.seqs[i];
    s.token_ids = std::span<const int32_t>(&kPlaceholder, 1);
    s.num_computed_tokens = after[i] + j - 1;
    append_seq(m, s, f);
  }
  return f;
}

// Step 0 of a greedy chain: the batch as given; a graph shape when every seq has the same number
// of tokens, at most 1 + kMaxSpeculativeTokens (a round's catch-up: the draft's rounds after the
// first). `uploaded` runs once its inputs' upload is queued. Leaves row i's logits (seq i) in
// x_logits.
void chain_first_step(CudaRunner::Impl& m, const engine::SchedulerOutput& batch,
                      const std::function<void()>& uploaded) {
  const int n = int(batch.seqs.size());
  int graph_q = 0;
  Flat f = flatten(m, batch, false, graph_q);
  const size_t q = batch.seqs[0].token_ids.size();
  const bool uniform = q <= size_t(SpeculativeConfig::kMaxSpeculativeTokens + 1) &&
                       std::all_of(batch.seqs.begin(), batch.seqs.end(),
                                   [&](const auto& s) { return s.token_ids.size() == q; });
  const CudaRunner::Impl::DecodeShape shape =
      uniform ? m.decode_shape(n, int(q)) : CudaRunner::Impl::DecodeShape{};
  if (shape.padded_seqs > 0) return run_graph_shape(m, f, int(q), shape, uploaded, true);
  const CudaRunner::Impl::Staged st =
      m.stage(f.ids, f.pos, f.slots, f.qsl, f.lens, f.tables, f.table_lens, 0, &f.more);
  for (int r = 0; r < n; ++r) m.host<int32_t>(m.lay.rows)[r] = f.rows[size_t(r)].row;
  m.upload_inputs();
  uploaded();
  m.forward(st, m.kv_pool.get());
  m.kv_scales_pending = false;
  m.compute_logits(0, n);
}

}  // namespace

// Both chains on the GPU (execute_greedy_chain; execute_feature_chain when `features` is set: an
// EAGLE head, whose every step's output rows become the next step's features on the device).
static std::vector<std::vector<int32_t>> run_chain(CudaRunner::Impl& m,
                                                   const engine::SchedulerOutput& batch,
                                                   std::span<const int> steps,
                                                   std::span<const float> features) {
  check_greedy_chain(batch, steps);
  const int n = int(batch.seqs.size());
  if (n == 0) return {};
  const int max_steps = *std::max_element(steps.begin(), steps.end());
  const size_t answer_bytes = size_t(max_steps) * size_t(n) * sizeof(int32_t);
  if (n > m.max_seqs || answer_bytes > size_t(m.max_seqs) * size_t(m.vocab) * m.esz)
    internal("greedy chain of " + std::to_string(n) + " seqs x " + std::to_string(max_steps) +
             " steps exceeds the runner's limits");
  if (m.chain_tokens.bytes() < answer_bytes) m.chain_tokens = DevMem(answer_bytes, "chain answers");
  if (!m.inputs_uploaded)
    check(cudaEventCreateWithFlags(&m.inputs_uploaded, cudaEventDisableTiming), "creating an event");
  if (!features.empty()) m.upload_features(batch, features);
  apply_block_ops(m, batch);
  cuda::SampleRow argmax;
  argmax.temperature = 0.f;
  std::fill_n(m.host<cuda::SampleRow>(m.lay.sample_rows), n, argmax);  // uploaded with each step
  int32_t* answers = m.chain_tokens.as<int32_t>();  // [max_steps, n]
  auto uploaded = [&] { check(cudaEventRecord(m.inputs_uploaded, m.stream), "recording an event"); };
  // An EAGLE head: seq i's output row (its last token's) becomes row i of x_features.
  const size_t row = size_t(m.hidden) * m.esz;
  auto keep_features = [&](const std::vector<int32_t>& rows) {
    if (features.empty()) return;
    for (int i = 0; i < n; ++i)
      check(cudaMemcpyAsync(m.x_features.as<uint8_t>() + size_t(i) * row,
                            m.x_normed.as<uint8_t>() + size_t(rows[size_t(i)]) * row, row,
                            cudaMemcpyDeviceToDevice, m.stream),
            "feeding an EAGLE chain's features");
  };
  auto keep_answers = [&](int j) {
    m.launch_sampler(n);
    check(cudaMemcpy2DAsync(answers + size_t(j) * size_t(n), sizeof(int32_t), m.x_sample_out.get(),
                            sizeof(cuda::SampleOutput), sizeof(int32_t), size_t(n),
                            cudaMemcpyDeviceToDevice, m.stream),
          "keeping a chain's answers");
  };
  chain_first_step(m, batch, uploaded);
  keep_answers(0);
  std::vector<int32_t> after(static_cast<size_t>(n)), last_rows(static_cast<size_t>(n));
  int32_t flat = 0;  // step 0's rows: each seq's tokens in order
  for (int i = 0; i < n; ++i) {
    const engine::ScheduledSeq& seq = batch.seqs[size_t(i)];
    after[size_t(i)] = seq.num_computed_tokens + int32_t(seq.token_ids.size());
    flat += int32_t(seq.token_ids.size());
    last_rows[size_t(i)] = flat - 1;
  }
  keep_features(last_rows);
  std::vector<int32_t> decode_rows(static_cast<size_t>(n));  // later steps: seq i is row i
  for (int i = 0; i < n; ++i) decode_rows[size_t(i)] = i;
  const CudaRunner::Impl::DecodeShape shape = m.decode_shape(n, 1);
  for (int j = 1; j < max_steps; ++j) {
    Flat g = chain_step(m, batch, steps, after, j);
    // The pinned inputs are rewritten only once the previous step's upload has read them.
    check(cudaEventSynchronize(m.inputs_uploaded), "waiting for a step's upload");
    run_graph_shape(m, g, 1, shape, [&] {
      uploaded();
      check(cudaMemcpyAsync(m.dev<int32_t>(m.lay.token_ids), answers + size_t(j - 1) * size_t(n),
                            size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToDevice, m.stream),
            "feeding a chain's answers");
    });
    keep_answers(j);
    keep_features(decode_rows);
  }
  auto* host = static_cast<int32_t*>(m.logits_host);
  check(cudaMemcpyAsync(host, answers, answer_bytes, cudaMemcpyDeviceToHost, m.stream),
        "downloading a chain's answers");
  check(cudaStreamSynchronize(m.stream), "running a greedy chain");
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < steps[size_t(i)]; ++j) out[size_t(i)].push_back(host[size_t(j) * n + i]);
  return out;
}

std::vector<std::vector<int32_t>> CudaRunner::execute_greedy_chain(
    const engine::SchedulerOutput& batch, std::span<const int> steps) {
  // A parallel group would need every rank to follow the leader's answers: the host loop does.
  if (impl_->opt.shard.tp_size > 1 || impl_->opt.shard.pp_size > 1)
    return ModelRunner::execute_greedy_chain(batch, steps);
  return run_chain(*impl_, batch, steps, {});
}

std::vector<std::vector<int32_t>> CudaRunner::execute_feature_chain(
    const engine::SchedulerOutput& batch, std::span<const float> features,
    std::span<const int> steps) {
  if (!impl_->config.eagle)
    internal("execute_feature_chain() on a model that is not an EAGLE head");
  if (features.empty()) internal("an EAGLE chain without features");
  return run_chain(*impl_, batch, steps, features);
}

}  // namespace pagellm::runner
