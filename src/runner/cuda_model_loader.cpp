#include "runner/cuda_model_loader.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include <cuda_runtime.h>

#include "common/error.h"
#include "common/logging.h"
#include "io/eagle_config.h"
#include "quant/kv_cache_quant.h"
#include "runner/cuda_parallel_runner.h"
#include "runner/cuda_runner.h"

namespace pagellm::runner {

namespace {

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The CUDA runner: weights in the --dtype (default: config.json's torch_dtype), dummy weights made on
// the GPU, the KV pool sized by --gpu-memory-utilization unless --num-kv-blocks is given.
CudaRunnerOptions cuda_options(const EngineArgs& args, const LoadedModel& m) {
  CudaRunnerOptions o;
  o.dtype = m.config.torch_dtype;
  if (args.dtype != "auto") {
    const auto dt = dtype_from_torch_name(args.dtype);
    if (!dt) invalid_argument("--dtype '" + args.dtype + "' is not supported (float32, float16, bfloat16)");
    o.dtype = *dt;
  }
  if (!(args.gpu_memory_utilization > 0 && args.gpu_memory_utilization <= 1))
    invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  o.block_size = args.block_size;
  o.gpu_memory_utilization = args.gpu_memory_utilization;
  o.num_kv_blocks = args.num_kv_blocks;
  o.max_num_seqs = args.max_num_seqs;
  o.max_num_batched_tokens = args.max_num_batched_tokens;
  o.max_model_len = args.max_model_len;
  o.enforce_eager = args.enforce_eager;
  o.disable_custom_all_reduce = args.disable_custom_all_reduce;
  o.seed = args.seed;
  o.model_name = m.name;
  // The pinned host pool must fit in host memory next to everything else; the runner sizes it in
  // blocks of its KV dtype.
  if (!(args.swap_space_gib >= 0) || !std::isfinite(args.swap_space_gib))
    invalid_argument("--swap-space must be a non-negative number of GiB");
  if (args.swap_space_gib * 1073741824.0 > double(physical_memory_bytes()))
    throw_error(ErrorKind::kResourceExhausted,
                "--swap-space " + std::to_string(args.swap_space_gib) +
                    " GiB exceeds this machine's memory (" +
                    std::to_string(physical_memory_bytes() >> 20) + " MiB)");
  o.swap_space_gib = args.swap_space_gib;
  o.kv_cache_fp8 = quant::parse_kv_cache_dtype(args.kv_cache_dtype);
  o.calculate_kv_scales = args.calculate_kv_scales;
  return o;
}

// With a draft model (--speculative-config "draft_model"), the draft's runner is created right
// after this one on its first GPU (spec/draft_proposer.cpp), with a KV pool of as many tokens as
// ours: its room is kept out of our KV budget. The weights are counted from the draft's config;
// activations get a generous bound (every buffer of a full step, twice) and 512 MiB covers the
// cuBLAS workspace and the draft's CUDA graphs.
// An EAGLE head is counted the same way (its config's layers, and a copy of the embedding and LM
// head).
void keep_room_for_draft(const EngineArgs& args, CudaRunnerOptions& o) {
  if (args.speculative.method != "draft_model" && args.speculative.method != "eagle") return;
  if (args.data_parallel_size > 1)
    unsupported("--speculative-config: " + args.speculative.method +
                " with --data-parallel-size > 1 on cuda is not supported yet (use ngram, or one "
                "replica)");
  const std::filesystem::path dir(args.speculative.model);
  if (!std::filesystem::exists(dir / "config.json")) return;  // the draft's loader says so
  bool eagle3 = false;
  const io::ModelConfig d = args.speculative.method == "eagle"
                                ? io::load_eagle_head_config(dir, &eagle3)
                                : io::load_model_config(dir);
  DType dt = d.torch_dtype;
  if (args.dtype != "auto") dt = o.dtype;
  const int64_t esz = int64_t(dtype_size(dt));
  const int64_t heads = std::max<int64_t>(d.num_attention_heads, 1);
  const int64_t head_dim = d.head_dim > 0 ? d.head_dim : d.hidden_size / heads;
  const int64_t qkv = (heads + 2 * d.num_key_value_heads) * head_dim;
  const int64_t per_layer = d.hidden_size * (qkv + heads * head_dim) +
                            3 * d.hidden_size * d.intermediate_size + 2 * d.hidden_size;
  const int64_t params = d.num_hidden_layers * per_layer +
                         d.vocab_size * d.hidden_size * (d.tie_word_embeddings ? 1 : 2);
  const int64_t tokens = std::max(args.max_num_batched_tokens, args.max_num_seqs);
  const int64_t activations = tokens * (4 * d.hidden_size + qkv + 3 * d.intermediate_size) * esz +
                              int64_t(args.max_num_seqs) * d.vocab_size * (esz + 4);
  o.draft_fixed_bytes = size_t(params * esz + 2 * activations + (int64_t{512} << 20));
  o.draft_kv_bytes_per_token = size_t(2 * d.num_hidden_layers * d.num_key_value_heads * head_dim * esz);
}

// The FP8 KV cache's startup line: its scales and what the same memory holds in the model dtype.
void log_kv_cache(const EngineArgs& args, const CudaRunnerOptions& o, const ModelRunner& runner,
                  bool checkpoint_scales) {
  if (!o.kv_cache_fp8) {
    if (checkpoint_scales) log::info(quant::describe_kv_cache(std::nullopt, true, false));
    return;
  }
  const int64_t tokens = int64_t(runner.num_kv_blocks()) * runner.block_size();
  const size_t ratio = dtype_size(o.dtype) / dtype_size(*o.kv_cache_fp8);
  log::info(quant::describe_kv_cache(*o.kv_cache_fp8, checkpoint_scales, args.calculate_kv_scales) +
            ": " + std::to_string(tokens) + " tokens, " + std::to_string(ratio) + "x the " +
            std::to_string(tokens / int64_t(ratio)) + " a " + std::string(dtype_name(o.dtype)) +
            " cache holds in the same memory");
}

std::vector<std::vector<unsigned char>> to_bytes(const std::vector<parallel::NcclId>& ids) {
  std::vector<std::vector<unsigned char>> out;
  for (const auto& id : ids) out.emplace_back(std::begin(id.bytes), std::end(id.bytes));
  return out;
}

std::vector<parallel::NcclId> from_bytes(const std::vector<std::vector<unsigned char>>& blobs) {
  std::vector<parallel::NcclId> out(blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    if (blobs[i].size() != sizeof out[i].bytes)
      invalid_argument("rendezvous: an NCCL id of " + std::to_string(blobs[i].size()) + " bytes");
    std::memcpy(out[i].bytes, blobs[i].data(), sizeof out[i].bytes);
  }
  return out;
}

// The checkpoint, unless the weights are generated (demo model, --load-format dummy).
std::optional<io::WeightStore> open_checkpoint(const EngineArgs& args) {
  std::optional<io::WeightStore> store;
  if (!args.model.empty() && args.load_format != "dummy") store.emplace(io::WeightStore::open(args.model));
  return store;
}

}  // namespace

int num_visible_gpus() {
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) return 0;
  return visible;
}

bool large_gpu() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.totalGlobalMem >= (size_t(70) << 30) && !std::strstr(prop.name, "A100");
}

