// The CUDA model runner for the Llama family (Llama 1-3, Mistral, Qwen2, Qwen3): weights on the GPU
// in bf16 / f16 / f32, GEMMs through cuBLASLt, pagellm's own kernels for everything else, a paged
// KV pool sized by --gpu-memory-utilization after a maximum-size dummy step, and CUDA graphs for
// decode-only steps (captured per padded batch size unless --enforce-eager; eager decode pads the
// same way and uses the same KV split count, so both give identical tokens). Every row is sampled on
// the GPU (cuda::sample, the CPU sampler's pipeline and random stream); only the token, its logprob
// and the top-N come back to the host. Weights stream from the safetensors mmap through pinned
// buffers; --swap-space gives a pinned host pool for preemption by swapping.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"
#include "runner/model_runner.h"

namespace pagellm::runner {

struct CudaRunnerOptions {
  DType dtype = DType::kBF16;
  int block_size = 16;
  double gpu_memory_utilization = 0.9;
  int num_kv_blocks = 0;  // > 0: use exactly this many blocks instead of profiling
  // Room left on this GPU for a speculative draft model's runner, created after this one
  // (cuda_model_loader): its weights and activations, and per token of this runner's KV pool the
  // bytes of the draft's (the draft holds as many tokens). Profiling only.
  size_t draft_fixed_bytes = 0;
  size_t draft_kv_bytes_per_token = 0;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;  // 0 = config.max_position_embeddings
  bool enforce_eager = false;
  bool disable_custom_all_reduce = false;  // read by ParallelCudaRunner
  uint64_t seed = 0;  // dummy weights
  // Pinned host swap pool for preemption by swapping: floor(GiB / bytes of one block of all
  // layers' K and V in dtype) blocks; 0 = no swapping.
  double swap_space_gib = 0.0;
  // --kv-cache-dtype fp8 / fp8_e5m2 (bf16 / f16 models): the cache in kF8E4M3 / kF8E5M2 with
  // per-layer K/V scales from the checkpoint (else 1.0), or from the first batch of real tokens
  // (calculate_kv_scales). nullopt: the cache holds dtype.
  std::optional<DType> kv_cache_fp8;
  bool calculate_kv_scales = false;
  std::string model_name = "model";  // for error messages
  // Tensor / pipeline parallelism (see parallel/shard.h): this runner's rank and CUDA device, and
  // its communicators: `tp` joins the stage's tensor-parallel ranks, `world` all ranks (world rank
  // = pp_rank * tp_size + tp_rank) for stage-to-stage sends. Unused without parallelism.
  parallel::ShardSpec shard;
  int device = 0;
  parallel::Communicator* tp = nullptr;
  parallel::Communicator* world = nullptr;
  // An EAGLE head's runner (config.eagle): the target's config and checkpoint (null: its dummy
  // weights, from `seed`), for the embedding and LM head the head shares with it.
  std::optional<io::ModelConfig> shared_embed_config;
  const io::WeightStore* shared_embed_checkpoint = nullptr;
  // Every rank must hold the same number of KV (and swap) blocks, since one block table drives
  // them all: called by every rank in the same order with its own count, returns the minimum over
  // the ranks. Null without parallelism.
  std::function<int64_t(int64_t)> agree_min;
};

// What startup cost, for the startup log.
struct CudaStartupStats {
  double load_ms = 0, profile_ms = 0, graph_ms = 0;
  int64_t weight_bytes = 0, activation_bytes = 0, kv_bytes = 0;
  int64_t checkpoint_bytes = 0;  // read from the checkpoint (0 for dummy weights)
  int num_graphs = 0;
};

class CudaRunner : public ModelRunner {
 public:
  // checkpoint: the model's safetensors, validated against config (models/weight_plan.h) and
  // streamed from the mapping to the GPU, converted there to options.dtype; it need not outlive
  // the constructor. null = dummy weights made on the GPU with the CPU loader's random scheme.
  // Throws pagellm::Error when the checkpoint does not match the config, there is no usable GPU,
  // the weights do not fit in free GPU memory, or no KV block is left.
  CudaRunner(io::ModelConfig config, const io::WeightStore* checkpoint,
             const CudaRunnerOptions& options);
  ~CudaRunner() override;

  int num_kv_blocks() const override;
  int num_swap_blocks() const override;
  int block_size() const override;
  const io::ModelConfig& config() const override;
  // Every rank of a parallel group executes each step; only the leader (the last stage's first
  // tensor-parallel rank) samples and returns tokens, the others return an empty output.
  engine::ModelRunnerOutput execute(const engine::SchedulerOutput& batch) override;

  // The forward pass of execute() without sampling: per seq, the fp32 logits [vocab] of its last
  // scheduled token when needs_sample is set (empty otherwise).
  std::vector<std::vector<float>> execute_logits(const engine::SchedulerOutput& batch) override;

  // Greedy drafting with the answers kept on the GPU: every step's argmax feeds the next step's
  // input on the device, one synchronization per chain (decode steps replay their graphs).
  std::vector<std::vector<int32_t>> execute_greedy_chain(const engine::SchedulerOutput& batch,
                                                         std::span<const int> steps) override;

  // EAGLE speculation: the target returns every token's final-normed hidden state (one GPU); an
  // EAGLE head runs with the features given.
  void set_return_hidden() override;
  FeatureStep execute_features(const engine::SchedulerOutput& batch,
                               std::span<const float> features) override;
  std::vector<std::vector<int32_t>> execute_feature_chain(const engine::SchedulerOutput& batch,
                                                          std::span<const float> features,
                                                          std::span<const int> steps) override;

  // A sampled seq's drafts are verified on the host (the rows come back as logits).
  bool verifies_sampled_drafts() const override { return false; }

  const CudaStartupStats& startup_stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagellm::runner
