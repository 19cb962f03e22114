// What one rank of a tensor- and pipeline-parallel group holds of a model. Megatron-style tensor
// parallelism: q/k/v and gate/up are split by output rows (column-parallel), o_proj and down_proj
// by input columns (row-parallel, one all-reduce each), the embedding and LM head by vocabulary
// rows. KV heads are split across ranks, or replicated when there are fewer KV heads than ranks.
// Pipeline parallelism gives each stage a contiguous run of layers.
#pragma once

#include <cstdint>

#include "io/hf_config.h"

namespace pagellm::parallel {

// A rank's coordinates: tensor-parallel rank inside its stage, and its pipeline stage.
struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  int pp_rank = 0;
  int pp_size = 1;
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp_size - 1; }
};

// The slices of the full model one rank holds.
struct ShardGeometry {
  int64_t q_head_begin = 0, num_q_heads = 0;    // attention heads [begin, begin + num)
  int64_t kv_head_begin = 0, num_kv_heads = 0;  // KV heads (replicated when KV heads < tp_size)
  int64_t inter_begin = 0, inter = 0;           // MLP intermediate columns
  int64_t moe_inter_begin = 0, moe_inter = 0;   // each expert's intermediate columns (MoE)
  int64_t vocab_begin = 0, vocab = 0;           // embedding / LM head rows this rank holds
  int64_t vocab_shard = 0;                      // ceil(vocab_size / tp_size): the padded shard
  int64_t layer_begin = 0, layer_end = 0;       // the stage's layers [begin, end)
  int64_t num_layers() const { return layer_end - layer_begin; }
};

// Throws pagellm::Error (kInvalidArgument) with a one-line message naming the config field when
// `config` cannot be split tp x pp ways: sizes < 1, attention heads or intermediate size not
// divisible by tp (each expert's too: experts are tensor-parallel inside), KV heads neither
// divisible by nor dividing tp, more stages than layers, or more ranks than vocabulary rows.
void check_parallel_config(const io::ModelConfig& config, int tp_size, int pp_size);

// The rank's slices; `spec` must have passed check_parallel_config.
ShardGeometry shard_geometry(const io::ModelConfig& config, const ShardSpec& spec);

// The config as one rank sees it: heads, KV heads, intermediate sizes (dense and per expert) and
// layer count of its shard; moe.dense_layer stays indexed by whole-model layer. Vocabulary, hidden
// size and head_dim are unchanged (the sampler sees full rows).
io::ModelConfig local_config(const io::ModelConfig& config, const ShardSpec& spec);

}  // namespace pagellm::parallel