LoadedModel load_cuda_model(const EngineArgs& args, LoadedModel m, const parallel::LaunchPlan& plan,
                            std::chrono::steady_clock::time_point start) {
  const int tp = args.tensor_parallel_size, pp = args.pipeline_parallel_size;
  // Data-parallel replica r owns GPUs [r * tp * pp, (r + 1) * tp * pp).
  const int first_device = plan.first_device + args.data_parallel_rank * tp * pp;
  CudaRunnerOptions o = cuda_options(args, m);
  o.device = first_device;
  keep_room_for_draft(args, o);
  std::unique_ptr<ModelRunner> runner;
  bool kv_scales = false;
  {
    // Streamed from the mapping straight to the GPU(s): no host copy of the weights.
    const std::optional<io::WeightStore> store = open_checkpoint(args);
    const io::WeightStore* checkpoint = store ? &*store : nullptr;
    kv_scales = checkpoint && !quant::read_kv_scales(m.config, *checkpoint).empty();
    if (tp * pp == 1) {
      runner = std::make_unique<CudaRunner>(m.config, checkpoint, o);
    } else {
      RankPlacement placement;
      placement.first_rank = plan.first_rank;
      placement.num_local = plan.num_local_ranks;
      placement.first_device = first_device;
      if (plan.multi_process()) {
        log::info("waiting for " + std::to_string(plan.num_procs - 1) + " worker process(es) at port " +
                  std::to_string(plan.rendezvous.master_port) + " (" + plan.launcher + ")");
        placement.ids = group_nccl_ids(tp, pp);
        placement.workers = parallel::rendezvous_leader(
            plan.rendezvous, [&] { return to_bytes(placement.ids); });
      }
      runner = std::make_unique<ParallelCudaRunner>(m.config, checkpoint, o, tp, pp,
                                                    std::move(placement), batches_in_flight(args));
    }
  }
  const CudaStartupStats& st =
      tp * pp == 1 ? static_cast<CudaRunner&>(*runner).startup_stats()
                   : static_cast<ParallelCudaRunner&>(*runner).startup_stats();
  char rate[64] = " (generated)";
  if (st.checkpoint_bytes > 0)
    std::snprintf(rate, sizeof rate, " (%.2f GB at %.1f GB/s)", double(st.checkpoint_bytes) / 1e9,
                  double(st.checkpoint_bytes) / 1e6 / std::max(st.load_ms, 1e-3));
  char line[448];
  std::snprintf(line, sizeof line,
                "loaded %s on cuda x %d (tensor parallel %d x pipeline parallel %d; %s, %s, %.2f GB "
                "of weights per rank) in %.0f ms: weights %.0f ms%s, "
                "memory profiling %.0f ms, %d CUDA graphs %.0f ms; KV cache %d blocks x %d tokens "
                "(%.2f GB)",
                m.name.c_str(), tp * pp, tp, pp, m.config.architecture.c_str(),
                std::string(dtype_name(o.dtype)).c_str(),
                double(st.weight_bytes) / 1e9, ms_since(start), st.load_ms, rate, st.profile_ms,
                st.num_graphs, st.graph_ms, runner->num_kv_blocks(), runner->block_size(),
                double(st.kv_bytes) / 1e9);
  log::info(line);
  if (m.config.quant.fp8()) log::info("quantization: " + m.config.quant.describe());
  log_kv_cache(args, o, *runner, kv_scales);
  m.runner = std::move(runner);
  return m;
}

