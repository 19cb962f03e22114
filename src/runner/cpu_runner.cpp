#include "runner/cpu_runner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "common/error.h"
#include "common/thread_pool.h"
#include "engine/sampler.h"
#include "runner/block_ops.h"
#include "spec/rejection_sampler.h"

namespace pagellm::runner {

namespace {

// Logits rows per sampling chunk: one row (vocab-wide softmax) costs a few µs, waking a thread tens.
constexpr size_t kMinRowsPerThread = 16;

[[noreturn]] void internal(const std::string& message) {
  throw_error(ErrorKind::kInternal, "cpu runner: " + message);
}

}  // namespace

void CpuRunner::FreeDeleter::operator()(float* p) const { std::free(p); }

CpuRunner::CpuRunner(std::unique_ptr<models::LlamaModel> model, int num_kv_blocks, int block_size,
                     int num_swap_blocks, const models::KvCacheQuant& kv_quant)
    : CpuRunner(
          [&] {
            std::vector<std::unique_ptr<models::LlamaModel>> models;
            models.push_back(std::move(model));
            return models;
          }(),
          nullptr, num_kv_blocks, block_size, num_swap_blocks, kv_quant) {}

CpuRunner::CpuRunner(std::vector<std::unique_ptr<models::LlamaModel>> models,
                     std::shared_ptr<parallel::ThreadGroup> group, int num_kv_blocks,
                     int block_size, int num_swap_blocks, const models::KvCacheQuant& kv_quant,
                     int max_batches_in_flight)
    : group_(std::move(group)), num_swap_blocks_(std::max(num_swap_blocks, 0)) {
  if (models.empty() || (models.size() > 1 && (!group_ || group_->size() != int(models.size()))))
    internal("a parallel runner needs one model per rank of its group");
  for (auto& model : models) {
    const io::ModelConfig& c = model->local_config();
    const int64_t block_floats = int64_t{block_size} * c.num_key_value_heads * c.head_dim;
    models::KvCache cache(c.num_hidden_layers, num_kv_blocks, block_size, c.num_key_value_heads,
                          c.head_dim, kv_quant, model->geometry().layer_begin, kv::kv_layout_of(c));
    std::unique_ptr<float[], FreeDeleter> swap;
    if (num_swap_blocks_ > 0) {
      const size_t count =
          size_t(num_swap_blocks_) * 2 * size_t(cache.layout().slots) * size_t(block_floats);
      swap.reset(static_cast<float*>(std::calloc(count, sizeof(float))));
      if (!swap)
        throw_error(ErrorKind::kResourceExhausted,
                    "swap space: cannot allocate " + std::to_string(count * sizeof(float) >> 20) +
                        " MiB of host memory");
    }
    shards_.push_back({std::move(model), std::move(cache), block_floats, std::move(swap), {}, {}});
  }
  const int num_stages = shards_[0].model->shard().pp_size;
  max_in_flight_ = std::clamp(max_batches_in_flight, 1, num_stages);
  if (shards_.size() > 1) threads_ = std::make_unique<parallel::RankThreads>(int(shards_.size()));
}

CpuRunner::~CpuRunner() = default;

std::span<const float> CpuRunner::swap_block(int host_block, int rank) const {
  if (host_block < 0 || host_block >= num_swap_blocks_) internal("invalid swap block");
  const Shard& sh = shards_.at(size_t(rank));
  const size_t per_block = 2 * size_t(sh.cache.layout().slots) * size_t(sh.block_floats);
  return {sh.swap.get() + size_t(host_block) * per_block, per_block};
}

void CpuRunner::swap_block_copy(Shard& sh, int32_t device, int32_t host, bool to_host) {
  const size_t bytes = size_t(sh.block_floats) * sizeof(float);
  const int64_t num_slots = sh.cache.layout().slots;
  float* host_base = sh.swap.get() + size_t(host) * 2 * size_t(num_slots) * size_t(sh.block_floats);
  for (int64_t l = 0; l < num_slots; ++l) {
    const cpu::KvLayerView v = sh.cache.slot(l);
    float* dev_k = v.k + int64_t{device} * sh.block_floats;
    float* dev_v = v.v + int64_t{device} * sh.block_floats;
    float* host_k = host_base + size_t(2 * l) * size_t(sh.block_floats);
    float* host_v = host_k + sh.block_floats;
    if (to_host) {
      std::memcpy(host_k, dev_k, bytes);
      std::memcpy(host_v, dev_v, bytes);
    } else {
      std::memcpy(dev_k, host_k, bytes);
      std::memcpy(dev_v, host_v, bytes);
    }
  }
}


void CpuRunner::run_rank(size_t rank, Job& job) {
  Shard& sh = shards_[rank];
  const engine::SchedulerOutput& batch = *job.batch;
  for (const auto& [dev, host] : batch.blocks_to_swap_out) swap_block_copy(sh, dev, host, true);
  for (const auto& [host, dev] : batch.blocks_to_swap_in) swap_block_copy(sh, dev, host, false);
  for (const auto& [src, dst] : batch.blocks_to_copy) sh.cache.copy_block(src, dst);
  // A step may only move blocks (a swap-out with nothing left to run).
  if (job.seqs.empty() || job.seqs[0].empty()) return;
  models::ForwardBatch fb{job.token_ids, job.positions, job.slot_mappings[0], job.seqs[0]};
  fb.features = job.features;
  for (size_t g = 1; g < job.seqs.size(); ++g) {
    fb.more_slot_mappings.push_back(job.slot_mappings[g]);
    fb.more_seqs.push_back(job.seqs[g]);
  }
  const std::span<const float> hidden = sh.model->forward(fb, sh.cache);
  if (!sh.model->shard().last_stage()) return;
  // The other last-stage ranks take part in the vocabulary all-gather into their own scratch.
  const bool mine = rank == logits_rank();
  if (!job.logits_rows.empty()) {
    std::vector<float>& logits = mine ? job.logits : sh.logits;
    logits.resize(job.logits_rows.size() * size_t(config().vocab_size));
    sh.model->compute_logits(hidden, job.logits_rows, logits.data());
  }
  if (!job.pool_rows.empty()) {
    std::vector<float>& pooled = mine ? job.pooled : sh.pooled;
    pooled.resize(job.pool_rows.size() * size_t(config().hidden_size));
    sh.model->final_norm_rows(hidden, job.pool_rows, pooled.data());
  }
  if (mine) copy_hidden_rows(job, hidden, *sh.model);
}

void CpuRunner::copy_hidden_rows(Job& job, std::span<const float> hidden,
                                 const models::LlamaModel& model) {
  const size_t dim = size_t(config().hidden_size);
  job.hidden.clear();
  if (!job.features.empty()) {  // an EAGLE head: its output at the rows it answers for
    job.hidden.resize(job.logits_rows.size() * dim);
    for (size_t r = 0; r < job.logits_rows.size(); ++r)
      std::copy_n(hidden.data() + size_t(job.logits_rows[r]) * dim, dim,
                  job.hidden.data() + r * dim);
  } else if (return_hidden_ && engine::any_return_hidden(*job.batch)) {
    all_rows_.resize(job.token_ids.size());
    for (size_t r = 0; r < all_rows_.size(); ++r) all_rows_[r] = int64_t(r);
    job.hidden.resize(all_rows_.size() * dim);
    model.final_norm_rows(hidden, all_rows_, job.hidden.data());
  }
}

int64_t CpuRunner::kv_bytes_per_block(const io::ModelConfig& c, int block_size) {
  return 2 * int64_t{kv::kv_layout_of(c).slots} * block_size * c.num_key_value_heads * c.head_dim *
         static_cast<int64_t>(sizeof(float));
}

void CpuRunner::flatten(Job& job, bool with_prompt_rows) const {
  const engine::SchedulerOutput& batch = *job.batch;
  const int64_t num_blocks = shards_[0].cache.num_blocks();
  const int64_t bs = shards_[0].cache.block_size();
  const int64_t vocab = config().vocab_size;
  const size_t num_groups = size_t(shards_[0].cache.layout().num_groups());
  job.token_ids.clear();
  job.positions.clear();
  job.slot_mappings.resize(num_groups);
  job.seqs.resize(num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    job.slot_mappings[g].clear();
    job.seqs[g].clear();
  }
  job.rows.clear();
  job.pool_rows.clear();
  job.pool_ranges.assign(batch.seqs.size(), {0, 0});
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const engine::ScheduledSeq& seq = batch.seqs[s];
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    const int64_t begin = static_cast<int64_t>(job.token_ids.size());
    if (n == 0 || seq.num_computed_tokens < 0)
      internal("seq " + std::to_string(seq.seq_id) + " has no tokens");
    for (size_t g = 0; g < num_groups; ++g) {
      const std::span<const int32_t> table = seq.block_tables[g];
      if (static_cast<int64_t>(table.size()) * bs < seq.num_computed_tokens + n)
        internal("block table of seq " + std::to_string(seq.seq_id) + " is too short");
      for (int32_t b : table)
        if (b < 0 || b >= num_blocks)
          internal("seq " + std::to_string(seq.seq_id) + " uses an invalid KV block");
      for (int64_t i = 0; i < n; ++i) {
        const int64_t pos = seq.num_computed_tokens + i;
        job.slot_mappings[g].push_back(static_cast<int64_t>(table[pos / bs]) * bs + pos % bs);
      }
      job.seqs[g].push_back({begin, n, seq.num_computed_tokens, table});
    }
    for (int64_t i = 0; i < n; ++i) {
      const int32_t id = seq.token_ids[i];
      if (id < 0 || id >= vocab)
        invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (" +
                         std::to_string(vocab) + ")");
      const int64_t pos = seq.num_computed_tokens + i;
      job.token_ids.push_back(id);
      job.positions.push_back(static_cast<int32_t>(pos));
    }
    if (seq.pooling != PoolingType::kNone) {
      // kMean: every row of this step; kLast: the prompt's last row, on its final step.
      job.pool_ranges[s].first = job.pool_rows.size();
      if (seq.pooling == PoolingType::kMean)
        for (int64_t i = 0; i < n; ++i) job.pool_rows.push_back(begin + i);
      else if (seq.needs_sample)
        job.pool_rows.push_back(begin + n - 1);
      job.pool_ranges[s].second = job.pool_rows.size();
      continue;
    }
    // Prompt-logprob rows: positions whose next token is a prompt token.
    if (with_prompt_rows && seq.prompt_logprobs > 0) {
      const int64_t prompt_len = static_cast<int64_t>(seq.prompt_token_ids.size());
      for (int64_t i = 0; i < n && seq.num_computed_tokens + i + 1 < prompt_len; ++i)
        job.rows.push_back({begin + i, s, static_cast<int32_t>(seq.num_computed_tokens + i), false});
    }
    // The sampling row, or with drafts the last 1 + num_spec_tokens rows (verified together).
    if (seq.num_spec_tokens < 0 || seq.num_spec_tokens >= n || (seq.num_spec_tokens > 0 && !seq.needs_sample))
      internal("seq " + std::to_string(seq.seq_id) + " has a bad draft count");
    if (seq.needs_sample)
      for (int64_t i = n - 1 - seq.num_spec_tokens; i < n; ++i)
        job.rows.push_back({begin + i, s, static_cast<int32_t>(seq.num_computed_tokens + i), true});
  }
  job.logits_rows.clear();
  for (const LogitsRow& r : job.rows) job.logits_rows.push_back(r.row);
  job.logits.clear();
  job.pooled.clear();
}

