#include "runner/cuda_parallel_runner.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backends/cuda/peer_all_reduce.h"
#include "common/error.h"
#include "common/logging.h"

namespace pagellm::runner {

std::vector<parallel::NcclId> group_nccl_ids(int tp, int pp) {
  std::vector<parallel::NcclId> ids;
  for (int p = 0; p < pp && tp > 1; ++p) ids.push_back(parallel::make_nccl_id());
  if (pp > 1) ids.push_back(parallel::make_nccl_id());
  return ids;
}

ParallelCudaRunner::ParallelCudaRunner(const io::ModelConfig& config,
                                       const io::WeightStore* checkpoint,
                                       const CudaRunnerOptions& base, int tp, int pp,
                                       RankPlacement placement, int max_batches_in_flight)
    : max_in_flight_(std::clamp(max_batches_in_flight, 1, pp)),
      first_rank_(placement.first_rank),
      workers_(std::move(placement.workers)) {
  const int n = tp * pp;
  const int num_local = placement.num_local > 0 ? placement.num_local : n;
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) visible = 0;
  if (visible < placement.first_device + num_local)
    invalid_argument("--tensor-parallel-size " + std::to_string(tp) +
                     " x --pipeline-parallel-size " + std::to_string(pp) + " needs " +
                     std::to_string(placement.first_device + num_local) +
                     " GPUs in this process but " + std::to_string(visible) + " are visible");
  const int leader_rank = n - tp;  // the last stage's first tensor-parallel rank samples
  if (leader_rank >= first_rank_ && leader_rank < first_rank_ + num_local)
    leader_ = leader_rank - first_rank_;
  const std::vector<parallel::NcclId> ids =
      placement.ids.empty() ? group_nccl_ids(tp, pp) : placement.ids;
  if (ids.size() != size_t((tp > 1 ? pp : 0) + (pp > 1 ? 1 : 0)))
    throw_error(ErrorKind::kInternal, "parallel runner: wrong number of NCCL ids");
  tp_comms_.resize(size_t(num_local));
  world_comms_.resize(size_t(num_local));
  ranks_.resize(size_t(num_local));
  threads_ = std::make_unique<parallel::RankThreads>(
      num_local, parallel::RankThreads::kDefaultGrace, kStepSpin);
  // A worker process that goes away fails the group at once instead of leaving collectives hanging.
  for (auto& ch : workers_)
    watchers_.emplace_back([this, c = ch.get()] {
      c->wait_closed();
      if (!closing_) {
        log::error("a worker process of the parallel group has gone: aborting the group");
        abort("a worker process of the parallel group has gone");
      }
    });
  try {
    load_ranks(config, checkpoint, base, tp, pp, placement.first_device, ids);
  } catch (...) {
    shut_down();  // the destructor will not run
    throw;
  }
  watchdog_ = std::make_unique<parallel::StepWatchdog>(
      parallel::StepWatchdog::default_timeout(), [this](const std::string& why) {
        log::error(why);
        abort(why);
      });
}

void ParallelCudaRunner::load_ranks(const io::ModelConfig& config, const io::WeightStore* checkpoint,
                                    const CudaRunnerOptions& base, int tp, int pp, int first_device,
                                    const std::vector<parallel::NcclId>& ids) {
  const int n = tp * pp;
  const std::vector<std::shared_ptr<cuda::PeerAllReduce>> peer =
      peer_all_reduces(base, tp, pp, first_device, int(ranks_.size()) == n);
  on_ranks([&](int l) {
    const int w = first_rank_ + l;
    const parallel::ShardSpec shard{w % tp, tp, w / tp, pp};
    const int device = first_device + l;
    if (cudaSetDevice(device) != cudaSuccess)
      throw_error(ErrorKind::kInternal, "cannot select GPU " + std::to_string(device));
    if (tp > 1)
      tp_comms_[size_t(l)] =
          parallel::make_nccl_communicator(ids[size_t(shard.pp_rank)], tp, shard.tp_rank,
                                           peer.empty() ? nullptr : peer[size_t(shard.pp_rank)]);
    if (pp > 1) world_comms_[size_t(l)] = parallel::make_nccl_communicator(ids.back(), n, w);
    CudaRunnerOptions o = base;
    o.shard = shard;
    o.device = device;
    o.tp = tp_comms_[size_t(l)].get();
    o.world = world_comms_[size_t(l)].get();
    // All ranks of all processes agree: over the world when there are stages, else over the one
    // tensor-parallel group (which then spans every rank).
    parallel::Communicator* all = pp > 1 ? o.world : o.tp;
    o.agree_min = [all](int64_t v) { return all->all_reduce_min(v); };
    ranks_[size_t(l)] = std::make_unique<CudaRunner>(config, checkpoint, o);
  });
}