int run_cuda_worker(const EngineArgs& args, const LoadedModel& m, const parallel::LaunchPlan& plan) {
  std::vector<std::vector<unsigned char>> ids;
  std::unique_ptr<parallel::Channel> leader = parallel::rendezvous_worker(plan.rendezvous, &ids);
  log::info("joined the group as process " + std::to_string(plan.proc_rank) + " of " +
            std::to_string(plan.num_procs) + " (ranks " + std::to_string(plan.first_rank) + ".." +
            std::to_string(plan.first_rank + plan.num_local_ranks - 1) + ")");
  RankPlacement placement;
  placement.first_rank = plan.first_rank;
  placement.num_local = plan.num_local_ranks;
  placement.first_device = plan.first_device;
  placement.ids = from_bytes(ids);
  const std::optional<io::WeightStore> store = open_checkpoint(args);
  ParallelCudaRunner runner(m.config, store ? &*store : nullptr, cuda_options(args, m),
                            args.tensor_parallel_size, args.pipeline_parallel_size,
                            std::move(placement));
  // If the leader goes while this process waits inside a collective, the watcher unblocks it.
  // Outside a step the loop's own recv sees the leader go (or its shutdown message, which the
  // leader sends just before it closes: the close must not count as a failure then).
  std::atomic<bool> done{false}, in_step{false};
  std::thread watcher([&] {
    leader->wait_closed();
    while (!done) {
      if (in_step) {
        runner.abort("the leader process has gone");
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  int code = 0;
  try {
    for (;;) {
      const std::vector<unsigned char> message = leader->recv();
      if (parallel::message_type(message) == parallel::MessageType::kShutdown) break;
      const std::unique_ptr<parallel::DecodedStep> step = parallel::decode_step(message);
      in_step = true;
      runner.execute(step->output);
      in_step = false;
    }
  } catch (const Error& e) {
    log::error(std::string("worker process ") + std::to_string(plan.proc_rank) + ": " + e.what());
    code = 1;
  }
  done = true;
  leader->close();
  watcher.join();
  return code;
}

std::unique_ptr<ModelRunner> load_cuda_eagle_head(const EngineArgs& args,
                                                  const io::ModelConfig& head,
                                                  const io::WeightStore& store,
                                                  const ModelRunner& target,
                                                  const io::WeightStore* target_store) {
  LoadedModel m;
  m.name = args.speculative.model;
  m.config = head;
  m.config.torch_dtype = target.config().torch_dtype;  // the target's features come in its dtype
  CudaRunnerOptions o = cuda_options(args, m);
  o.num_kv_blocks = target.num_kv_blocks();  // as many tokens as the target's pool
  o.block_size = target.block_size();
  o.swap_space_gib = 0.0;
  o.kv_cache_fp8.reset();
  o.calculate_kv_scales = false;
  o.shared_embed_config = target.config();
  o.shared_embed_checkpoint = target_store;
  return std::make_unique<CudaRunner>(m.config, &store, o);
}

}  // namespace pagellm::runner