void CpuRunner::start_job(const engine::SchedulerOutput& batch, bool with_prompt_rows) {
  if (int(jobs_.size()) >= max_in_flight_)
    internal(std::to_string(jobs_.size()) + " batches in flight already (the limit)");
  check_block_ops(batch, shards_[0].cache.num_blocks(), num_swap_blocks_, "cpu runner");
  std::unique_ptr<Job> job;
  if (spare_jobs_.empty()) {
    job = std::make_unique<Job>();
  } else {
    job = std::move(spare_jobs_.back());
    spare_jobs_.pop_back();
  }
  job->batch = &batch;
  job->ticket = 0;
  job->features = pending_features_;
  flatten(*job, with_prompt_rows);
  if (!threads_) {
    run_rank(0, *job);
    jobs_.push_back(std::move(job));
    return;
  }
  const int64_t step = parallel_steps_++;
  Job* j = job.get();
  jobs_.push_back(std::move(job));
  // One rank's error aborts the group so no rank waits forever; wait() rethrows it.
  j->ticket = threads_->submit(
      [this, j, step](int r) {
        parallel::maybe_inject_fault(fault_, r, step);
        run_rank(size_t(r), *j);
      },
      [this](const std::string& why) { group_->abort(why); });
}

std::unique_ptr<CpuRunner::Job> CpuRunner::finish_job() {
  if (jobs_.empty()) internal("no batch in flight");
  std::unique_ptr<Job> job = std::move(jobs_.front());
  jobs_.pop_front();
  if (job->ticket != 0) {
    try {
      threads_->wait(job->ticket);
    } catch (...) {
      spare_jobs_.push_back(std::move(job));
      throw;
    }
  }
  return job;
}

