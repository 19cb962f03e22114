#include "cli/engine_flags.h"

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/hf_config.h"

namespace pagellm::cli {

namespace {

// --pooler-config JSON: pooling_type LAST | MEAN (vLLM's names), normalize.
void parse_pooler_config(const std::string& text, EngineArgs& args) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) invalid_argument("--pooler-config: expected a JSON object, got '" + text + "'");
  for (const auto& [key, value] : j.items()) {
    if (key == "pooling_type" && value.is_string() && (value == "LAST" || value == "MEAN")) {
      args.default_pooling = value == "LAST" ? PoolingType::kLast : PoolingType::kMean;
    } else if (key == "normalize" && value.is_boolean()) {
      args.default_normalize = value.get<bool>();
    } else {
      invalid_argument("--pooler-config: '" + key + "' must be pooling_type (\"LAST\" or \"MEAN\") "
                       "or normalize (true / false)");
    }
  }
}

// What to load and how: the model, tokenizer, formats, dtypes and device.
void add_model_flags(CLI::App& app, EngineArgs& args) {
  app.add_option("--model", args.model,
                 "Hugging Face model folder or Hub id ORG/NAME (default: the built-in demo model)");
  app.add_option("--runner", args.runner,
                 "generate | pooling (embeddings: /v1/embeddings; vLLM's --runner)")
      ->check(CLI::IsMember({"generate", "pooling", "auto"}));
  app.add_option_function<std::string>(
      "--task", [&args](const std::string& t) { args.runner = t == "embed" ? "pooling" : t; },
      "vLLM's older name: embed (= --runner pooling) | generate")
      ->check(CLI::IsMember({"generate", "embed", "auto"}));
  app.add_option_function<std::string>(
      "--pooler-config,--override-pooler-config",
      [&args](const std::string& text) { parse_pooler_config(text, args); },
      "pooling: '{\"pooling_type\": \"LAST\" | \"MEAN\", \"normalize\": true}'");
  app.add_option_function<std::string>(
      "--speculative-config",
      [&args](const std::string& text) { args.speculative = SpeculativeConfig::from_json(text); },
      "speculative decoding: '{\"method\": \"ngram\" | \"draft_model\", "
      "\"num_speculative_tokens\": K, \"prompt_lookup_min\": N, \"prompt_lookup_max\": N, "
      "\"model\": DRAFT_DIR}'");
  app.add_option("--revision", args.revision, "Hub id: branch, tag or commit (default: main)");
  app.add_option("--tokenizer-revision", args.tokenizer_revision, "Hub id of --tokenizer: revision");
  app.add_option("--download-dir", args.download_dir,
                 "Hub ids: the cache folder (default: $HF_HUB_CACHE or ~/.cache/huggingface/hub)");
  app.add_option("--tokenizer", args.tokenizer, "tokenizer folder (default: the model folder)");
  app.add_option("--load-format", args.load_format, "auto | safetensors | dummy (random weights)")
      ->capture_default_str();
  app.add_option("--dtype", args.dtype, "auto | float32 | float16 | bfloat16")->capture_default_str();
  app.add_option("--kv-cache-dtype", args.kv_cache_dtype,
                 "KV cache dtype: auto (the model's) | fp8 (= fp8_e4m3) | fp8_e5m2 (half the bytes "
                 "per token: twice the tokens in the same memory)")
      ->capture_default_str();
  app.add_flag("--calculate-kv-scales", args.calculate_kv_scales,
               "FP8 KV cache: take each layer's K/V scales from the first batch (default: the "
               "checkpoint's, else 1.0)");
  app.add_option("--quantization,-q", args.quantization,
                 "weight quantization: fp8 (FP8 checkpoints load without it; on a 16-bit "
                 "checkpoint it quantizes the linear layers at load). Default: the checkpoint's");
  app.add_option("--seed", args.seed, "random seed (dummy weights, unseeded sampling)")->capture_default_str();
  app.add_option("--device", args.device,
                 "auto (CUDA when this build has it and a GPU is visible, else the CPU) | cpu | cuda")
      ->capture_default_str();
}