void ParallelCudaRunner::close_workers() {
  closing_ = true;
  for (auto& ch : workers_) {
    try {
      ch->send(parallel::encode_shutdown());
    } catch (const Error&) {
      // That worker has gone already.
    }
    ch->close();
  }
  for (std::thread& t : watchers_) t.join();
  watchers_.clear();
}

std::vector<std::shared_ptr<cuda::PeerAllReduce>> ParallelCudaRunner::peer_all_reduces(
    const CudaRunnerOptions& base, int tp, int pp, int first_device, bool all_ranks_here) {
  std::vector<std::shared_ptr<cuda::PeerAllReduce>> out;
  // Worker processes would need the buffers shared across processes (CUDA IPC): NCCL there.
  if (tp < 2 || !all_ranks_here || base.disable_custom_all_reduce) return out;
  for (int p = 0; p < pp; ++p) {
    std::vector<int> devices;
    for (int t = 0; t < tp; ++t) devices.push_back(first_device + p * tp + t);
    std::string why_not;
    out.push_back(cuda::PeerAllReduce::create(devices, kPeerAllReduceBytes, &why_not));
    if (!out.back()) {
      log::info("tensor-parallel all-reduces go through NCCL only: " + why_not);
      return {};
    }
  }
  log::info("tensor-parallel all-reduces up to " + std::to_string(kPeerAllReduceBytes / 1024) +
            " KB use the one-shot NVLink kernel (--disable-custom-all-reduce: NCCL only)");
  return out;
}

void ParallelCudaRunner::leave_ranks_to_exit() {
  log::error("a rank did not return after its group was aborted: its GPU state is left to the "
             "process exit");
  for (auto& r : ranks_) (void)r.release();
  for (auto* comms : {&tp_comms_, &world_comms_})
    for (auto& c : *comms) (void)c.release();
}

ParallelCudaRunner::~ParallelCudaRunner() { shut_down(); }

void ParallelCudaRunner::shut_down() {
  // Batches still in flight run to their end (or fail) first: their jobs use the ranks.
  while (!in_flight_.empty()) {
    try {
      wait_next();
    } catch (const std::exception&) {
      // Reported by the step that met it, if anyone is left to tell.
    }
  }
  watchdog_.reset();  // no abort may start from here on
  close_workers();
  // Freeing device memory waits for the device, which a stuck rank may hold forever.
  if (!aborts_.wait_for(kTeardownLimit) || threads_->abandoned()) {
    leave_ranks_to_exit();
    return;
  }
  // Runners (their streams, graphs and memory) go before the communicators they use.
  ranks_.clear();
  destroy_communicators();
}

void ParallelCudaRunner::destroy_communicators() {
  // NCCL's teardown may wait for the other ranks of the process (so each runs on its own thread)
  // or on a peer that has gone (so it is bounded).
  parallel::DetachableTasks teardown;
  for (auto* comms : {&tp_comms_, &world_comms_})
    for (auto& c : *comms)
      if (c) teardown.start([c = c.release()] { delete c; });
  if (!teardown.wait_for(kTeardownLimit))
    log::error("NCCL communicators did not shut down within " +
               std::to_string(kTeardownLimit.count() / 1000) + " s: leaving them to the process exit");
}