void CpuRunner::submit(const engine::SchedulerOutput& batch) { start_job(batch, true); }

engine::ModelRunnerOutput CpuRunner::wait_next() {
  std::unique_ptr<Job> job = finish_job();
  engine::ModelRunnerOutput out = sample(*job);
  spare_jobs_.push_back(std::move(job));
  return out;
}

engine::ModelRunnerOutput CpuRunner::execute(const engine::SchedulerOutput& batch) {
  if (!jobs_.empty()) internal("execute() with batches in flight");
  submit(batch);
  return wait_next();
}

std::vector<std::vector<float>> CpuRunner::execute_logits(const engine::SchedulerOutput& batch) {
  if (!jobs_.empty()) internal("execute_logits() with batches in flight");
  start_job(batch, false);
  std::unique_ptr<Job> job = finish_job();
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  std::vector<std::vector<float>> out(batch.seqs.size());
  for (size_t r = 0; r < job->rows.size(); ++r)
    out[job->rows[r].seq].assign(job->logits.begin() + static_cast<ptrdiff_t>(r * vocab),
                                 job->logits.begin() + static_cast<ptrdiff_t>((r + 1) * vocab));
  spare_jobs_.push_back(std::move(job));
  return out;
}

void CpuRunner::set_return_hidden() {
  if (shards_[0].model->shard().tp_size > 1 || shards_[0].model->shard().pp_size > 1)
    unsupported(
        "EAGLE speculative decoding needs --tensor-parallel-size 1 and "
        "--pipeline-parallel-size 1 on the CPU backend");
  return_hidden_ = true;
}

