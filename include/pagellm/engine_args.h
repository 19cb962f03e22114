// Engine configuration, the flags shared by `pagellm generate`, `serve` and `bench`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

namespace pagellm {

// Pooling instead of generation (/v1/embeddings, LLM::embed; engines started with
// --runner pooling): the final-normed hidden state of the prompt's last token, or the mean over all
// its tokens.
enum class PoolingType { kNone, kLast, kMean };

// Speculative decoding (vLLM's --speculative-config JSON). Off while `method` is empty.
//   ngram:       prompt lookup in the request's own tokens; prompt_lookup_min/max bound the n-gram
//                length (vLLM's defaults: both 5 when neither is given, else the one given).
//   draft_model: `model` is a smaller model folder with the target's vocabulary and tokenizer.
// Speculation runs on the CPU and CUDA backends (one target replica: data-parallel size 1 with a
// draft model).
struct SpeculativeConfig {
  static constexpr int kMaxSpeculativeTokens = 16;
  std::string method;              // "" (off) | "ngram" | "draft_model"
  int num_speculative_tokens = 0;  // k: draft tokens per step, 1..kMaxSpeculativeTokens
  int prompt_lookup_min = 0;       // ngram: shortest n-gram matched (0 = default)
  int prompt_lookup_max = 0;       // ngram: longest n-gram matched (0 = default)
  std::string model;               // draft_model: the draft's folder
  // No drafts in a step where more sequences than this are decoding (vLLM's key): verifying
  // 1 + k tokens per sequence stops being nearly free once a step's tokens approach the GPU's
  // compute bound. 0: the default, max(1, kDraftTokenBudget / (1 + k)) sequences.
  int disable_by_batch_size = 0;
  static constexpr int kDraftTokenBudget = 256;
  int max_speculating_seqs() const {
    return disable_by_batch_size > 0 ? disable_by_batch_size
                                     : std::max(1, kDraftTokenBudget / (1 + num_speculative_tokens));
  }

  // Acceptance-adaptive k (pagellm's keys): a step drafts only as many tokens as the measured
  // acceptance pays for. With alpha a sequence's recent per-draft acceptance rate, draft j is
  // accepted with probability about alpha^j, and j drafts pay while alpha^j stays at or above
  // draft_token_cost, what one more draft costs against a target step (in (0, 1); 0: measured by
  // the engine, spec::DraftCostMeter, and until then the method's default, kNgramDraftCost for
  // ngram, kModelDraftCost for a draft model or head). A step's sequences all get the most any of
  // them wants, between 1 and num_speculative_tokens.
  bool adaptive = false;
  double draft_token_cost = 0;
  static constexpr double kNgramDraftCost = 0.05;
  static constexpr double kModelDraftCost = 0.2;
  double effective_draft_cost() const {
    return draft_token_cost > 0 ? draft_token_cost
                                : (method == "ngram" ? kNgramDraftCost : kModelDraftCost);
  }

