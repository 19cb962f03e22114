#include "runner/model_loader.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "common/error.h"
#include "common/logging.h"
#include "common/thread_pool.h"
#include "parallel/launch.h"
#include "parallel/shard.h"
#include "parallel/thread_group.h"
#include "quant/int_weights.h"
#include "quant/kv_cache_quant.h"
#include "runner/cpu_runner.h"
#ifdef PAGELLM_HAVE_CUDA
#include "runner/cuda_model_loader.h"
#endif

namespace pagellm::runner {

io::ModelConfig demo_model_config() {
  io::ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 258;  // 256 byte tokens, <s> = 256, </s> = 257
  c.hidden_size = 64;
  c.intermediate_size = 176;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.bos_token_id = 256;
  c.eos_token_ids = {257};
  return c;
}

namespace {

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// KV blocks of per_block bytes (all ranks together) that --num-kv-blocks or --kv-cache-memory give.
int kv_block_count(const EngineArgs& args, int64_t per_block) {
  int64_t blocks = args.num_kv_blocks;
  if (blocks <= 0) {
    if (!(args.kv_cache_memory_gib > 0) || !std::isfinite(args.kv_cache_memory_gib))
      invalid_argument("--kv-cache-memory-gib must be positive");
    blocks = static_cast<int64_t>(args.kv_cache_memory_gib * 1073741824.0 /
                                  static_cast<double>(per_block));
  }
  if (blocks < 1)
    throw_error(ErrorKind::kResourceExhausted,
                "KV cache: " + std::to_string(args.kv_cache_memory_gib) +
                    " GiB holds no block of " + std::to_string(per_block) + " bytes");
  if (blocks > INT32_MAX / 2) blocks = INT32_MAX / 2;
  return static_cast<int>(blocks);
}

// --swap-space GiB as a count of host blocks of bytes_per_block bytes (vLLM's swap space: all
// layers' K and V of one block); 0 = swapping disabled.
int swap_block_count(double swap_space_gib, int64_t bytes_per_block) {
  if (!(swap_space_gib >= 0) || !std::isfinite(swap_space_gib))
    invalid_argument("--swap-space must be a non-negative number of GiB");
  const double blocks = std::floor(swap_space_gib * 1073741824.0 / double(bytes_per_block));
  return static_cast<int>(std::min(blocks, double(INT32_MAX / 2)));
}

// Refuses configs whose fp32 weights plus KV pool plus swap pool (of all ranks) cannot fit in this
// machine's memory, before allocating anything (a hostile or mistyped config.json must not make us
// swap or get OOM-killed).
void check_fits_in_memory(const io::ModelConfig& config, const std::vector<parallel::ShardSpec>& ranks,
                          int num_blocks, int num_swap_blocks, int block_size,
                          const std::string& source) {
  uint64_t weights = 0, per_block = 0;
  for (const parallel::ShardSpec& r : ranks) {
    weights += models::llama_weight_bytes(config, r);
    per_block += static_cast<uint64_t>(
        CpuRunner::kv_bytes_per_block(parallel::local_config(config, r), block_size));
  }
  const uint64_t kv = static_cast<uint64_t>(num_blocks) * per_block;
  const uint64_t swap = static_cast<uint64_t>(num_swap_blocks) * per_block;
  const uint64_t limit = physical_memory_bytes();
  if (weights > limit || kv > limit - weights || swap > limit - weights - kv)
    throw_error(ErrorKind::kResourceExhausted,
                source + ": fp32 weights (" + std::to_string(weights >> 20) +
                    " MiB) plus KV cache (" + std::to_string(kv >> 20) + " MiB) plus swap space (" +
                    std::to_string(swap >> 20) + " MiB) exceed this machine's memory (" +
                    std::to_string(limit >> 20) + " MiB)");
}

// Every rank of a tp x pp group, in world-rank order (pp_rank * tp + tp_rank).
std::vector<parallel::ShardSpec> all_ranks(int tp, int pp) {
  std::vector<parallel::ShardSpec> ranks;
  for (int p = 0; p < pp; ++p)
    for (int t = 0; t < tp; ++t) ranks.push_back({t, tp, p, pp});
  return ranks;
}

// The CPU runner: one model per rank (a single one without parallelism), each rank reading only
// its slices of the checkpoint.
std::unique_ptr<CpuRunner> build_cpu_runner(const EngineArgs& args, const io::ModelConfig& config,
                                            bool random, int num_blocks, int num_swap_blocks) {
  const std::vector<parallel::ShardSpec> ranks =
      all_ranks(args.tensor_parallel_size, args.pipeline_parallel_size);
  std::optional<io::WeightStore> store;
  if (!random) store.emplace(io::WeightStore::open(args.model));
  auto weights_of = [&](const parallel::ShardSpec& r) {
    return random ? models::random_llama_weights(config, args.seed, r)
                  : models::load_llama_weights(config, *store, r);
  };
  models::KvCacheQuant kv_quant;
  kv_quant.fp8 = quant::parse_kv_cache_dtype(args.kv_cache_dtype);
  kv_quant.calculate_scales = args.calculate_kv_scales;
  if (store) kv_quant.scales = quant::read_kv_scales(config, *store);
  const std::string kv_line = quant::describe_kv_cache(kv_quant.fp8, !kv_quant.scales.empty(),
                                                       kv_quant.calculate_scales);
  if (!kv_line.empty())
    log::info(kv_line + (kv_quant.fp8 ? "; the CPU stores the FP8-rounded values in fp32" : ""));
  if (ranks.size() == 1)
    return std::make_unique<CpuRunner>(
        std::make_unique<models::LlamaModel>(config, weights_of(ranks[0])), num_blocks,
        args.block_size, num_swap_blocks, kv_quant);
  // One world group (stage-to-stage sends) and, under it, one tensor-parallel group per stage.
  const auto world = parallel::ThreadGroup::create(int(ranks.size()));
  std::vector<std::shared_ptr<parallel::ThreadGroup>> stages;
  for (int p = 0; p < args.pipeline_parallel_size; ++p)
    stages.push_back(world->subgroup(args.tensor_parallel_size));
  std::vector<std::unique_ptr<models::LlamaModel>> models;
  for (size_t w = 0; w < ranks.size(); ++w) {
    const parallel::ShardSpec& r = ranks[w];
    models::ModelParallel par;
    par.shard = r;
    par.world = world->communicator(int(w));
    par.tp = stages[size_t(r.pp_rank)]->communicator(r.tp_rank);
    models.push_back(std::make_unique<models::LlamaModel>(config, weights_of(r), par));
  }
  return std::make_unique<CpuRunner>(std::move(models), world, num_blocks, args.block_size,
                                     num_swap_blocks, kv_quant, batches_in_flight(args));
}

// What the newer families do not run on yet: the mixture-of-experts models (Qwen3-MoE, Mixtral)
// with W8A8-INT8 experts (the expert layers do not quantize activations).
void check_family_support(const io::ModelConfig& config, const std::string& source) {
  if (config.is_moe() && config.quant.int_weights() && config.quant.int8_activations)
    unsupported(source + ": quantization (" + config.quant.describe() + ") of " +
                config.architecture +
                "'s expert weights is not supported yet (FP8 and "
                "weight-only INT4 / INT8 are)");
}

// longrope's factors follow the served context, as vLLM's do: the long ones when max_model_len
// exceeds the original context (parsing assumed max_model_len = max_position_embeddings).
void pick_longrope_factors(io::ModelConfig& config, const EngineArgs& args) {
  io::RopeScaling& s = config.rope_scaling;
  if (s.type != io::RopeScaling::Type::kLongRope || args.max_model_len <= 0) return;
  s.use_long = args.max_model_len > s.original_max_position_embeddings;
}

// The model without its runner: name, config, generation config, after checking the flags that
// do not depend on the backend.
LoadedModel describe_model(const EngineArgs& args, std::string* source) {
  if (args.device != "auto" && args.device != "cpu" && args.device != "cuda")
    invalid_argument("--device " + args.device + ": expected auto, cpu or cuda");
#ifndef PAGELLM_HAVE_CUDA
  if (args.device == "cuda")
    unsupported("--device cuda: this build has no CUDA backend (configure with -DPAGELLM_CUDA=ON)");
#endif
  LoadedModel m;
  if (args.model.empty()) {
    m.name = "demo";
    m.config = demo_model_config();
    m.generation_config.bos_token_id = m.config.bos_token_id;
    m.generation_config.eos_token_ids = m.config.eos_token_ids;
    *source = "demo model";
  } else {
    const std::filesystem::path dir(args.model);
    m.name = !args.model_id.empty()  ? args.model_id
             : dir.filename().empty() ? dir.parent_path().filename().string()
                                      : dir.filename().string();
    m.config = io::load_model_config(dir);
    m.generation_config = io::load_generation_config(dir);
    *source = (dir / "config.json").string();
  }
  m.config.quant = quant::resolve_quantization(m.config.quant, args.quantization, *source);
  check_family_support(m.config, *source);
  pick_longrope_factors(m.config, args);
  if (args.device == "cuda") quant::check_int_weights_on_gpu(m.config.quant, *source);
  if (args.load_format != "auto" && args.load_format != "safetensors" &&
      args.load_format != "dummy")
    invalid_argument("--load-format '" + args.load_format +
                     "' is not supported (auto, safetensors, dummy)");
  if (args.block_size < 1 || args.block_size > 1024)
    invalid_argument("--block-size must be in [1, 1024], got " + std::to_string(args.block_size));
  parallel::check_parallel_config(m.config, args.tensor_parallel_size,
                                  args.pipeline_parallel_size);
  m.config.hybrid_kv_cache = m.config.sliding_window > 0 && !args.disable_hybrid_kv_cache_manager &&
                             args.pipeline_parallel_size == 1 &&
                             args.speculative.method != "draft_model" &&
                             args.speculative.method != "eagle";
  return m;
}

// Multi-process groups run on GPUs only: the CPU backend's ranks are threads of one process.
void require_cuda_for(const parallel::LaunchPlan& plan, const EngineArgs& args) {
  if (plan.multi_process() && args.device != "cuda")
    unsupported("a multi-process group (" + plan.launcher +
                ") needs --device cuda; on the CPU, --tensor-parallel-size / "
                "--pipeline-parallel-size run as threads of one process");
}

}  // namespace

io::ModelConfig served_model_config(const EngineArgs& args) {
  std::string source;
  return describe_model(args, &source).config;
}

int batches_in_flight(const EngineArgs& args) {
  const int pp = args.pipeline_parallel_size;
  return args.max_batches_in_flight > 0 ? std::min(args.max_batches_in_flight, pp) : pp;
}

void check_data_parallel_devices(const EngineArgs& args) {
  if (args.device != "cuda" || args.data_parallel_size <= 1) return;
  const int needed =
      args.data_parallel_size * args.tensor_parallel_size * args.pipeline_parallel_size;
#ifdef PAGELLM_HAVE_CUDA
  const int visible = num_visible_gpus();
#else
  const int visible = 0;
  unsupported("--device cuda: this build has no CUDA backend (configure with -DPAGELLM_CUDA=ON)");
#endif
  if (needed > visible)
    invalid_argument("--data-parallel-size " + std::to_string(args.data_parallel_size) +
                     " x --tensor-parallel-size " + std::to_string(args.tensor_parallel_size) +
                     " x --pipeline-parallel-size " + std::to_string(args.pipeline_parallel_size) +
                     " needs " + std::to_string(needed) + " GPUs but " + std::to_string(visible) +
                     " are visible");
}

std::optional<int> run_worker_process(const EngineArgs& args) {
  const parallel::LaunchPlan plan = parallel::plan_launch(args);
  if (!plan.multi_process() || plan.leader()) return std::nullopt;
  require_cuda_for(plan, args);
  std::string source;
  const LoadedModel m = describe_model(args, &source);
#ifdef PAGELLM_HAVE_CUDA
  return run_cuda_worker(args, m, plan);
#else
  return 1;  // unreachable: require_cuda_for refused
#endif
}

LoadedModel load_model(const EngineArgs& args) {
  if (args.device == "auto" || args.max_num_batched_tokens == 0) {
    EngineArgs resolved = args;
    resolved.resolve_device();
    return load_model(resolved);
  }
  const auto start = std::chrono::steady_clock::now();
  std::string source;
  LoadedModel m = describe_model(args, &source);
  check_data_parallel_devices(args);
  const bool demo = args.model.empty();
  const parallel::LaunchPlan plan = parallel::plan_launch(args);
  require_cuda_for(plan, args);
#ifdef PAGELLM_HAVE_CUDA
  if (args.device == "cuda") return load_cuda_model(args, std::move(m), plan, start);
#endif
  if (!ThreadPool::configure_global(args.num_threads))
    log::warning("--num-threads " + std::to_string(args.num_threads) +
                 ": the CPU thread pool of this process already runs with " +
                 std::to_string(ThreadPool::global().num_threads()) + " threads; keeping them");
  const std::vector<parallel::ShardSpec> ranks =
      all_ranks(args.tensor_parallel_size, args.pipeline_parallel_size);
  int64_t per_block = 0;  // all ranks' KV bytes of one block
  for (const parallel::ShardSpec& r : ranks)
    per_block += CpuRunner::kv_bytes_per_block(parallel::local_config(m.config, r), args.block_size);
  const int num_blocks = kv_block_count(args, per_block);
  const int num_swap_blocks = swap_block_count(args.swap_space_gib, per_block);
  check_fits_in_memory(m.config, ranks, num_blocks, num_swap_blocks, args.block_size, source);
  m.runner = build_cpu_runner(args, m.config, demo || args.load_format == "dummy", num_blocks,
                              num_swap_blocks);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (demo)
    log::warning(
        "no --model given: using the built-in demo model (tiny Llama, byte-level tokenizer). Its "
        "weights are "
        "RANDOM, so its output is gibberish.");
  else if (args.load_format == "dummy")
    log::warning("--load-format dummy: weights of " + m.name + " are random (seed " +
                 std::to_string(args.seed) + ")");
  char line[320];
  std::snprintf(
      line, sizeof line,
      "loaded %s (%s, %.1f M params) in %.0f ms on %zu CPU rank(s) (tensor parallel %d x pipeline "
      "parallel %d); KV cache %d blocks x %d tokens (%.1f MiB)",
      m.name.c_str(), m.config.architecture.c_str(),
      static_cast<double>(models::llama_weight_bytes(m.config)) / 4e6, ms, ranks.size(),
      args.tensor_parallel_size, args.pipeline_parallel_size, num_blocks, args.block_size,
      static_cast<double>(num_blocks) * static_cast<double>(per_block) / 1048576.0);
  log::info(line);
  if (m.config.quant.quantized())
    log::info("quantization: " + m.config.quant.describe() + "; the CPU computes with the " +
              (m.config.quant.int_weights() ? "weights dequantized at load" : "dequantized weights") +
              " and activations in fp32");
  return m;
}

}  // namespace pagellm::runner