ModelRunner::FeatureStep CpuRunner::execute_features(const engine::SchedulerOutput& batch,
                                                     std::span<const float> features) {
  if (!jobs_.empty()) internal("execute_features() with batches in flight");
  if (!config().eagle) internal("execute_features() on a model that is not an EAGLE head");
  const size_t dim = size_t(config().hidden_size);
  if (features.size() != size_t(batch.num_scheduled_tokens) * dim || features.empty())
    internal("execute_features(): " + std::to_string(features.size()) + " feature values for " +
             std::to_string(batch.num_scheduled_tokens) + " tokens");
  // start_job takes a spare job: it sets the features on whichever it takes (a job's features
  // are reset by every start_job, so the caller's span is never read after this call).
  pending_features_ = features;
  start_job(batch, false);
  pending_features_ = {};
  std::unique_ptr<Job> job = finish_job();
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  FeatureStep out;
  out.logits.resize(batch.seqs.size());
  out.hidden.resize(batch.seqs.size());
  for (size_t r = 0; r < job->rows.size(); ++r) {
    const size_t s = job->rows[r].seq;
    out.logits[s].assign(job->logits.begin() + ptrdiff_t(r * vocab),
                         job->logits.begin() + ptrdiff_t((r + 1) * vocab));
    out.hidden[s].assign(job->hidden.begin() + ptrdiff_t(r * dim),
                         job->hidden.begin() + ptrdiff_t((r + 1) * dim));
  }
  spare_jobs_.push_back(std::move(job));
  return out;
}