void ParallelCudaRunner::abort(const std::string& why) {
  if (aborting_.exchange(true)) return;
  threads_->fail(why);
  // Each communicator on its own thread, without waiting: an abort can block in NCCL (on the other
  // ranks of the process, or on a kernel that does not see the abort flag); the steps in flight get
  // RankThreads' grace period either way.
  for (auto* comms : {&tp_comms_, &world_comms_})
    for (auto& c : *comms)
      if (c) aborts_.start([c = c.get(), why] { c->abort(why); });
}

void ParallelCudaRunner::on_ranks(const std::function<void(int)>& fn) {
  // Steps are bounded by the watchdog (made once the ranks are loaded: loading has no fixed bound).
  if (watchdog_) watchdog_->begin_step();
  struct EndStep {
    parallel::StepWatchdog* w;
    ~EndStep() {
      if (w) w->end_step();
    }
  } end{watchdog_.get()};
  threads_->run(fn, [&](const std::string& why) { abort(why); });
}

engine::ModelRunnerOutput ParallelCudaRunner::execute(const engine::SchedulerOutput& batch) {
  if (!in_flight_.empty())
    throw_error(ErrorKind::kInternal, "parallel runner: execute() with batches in flight");
  submit(batch);
  return wait_next();
}

void ParallelCudaRunner::submit(const engine::SchedulerOutput& batch) {
  if (int(in_flight_.size()) >= max_in_flight_)
    throw_error(ErrorKind::kInternal, "parallel runner: " + std::to_string(in_flight_.size()) +
                                          " batches in flight already (the limit)");
  // Workers get the steps in submission order, the order their ranks' queues run them in.
  if (!workers_.empty()) {
    const std::vector<unsigned char> message = parallel::encode_step(batch);
    for (auto& ch : workers_) ch->send(message);
  }
  // The watchdog bounds the oldest batch: from its submission, or from the previous one's end.
  if (watchdog_ && in_flight_.empty()) watchdog_->begin_step();
  auto job = std::make_shared<InFlight>();
  const int64_t step = step_++;
  // The job holds its InFlight: an abandoned rank may still write it after wait() gave up.
  job->ticket = threads_->submit(
      [this, job, b = &batch, step](int l) {
        parallel::maybe_inject_fault(fault_, first_rank_ + l, step);
        engine::ModelRunnerOutput mine = ranks_[size_t(l)]->execute(*b);
        if (l == leader_) job->out = std::move(mine);
      },
      [this](const std::string& why) { abort(why); });
  in_flight_.push_back(std::move(job));
}

engine::ModelRunnerOutput ParallelCudaRunner::wait_next() {
  if (in_flight_.empty()) throw_error(ErrorKind::kInternal, "parallel runner: no batch in flight");
  const std::shared_ptr<InFlight> job = std::move(in_flight_.front());
  in_flight_.pop_front();
  struct NextDeadline {
    ParallelCudaRunner& r;
    ~NextDeadline() {
      if (!r.watchdog_) return;
      r.in_flight_.empty() ? r.watchdog_->end_step() : r.watchdog_->begin_step();
    }
  } next{*this};
  threads_->wait(job->ticket);
  return std::move(job->out);
}

std::vector<std::vector<float>> ParallelCudaRunner::execute_logits(
    const engine::SchedulerOutput& batch) {
  if (!workers_.empty())
    unsupported("logits-only steps are not sent to worker processes (use one process)");
  if (!in_flight_.empty())
    throw_error(ErrorKind::kInternal, "parallel runner: execute_logits() with batches in flight");
  std::vector<std::vector<float>> out;
  on_ranks([&](int l) {
    auto mine = ranks_[size_t(l)]->execute_logits(batch);
    if (l == leader_) out = std::move(mine);
  });
  return out;
}

}  // namespace pagellm::runner