  bool enabled() const { return !method.empty(); }
  // Parses vLLM's JSON ('{"method": "ngram", "num_speculative_tokens": 4, ...}'; a "model" without
  // "method" means draft_model, "model": "ngram" means ngram), fills the ngram defaults and
  // validates. Throws pagellm::Error (kInvalidArgument) with a one-line message naming the field.
  static SpeculativeConfig from_json(const std::string& json);
  // Throws pagellm::Error (kInvalidArgument) naming the bad field; fills nothing.
  void validate() const;
};

struct EngineArgs {
  // max_num_batched_tokens when resolve_device() finds it 0, except offline on a GPU.
  static constexpr int kDefaultBatchedTokens = 2048;
  std::string model;              // Hugging Face folder; empty = built-in demo model
  std::string tokenizer;          // defaults to model
  // Hugging Face Hub ids: `model` (and `tokenizer`) may be ORG/NAME, resolved from the local
  // Hugging Face cache or downloaded into it (src/io/hf_hub.h) at these revisions; download_dir
  // replaces the cache folder. model_id keeps the id after `model` became the snapshot folder.
  std::string revision;
  std::string tokenizer_revision;
  std::string download_dir;
  std::string model_id;
  // "generate" (default) or "pooling" (vLLM's --runner): a pooling engine takes only pooling
  // requests (embeddings), a generating one only generation requests.
  std::string runner = "generate";
  PoolingType default_pooling = PoolingType::kLast;  // --pooler-config pooling_type
  bool default_normalize = true;                     // --pooler-config normalize
  std::string load_format = "auto";  // "auto" (safetensors) or "dummy" (random weights)
  std::string dtype = "auto";     // compute/weight dtype on the device; the CPU computes in fp32
  // Weight quantization: "" = the checkpoint's quantization_config; "fp8" = FP8 weights (a 16-bit
  // checkpoint is quantized at load, per output channel); see src/quant/quant_config.h.
  std::string quantization;
  // KV cache element type: "auto" (the model dtype), "fp8" / "fp8_e4m3" or "fp8_e5m2" (per-layer
  // K and V scales from the checkpoint, else 1.0; see src/quant/kv_cache_quant.h).
  std::string kv_cache_dtype = "auto";
  // With an FP8 KV cache: take each layer's K/V scales from the first batch instead.
  bool calculate_kv_scales = false;
  uint64_t seed = 0;              // for dummy weights and unseeded sampling
  // "auto" (resolve_device: CUDA when this build has it and a GPU is visible, else the CPU),
  // "cpu" or "cuda".
  std::string device = "auto";
  int max_model_len = 0;          // 0 = from config.json
  int block_size = 16;            // tokens per KV block, 8..128
  int num_kv_blocks = 0;          // explicit KV pool size (CPU); 0 = from kv_cache_memory_gib
  double kv_cache_memory_gib = 1.0;  // CPU KV pool size when num_kv_blocks is 0
  double gpu_memory_utilization = 0.9;
  double swap_space_gib = 0.0;
  int max_num_seqs = 256;
  // Tokens per step; 0 = the default for the device and entry point, set by resolve_device():
  // vLLM's offline defaults on a GPU (16,384 on GPUs of 70+ GiB other than A100s, else 8,192),
  // 2,048 for `pagellm serve` (decodes keep their inter-token latency; vLLM's server takes 8,192
  // there) and on the CPU.
  int max_num_batched_tokens = 0;
  bool api_server = false;  // set by `pagellm serve`: the serving default above
  bool enable_prefix_caching = true;
  bool enable_chunked_prefill = true;
  // A model whose layers mix sliding-window and full attention keeps one block table per group of
  // layers (kv/kv_layout.h) so sliding layers free what their window has passed; true keeps every
  // layer's KV for the whole sequence (vLLM's --disable-hybrid-kv-cache-manager). The hybrid
  // layout is also off with pipeline parallelism and with a draft model.
  bool disable_hybrid_kv_cache_manager = false;
  // With chunked prefill: a prompt computes at most this many tokens per step (vLLM's
  // --long-prefill-token-threshold), so the decodes sharing the step are not held up by a long
  // prompt's chunk; 0 = only the step's token budget limits it.
  int long_prefill_token_threshold = 0;
  std::string scheduling_policy = "fcfs";  // or "priority"
  bool enforce_eager = false;
  // Tensor-parallel all-reduces at decode sizes use NCCL instead of the one-shot NVLink kernel
  // (vLLM's --disable-custom-all-reduce).
  bool disable_custom_all_reduce = false;
  bool log_stats = false;
  int num_threads = 0;            // CPU threads; 0 = all cores
  std::string chat_template;      // file overriding tokenizer_config.json's template
  int tensor_parallel_size = 1;    // ranks splitting each layer (Megatron-style)
  int pipeline_parallel_size = 1;  // stages of contiguous layers
  // Scheduled batches in the pipeline at once (vLLM's batch queue: stage 0 runs batch k+1 while
  // stage 1 runs batch k); 0 = pipeline_parallel_size, 1 = one batch at a time through all stages.
  // Capped at pipeline_parallel_size.
  int max_batches_in_flight = 0;
  // Engine replicas (vLLM's data parallelism), each with its own scheduler, KV cache and runner of
  // tensor_parallel_size x pipeline_parallel_size ranks; replica r uses GPUs
  // [r * tp * pp, (r + 1) * tp * pp). data_parallel_rank is the replica an engine is built as.
  int data_parallel_size = 1;
  int data_parallel_rank = 0;
  // Multi-process groups (CUDA): torchrun-style nodes with a TCP rendezvous at master_addr:port;
  // under mpirun the processes are taken from Open MPI's environment instead of nnodes/node_rank.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // default: $MASTER_ADDR, else 127.0.0.1
  int master_port = 0;      // default: $MASTER_PORT, else 29500
  SpeculativeConfig speculative;  // --speculative-config

  void validate() const;
  // Replaces Hub ids in `model` / `tokenizer` (ORG/NAME that is no local path) by their snapshot
  // folders in the Hugging Face cache, downloading what is missing (src/io/hf_hub.h); model_id
  // keeps the id. A no-op for local folders, so calling it twice is harmless.
  void resolve_hub_ids();
  // Replaces device "auto" by "cuda" (a CUDA build that sees a GPU) or "cpu", as vLLM picks the
  // platform it finds, then a max_num_batched_tokens of 0 by the default for that device.
  // Harmless to call twice.
  void resolve_device();
  // What every command does before it builds an engine: resolve_device, validate, then
  // resolve_hub_ids (so bad flags fail before any download).
  void resolve();
  // These args as replica `rank` of the data-parallel group is built from.
  EngineArgs for_replica(int rank) const;
};

}  // namespace pagellm