void CpuRunner::collect_pooled(const Job& job, engine::ModelRunnerOutput& out) const {
  if (job.pool_rows.empty()) return;
  const size_t dim = size_t(config().hidden_size);
  out.pooled.resize(job.batch->seqs.size());
  for (size_t s = 0; s < job.batch->seqs.size(); ++s) {
    const auto [begin, end] = job.pool_ranges[s];
    if (begin == end) continue;
    std::vector<float>& v = out.pooled[s];
    v.assign(dim, 0.f);
    for (size_t r = begin; r < end; ++r)
      for (size_t d = 0; d < dim; ++d) v[d] += job.pooled[r * dim + d];
  }
}

engine::ModelRunnerOutput CpuRunner::sample(Job& job) {
  const engine::SchedulerOutput& batch = *job.batch;
  const std::vector<LogitsRow>& rows = job.rows;
  job.logits.resize(rows.size() * size_t(config().vocab_size));
  const std::span<float> logits(job.logits);
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  engine::ModelRunnerOutput out;
  out.sampled_token_ids.assign(batch.seqs.size(), -1);
  out.sampled_logprobs.resize(batch.seqs.size());
  out.prompt_logprobs.resize(batch.seqs.size());
  collect_pooled(job, out);
  if (return_hidden_) out.hidden_states = std::move(job.hidden);
  // Each seq's sampling rows are contiguous: one group per sampling seq, [first row, end row).
  std::vector<std::pair<size_t, size_t>> groups;
  bool any_spec = false;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (batch.seqs[rows[r].seq].params == nullptr)
      internal("seq " + std::to_string(batch.seqs[rows[r].seq].seq_id) + " has no sampling params");
    if (!rows[r].sample) continue;
    if (!groups.empty() && rows[groups.back().first].seq == rows[r].seq) {
      groups.back().second = r + 1;
    } else {
      groups.emplace_back(r, r + 1);
    }
    any_spec = any_spec || batch.seqs[rows[r].seq].num_spec_tokens > 0;
  }
  if (any_spec) {
    out.spec_token_ids.resize(batch.seqs.size());
    out.spec_logprobs.resize(batch.seqs.size());
  }
  engine::wait_for_masks(batch);  // built while the forward pass ran
  // Groups belong to distinct seqs and sample_token / verify_drafts are pure functions of their
  // rows (their scratch is thread-local), so the groups are sampled in parallel. A row's token
  // never depends on the split. Exceptions are carried back to this thread.
  std::exception_ptr error;
  std::mutex error_mutex;
  ThreadPool::global().parallel_for(
      groups.size(),
      [&](size_t begin, size_t end) {
        try {
          for (size_t g = begin; g < end; ++g) {
            const auto [first, last] = groups[g];
            const size_t s = rows[first].seq;
            const std::span<float> group_logits = logits.subspan(first * vocab, (last - first) * vocab);
            if (batch.seqs[s].num_spec_tokens > 0) {
              spec::VerifyResult result = spec::verify_drafts(group_logits, batch.seqs[s]);
              out.spec_token_ids[s] = std::move(result.token_ids);
              out.spec_logprobs[s] = std::move(result.logprobs);
              continue;
            }
            engine::SampleResult result = engine::sample_token(group_logits, batch.seqs[s]);
            out.sampled_token_ids[s] = result.token_id;
            out.sampled_logprobs[s] = std::move(result.logprobs);
          }
        } catch (...) {
          std::lock_guard lock(error_mutex);
          if (!error) error = std::current_exception();
        }
      },
      kMinRowsPerThread);
  if (error) std::rethrow_exception(error);
  for (size_t r = 0; r < rows.size(); ++r) {
    const LogitsRow& row = rows[r];
    if (row.sample) continue;
    const engine::ScheduledSeq& seq = batch.seqs[row.seq];
    const int32_t next = seq.prompt_token_ids[static_cast<size_t>(row.position) + 1];
    out.prompt_logprobs[row.seq].push_back(
        engine::compute_logprobs(logits.subspan(r * vocab, vocab), next, seq.prompt_logprobs));
  }
  return out;
}


}  // namespace pagellm::runner
