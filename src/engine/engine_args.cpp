#include <string>

#include "common/error.h"
#include "io/hf_hub.h"
#include "quant/kv_cache_quant.h"
#include "pagellm/engine_args.h"
#ifdef PAGELLM_HAVE_CUDA
#include "runner/cuda_model_loader.h"  // num_visible_gpus
#endif

namespace pagellm {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) invalid_argument(message);
}

}  // namespace

void EngineArgs::validate() const {
  require(runner == "generate" || runner == "pooling" || runner == "auto",
          "--runner: expected generate or pooling, got '" + runner + "'");
  const std::optional<DType> kv_fp8 = quant::parse_kv_cache_dtype(kv_cache_dtype);
  require(kv_fp8 || !calculate_kv_scales,
          "--calculate-kv-scales needs an FP8 KV cache (--kv-cache-dtype fp8)");
  require(load_format == "auto" || load_format == "safetensors" || load_format == "dummy",
          "--load-format: expected auto, safetensors or dummy, got '" + load_format + "'");
  require(dtype == "auto" || dtype == "float32" || dtype == "float16" || dtype == "bfloat16" ||
              dtype == "half" || dtype == "float",
          "--dtype: expected auto, float32, float16 or bfloat16, got '" + dtype + "'");
  require(device == "auto" || device == "cpu" || device == "cuda",
          "--device: expected auto, cpu or cuda, got '" + device + "'");
  require(max_model_len >= 0, "--max-model-len: must be >= 0 (0 = from config.json)");
  require(block_size >= 8 && block_size <= 128 && (block_size & (block_size - 1)) == 0,
          "--block-size: must be a power of two in [8, 128], got " + std::to_string(block_size));
  require(num_kv_blocks >= 0, "--num-kv-blocks: must be >= 0");
  require(kv_cache_memory_gib > 0.0 && kv_cache_memory_gib <= 4096.0,
          "--kv-cache-memory: must be in (0, 4096] GiB");
  require(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0,
          "--gpu-memory-utilization: must be in (0, 1]");
  require(swap_space_gib >= 0.0 && swap_space_gib <= 4096.0, "--swap-space: must be in [0, 4096] GiB");
  require(max_num_seqs >= 1 && max_num_seqs <= 65536, "--max-num-seqs: must be in [1, 65536]");
  require(max_num_batched_tokens >= 0 && max_num_batched_tokens <= (1 << 24),
          "--max-num-batched-tokens: must be in [0, 16777216] (0: the device's default)");
  require(long_prefill_token_threshold >= 0 && long_prefill_token_threshold <= (1 << 24),
          "--long-prefill-token-threshold: must be in [0, 16777216]");
  require(scheduling_policy == "fcfs" || scheduling_policy == "priority",
          "--scheduling-policy: expected fcfs or priority, got '" + scheduling_policy + "'");
  require(num_threads >= 0 && num_threads <= 1024, "--num-threads: must be in [0, 1024]");
  require(tensor_parallel_size >= 1 && tensor_parallel_size <= 1024,
          "--tensor-parallel-size: must be in [1, 1024], got " + std::to_string(tensor_parallel_size));
  require(nnodes >= 1 && nnodes <= 4096, "--nnodes: must be in [1, 4096], got " + std::to_string(nnodes));
  require(node_rank >= 0 && node_rank < nnodes,
          "--node-rank: must be in [0, --nnodes), got " + std::to_string(node_rank));
  require(master_port >= 0 && master_port <= 65535, "--master-port: must be in [0, 65535]");
  require(pipeline_parallel_size >= 1 && pipeline_parallel_size <= 1024,
          "--pipeline-parallel-size: must be in [1, 1024], got " +
              std::to_string(pipeline_parallel_size));
  require(max_batches_in_flight >= 0 && max_batches_in_flight <= 1024,
          "--max-batches-in-flight: must be in [0, 1024], got " + std::to_string(max_batches_in_flight));
  require(data_parallel_size >= 1 && data_parallel_size <= 1024,
          "--data-parallel-size: must be in [1, 1024], got " + std::to_string(data_parallel_size));
  require(data_parallel_rank >= 0 && data_parallel_rank < data_parallel_size,
          "data parallel rank " + std::to_string(data_parallel_rank) +
              " is outside [0, --data-parallel-size)");
  require(data_parallel_size == 1 || nnodes == 1,
          "--data-parallel-size: replicas run in one process; not with --nnodes > 1");
  speculative.validate();
  require(!speculative.enabled() || runner != "pooling",
          "--speculative-config: a pooling engine (--runner pooling) generates nothing to speculate on");
}

EngineArgs EngineArgs::for_replica(int rank) const {
  EngineArgs a = *this;
  a.data_parallel_rank = rank;
  return a;
}

void EngineArgs::resolve_device() {
  if (device == "auto") {
#ifdef PAGELLM_HAVE_CUDA
    device = runner::num_visible_gpus() > 0 ? "cuda" : "cpu";
#else
    device = "cpu";
#endif
  }
  if (max_num_batched_tokens > 0) return;
  max_num_batched_tokens = kDefaultBatchedTokens;
#ifdef PAGELLM_HAVE_CUDA
  // vLLM's rule (engine/arg_utils.py): larger steps on large GPUs, except A100s, where they cost.
  if (device == "cuda" && !api_server) max_num_batched_tokens = runner::large_gpu() ? 16384 : 8192;
#endif
}

void EngineArgs::resolve() {
  resolve_device();
  validate();
  resolve_hub_ids();
}

void EngineArgs::resolve_hub_ids() {
  if (io::hub::is_repo_id(model)) {
    model_id = model;
    model = io::hub::resolve_model(model, io::hub::options_from_env(revision, download_dir)).string();
  }
  if (io::hub::is_repo_id(tokenizer))
    tokenizer = io::hub::resolve_model(tokenizer,
                                       io::hub::options_from_env(tokenizer_revision, download_dir))
                    .string();
}

}  // namespace pagellm