// The KV cache, the scheduler's limits and the runner's execution options.
void add_cache_and_scheduler_flags(CLI::App& app, EngineArgs& args) {
  app.add_option("--max-model-len", args.max_model_len, "context length (0 = from config.json)")
      ->capture_default_str();
  app.add_option("--block-size", args.block_size, "tokens per KV block (8..128)")->capture_default_str();
  app.add_option("--num-kv-blocks", args.num_kv_blocks,
                 "KV blocks (0 = from --kv-cache-memory on the CPU, from "
                 "--gpu-memory-utilization on CUDA)")
      ->capture_default_str();
  app.add_option("--kv-cache-memory", args.kv_cache_memory_gib, "CPU KV cache size in GiB")
      ->capture_default_str();
  app.add_option("--gpu-memory-utilization", args.gpu_memory_utilization, "fraction of GPU memory to use")
      ->capture_default_str();
  app.add_option("--swap-space", args.swap_space_gib, "host swap space for preempted sequences, GiB")
      ->capture_default_str();
  app.add_option("--max-num-seqs", args.max_num_seqs, "most sequences per step")->capture_default_str();
  app.add_option("--max-num-batched-tokens", args.max_num_batched_tokens,
                 "token budget per step (0 = the default: offline on a GPU vLLM's, 16384 on GPUs "
                 "of 70+ GiB other than A100s, else 8192; 2048 for serve and on the CPU)")
      ->capture_default_str();
  app.add_option("--long-prefill-token-threshold", args.long_prefill_token_threshold,
                 "with chunked prefill, most tokens a prompt computes per step (0 = no limit but "
                 "the token budget): smaller chunks keep decodes' inter-token latency even")
      ->capture_default_str();
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", args.enable_prefix_caching,
               "automatic prefix caching (default on)");
  app.add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", args.enable_chunked_prefill,
               "split long prompts over steps (default on)");
  app.add_flag("--disable-hybrid-kv-cache-manager", args.disable_hybrid_kv_cache_manager,
               "sliding-window layers keep the KV of the whole sequence instead of freeing what "
               "their window has passed");
  app.add_option("--scheduling-policy", args.scheduling_policy, "fcfs | priority")->capture_default_str();
  app.add_flag("--enforce-eager", args.enforce_eager, "disable CUDA graphs");
  app.add_flag("--disable-custom-all-reduce", args.disable_custom_all_reduce,
               "tensor parallelism in one process: NCCL for every all-reduce instead of the one-shot "
               "NVLink kernel at decode sizes");
  app.add_flag("--log-stats", args.log_stats, "log throughput and queue stats every 5 seconds");
  app.add_option("--num-threads", args.num_threads, "CPU threads (0 = all cores)")->capture_default_str();
  app.add_option("--chat-template", args.chat_template, "chat template file overriding the tokenizer's");
}

// Tensor, pipeline and data parallelism, on one node or several.
void add_parallel_flags(CLI::App& app, EngineArgs& args) {
  app.add_option("--tensor-parallel-size", args.tensor_parallel_size,
                 "ranks (GPUs, or CPU threads) splitting each layer")
      ->capture_default_str();
  app.add_option("--pipeline-parallel-size", args.pipeline_parallel_size,
                 "pipeline stages of contiguous layers")
      ->capture_default_str();
  app.add_option("--max-batches-in-flight", args.max_batches_in_flight,
                 "pipeline parallelism: scheduled batches in the pipeline at once (0 = one per "
                 "stage, 1 = one batch at a time through all stages)")
      ->capture_default_str();
  app.add_option("--data-parallel-size", args.data_parallel_size,
                 "engine replicas behind one server, each of tensor x pipeline parallel ranks "
                 "(replica r on GPUs [r*tp*pp, (r+1)*tp*pp))")
      ->capture_default_str();
  app.add_option("--nnodes", args.nnodes, "processes (nodes) of a multi-node group, each with its GPUs")
      ->capture_default_str();
  app.add_option("--node-rank", args.node_rank, "this process's index in the group (0 serves)")
      ->capture_default_str();
  app.add_option("--master-addr", args.master_addr,
                 "address of node 0 for the rendezvous (default $MASTER_ADDR or 127.0.0.1)");
  app.add_option("--master-port", args.master_port,
                 "rendezvous port on node 0 (default $MASTER_PORT or 29500)");
}

}  // namespace

void add_engine_flags(CLI::App& app, EngineArgs& args) {
  add_model_flags(app, args);
  add_cache_and_scheduler_flags(app, args);
  add_parallel_flags(app, args);
}

SamplingParams default_sampling_params(const EngineArgs& args) {
  if (args.model.empty()) return SamplingParams{};
  return default_sampling_params(io::load_generation_config(args.model));
}

SamplingParams default_sampling_params(const io::GenerationConfig& g) {
  SamplingParams p;
  if (g.temperature) p.temperature = static_cast<float>(*g.temperature);
  if (g.top_p) p.top_p = static_cast<float>(*g.top_p);
  if (g.top_k) p.top_k = static_cast<int>(*g.top_k);
  if (g.min_p) p.min_p = static_cast<float>(*g.min_p);
  if (g.repetition_penalty) p.repetition_penalty = static_cast<float>(*g.repetition_penalty);
  if (g.max_new_tokens) p.max_tokens = static_cast<int>(*g.max_new_tokens);
  return p;
}

}  // namespace pagellm::cli
