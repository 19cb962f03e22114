// The Llama family on the CPU backend: Llama (1-3), Mistral, Qwen2 (q/k/v bias), Qwen3 (per-head
// q/k RMSNorm), Phi-3 (fused projections in the checkpoint, longrope), the mixture-of-experts
// Qwen3-MoE and Mixtral, and Gemma 2 / 3 (io::GemmaConfig); sliding-window layers attend only
// their window. Weights are held in fp32 whatever the checkpoint
// dtype; q/k/v and gate/up projections are fused at load so each layer runs three matmuls (a
// dense MLP) and one attention.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backends/cpu/kernels.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "kv/kv_layout.h"
#include "parallel/communicator.h"
#include "parallel/shard.h"

namespace pagellm::models {

struct LlamaLayerWeights {
  std::vector<float> input_norm;  // [hidden]
  std::vector<float> qkv;       // [(num_heads + 2 * num_kv_heads) * head_dim, hidden]: q, k, v rows
  std::vector<float> qkv_bias;  // [(num_heads + 2 * num_kv_heads) * head_dim]; empty without bias
  std::vector<float> q_norm;    // [head_dim]; empty without qk norm
  std::vector<float> k_norm;    // [head_dim]; empty without qk norm
  std::vector<float> o_proj;    // [hidden, num_heads * head_dim]
  std::vector<float> post_norm;  // [hidden]: the MLP's input norm
  // Gemma: the attention's and the MLP's output norms ([hidden]; empty otherwise).
  std::vector<float> attn_out_norm, mlp_out_norm;
  std::vector<float> gate_up;    // [2 * intermediate, hidden]: gate rows, then up rows
  std::vector<float> down;       // [hidden, intermediate]
  // A mixture-of-experts layer instead of gate_up / down (E experts of intermediate I each):
  std::vector<float> router;           // [E, hidden]
  std::vector<float> experts_gate_up;  // [E, 2 * I, hidden]
  std::vector<float> experts_down;     // [E, hidden, I]
  // Projections that compute in FP8 (their weights FP8 in the checkpoint, or quantized online):
  // their inputs are quantized per token as the GPU's W8A8 GEMMs quantize them. A projection an
  // FP8 checkpoint left in 16 bits runs in 16 bits on both backends.
  bool qkv_fp8 = false, o_proj_fp8 = false, gate_up_fp8 = false, down_fp8 = false;
};

struct LlamaWeights {
  std::vector<float> embed;  // [vocab, hidden]
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  std::vector<float> lm_head;     // [vocab, hidden]; empty when tied to embed
  // An EAGLE head (io::ModelConfig::eagle): its input projection; embed and lm_head are the
  // target's (load_target_embeddings), final_norm stays empty.
  std::vector<float> eagle_fc;       // [hidden, 2 * hidden]
  std::vector<float> eagle_fc_bias;  // [hidden]; empty without
};

// Reads a rank's weights (all of them without parallelism) from a checkpoint, checking names and
// shapes of the whole checkpoint against the config. Throws pagellm::Error naming the file and
// tensor for a missing, unexpected or misshaped tensor.
LlamaWeights load_llama_weights(const io::ModelConfig& config, const io::WeightStore& store,
                                const parallel::ShardSpec& shard = {});

// Random weights from the config alone (--load-format dummy, the demo model), reproducible by seed;
// a rank's shard holds the same numbers as the corresponding slice of the whole model.
LlamaWeights random_llama_weights(const io::ModelConfig& config, uint64_t seed,
                                  const parallel::ShardSpec& shard = {});

// The embedding and LM head of `target` (the whole model's, unsharded): from its checkpoint, or
// with store == null the random weights random_llama_weights(target, seed) holds. An EAGLE head
// shares them (io::ModelConfig::eagle).
LlamaWeights load_target_embeddings(const io::ModelConfig& target, const io::WeightStore* store,
                                    uint64_t seed);

// Bytes the fp32 weights of one rank take (for refusing configs that cannot fit in memory).
uint64_t llama_weight_bytes(const io::ModelConfig& config, const parallel::ShardSpec& shard = {});

// --kv-cache-dtype fp8 on the CPU: the cache rounds what it stores to FP8 (cpu::KvLayerView).
struct KvCacheQuant {
  std::optional<DType> fp8;      // kF8E4M3 / kF8E5M2; nullopt: a plain fp32 cache
  std::vector<float> scales;     // the whole model's [num_hidden_layers][k, v]; empty: 1.0 each
  bool calculate_scales = false; // --calculate-kv-scales: each layer's from its first batch
};

// The paged KV cache of all layers: per slot K and V [num_blocks, block_size, num_kv_heads,
// head_dim], layer i using slot layout.layer_slot[i] with its group's blocks (kv/kv_layout.h; the
// classic layout: slot i, one group). Layer i of the pool is the model's layer layer_begin + i
// (pipeline stages).
class KvCache {
 public:
  // An empty layout (slots 0) is kv::KvLayout::uniform(num_layers).
  KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
          int64_t head_dim, const KvCacheQuant& quant = {}, int64_t layer_begin = 0,
          kv::KvLayout layout = {});
  cpu::KvLayerView layer(int64_t index);
  // The block tables and slots layer `index` reads (ForwardBatch::group_seqs / group_slots).
  int group(int64_t index) const { return layout_.layer_group[static_cast<size_t>(index)]; }
  const kv::KvLayout& layout() const { return layout_; }
  // Slot `slot`'s K and V without FP8 scales: block copies and swaps move every slot.
  cpu::KvLayerView slot(int64_t slot);
  // --calculate-kv-scales: whether layer `index` still waits for its first batch, and taking its
  // scales from that batch's K / V rows [num_tokens, row_stride] (num_kv_heads * head_dim used).
  bool scales_pending(int64_t index) const {
    return !pending_.empty() && pending_[static_cast<size_t>(index)] != 0;
  }
  void calculate_scales(int64_t index, const float* k, const float* v, int64_t row_stride,
                        int64_t num_tokens);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  // Copies every slot's K/V of block src into block dst (copy-on-write).
  void copy_block(int64_t src, int64_t dst);

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  int64_t num_blocks_, block_size_, num_kv_heads_, head_dim_;
  kv::KvLayout layout_;
  std::optional<Fp8Format> fp8_;
  std::vector<float> scales_;  // [num_layers_][k, v] (FP8 only)
  std::vector<char> pending_;  // [num_layers_]: scales still to calculate
  // Lazily zeroed (calloc) so an unused pool costs no resident memory.
  std::unique_ptr<float[], FreeDeleter>
      data_;  // [slots, 2, num_blocks, block_size, num_kv_heads, head_dim]
};

// One step's flattened input: all scheduled tokens of all sequences.
struct ForwardBatch {
  std::span<const int32_t> token_ids;     // [num_tokens]
  std::span<const int32_t> positions;     // [num_tokens]
  std::span<const int64_t> slot_mapping;  // [num_tokens]
  std::span<const cpu::AttentionSeq> seqs;
  // A cache with several KV groups (kv/kv_layout.h): groups 1.. in order, the same tokens' slots
  // and seqs through those groups' block tables. Group 0 is slot_mapping / seqs.
  std::vector<std::span<const int64_t>> more_slot_mappings = {};
  std::vector<std::span<const cpu::AttentionSeq>> more_seqs = {};
  // An EAGLE head's second input (io::ModelConfig::eagle): per token [num_tokens, hidden], the
  // target's final-normed hidden state at the position before the token's, or the head's own
  // output there.
  std::span<const float> features = {};

  std::span<const int64_t> group_slots(int group) const {
    return group == 0 ? slot_mapping : more_slot_mappings.at(static_cast<size_t>(group - 1));
  }
  std::span<const cpu::AttentionSeq> group_seqs(int group) const {
    return group == 0 ? seqs : more_seqs.at(static_cast<size_t>(group - 1));
  }
};

// A rank's place in a tensor- and pipeline-parallel group (see parallel/shard.h). `tp` sums the
// row-parallel outputs of the ranks of one stage; `world` carries hidden states between stages
// (world rank = pp_rank * tp_size + tp_rank). Both may be null without parallelism.
struct ModelParallel {
  parallel::ShardSpec shard;
  std::shared_ptr<parallel::Communicator> tp;
  std::shared_ptr<parallel::Communicator> world;
};

class LlamaModel {
 public:
  // `weights` hold the rank's shard (llama_weight_plan with par.shard); `config` is the full model's.
  LlamaModel(io::ModelConfig config, LlamaWeights weights, ModelParallel par = {});

  // The full model's config (vocabulary, head counts of the whole model).
  const io::ModelConfig& config() const { return config_; }
  // The rank's share: its heads, KV heads, intermediate size and stage layers.
  const io::ModelConfig& local_config() const { return local_; }
  const parallel::ShardSpec& shard() const { return par_.shard; }
  const parallel::ShardGeometry& geometry() const { return geo_; }

  // Runs the stage's layers over the batch, writing their K/V into the cache first (a later stage
  // first receives the hidden states from the stage before it; every rank of every stage calls
  // this with the same batch). Returns the stage's output hidden states before the final norm:
  // [num_tokens, hidden] (valid until the next call); a non-last stage has sent them on.
  std::span<const float> forward(const ForwardBatch& batch, KvCache& cache);

  // logits [rows.size(), vocab] of the given rows of forward()'s hidden states (final norm + LM
  // head). Last stage only; every tensor-parallel rank of it calls this (the vocabulary shards are
  // gathered), and each gets the full rows.
  void compute_logits(std::span<const float> hidden, std::span<const int64_t> rows, float* logits);
  // out [rows.size(), hidden_size]: the final-normed hidden states of the given rows (what pooling
  // returns). Last stage only.
  void final_norm_rows(std::span<const float> hidden, std::span<const int64_t> rows, float* out) const;

 private:
  void attention_block(int64_t layer, const ForwardBatch& batch, KvCache& cache);
  // hidden_ += proj_ (Gemma: normalised by `out_norm` first) for rows [0, n); then, unless
  // next_norm is null, normed_ = next_norm(hidden_).
  void add_residual(int64_t n, const std::vector<float>& out_norm, const float* next_norm);
  // Gemma 2's final cap: logits = cap * tanh(logits / cap) (no-op without one).
  void soft_cap_logits(float* logits, int64_t count) const;
  void mlp_block(int64_t layer, int64_t num_tokens);
  // proj_ = the mixture-of-experts MLP of normed_ (this rank's share of every expert, before the
  // all-reduce).
  void moe_mlp(int64_t layer, int64_t num_tokens);
  struct PackedLayer;
  void pack_experts(const LlamaLayerWeights& lw, PackedLayer& p) const;
  // The stage's input: the vocab-parallel embedding on the first stage (rows of ids outside the
  // rank's vocabulary shard are zero, then summed over ranks), else the previous stage's output.
  // An EAGLE head then projects concat(embedding, batch.features) with fc.
  void stage_input(const ForwardBatch& batch);
  // hidden_ = fc(concat(embedding, batch.features)) of every token (an EAGLE head's input).
  void eagle_input(const ForwardBatch& batch);
  // Rows [0, n) of x [.., cols] quantized per token to e4m3 and back for an FP8 projection (fp8).
  void quantize_activations(std::vector<float>& x, int64_t n, int64_t cols, bool fp8);
  // Sums a row-parallel projection over the stage's tensor-parallel ranks (no-op alone).
  void all_reduce(std::vector<float>& x, int64_t num_floats);

  // The projection matrices of one layer, packed for cpu::matmul (their unpacked copies in w_ are
  // released after packing).
  struct PackedLayer {
    cpu::PackedMatrix qkv, o_proj, gate_up, down;
    cpu::PackedMatrix router;                        // MoE layers only
    std::vector<cpu::PackedMatrix> experts_gate_up;  // [E]
    std::vector<cpu::PackedMatrix> experts_down;     // [E]
  };

  io::ModelConfig config_;  // the full model
  io::ModelConfig local_;   // this rank's share (parallel::local_config)
  parallel::ShardGeometry geo_;
  ModelParallel par_;
  LlamaWeights w_;
  std::vector<PackedLayer> packed_;  // [num_layers]
  cpu::PackedMatrix eagle_fc_;       // an EAGLE head's fc, packed [hidden, 2 * hidden]
  std::vector<float> eagle_in_;      // [num_tokens, 2 * hidden]: embedding | feature
  cpu::PackedMatrix lm_head_;  // packed [vocab shard rows, hidden] (the embedding when tied); last stage
  std::vector<float> shard_logits_;    // [num_rows, vocab_shard] this rank's vocabulary columns
  std::vector<float> gathered_logits_;  // [tp_size, num_rows, vocab_shard]
  std::vector<float> inv_freq_;  // [head_dim / 2]
  std::vector<float> rope_cos_;  // [num_tokens, head_dim / 2] for this step's positions
  std::vector<float> rope_sin_;  // [num_tokens, head_dim / 2]
  // Gemma 3's sliding layers rotate with their own base: the same three, empty otherwise.
  std::vector<float> local_inv_freq_, local_cos_, local_sin_;
  std::vector<float> logits_normed_;  // [num_rows, hidden]
  // Scratch reused across steps, sized for the largest batch seen.
  std::vector<float> hidden_;   // [num_tokens, hidden]: the residual stream
  std::vector<float> normed_;   // [num_tokens, hidden]
  std::vector<float> qkv_;      // [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim]
  std::vector<float> attn_;     // [num_tokens, num_heads * head_dim]
  std::vector<float> proj_;     // [num_tokens, hidden]
  std::vector<float> gate_up_;  // [num_tokens, 2 * intermediate]
  std::vector<float> act_;      // [num_tokens, intermediate]
  // MoE scratch: router logits [num_tokens, E]; each token's top-k experts and weights
  // [num_tokens, k]; one expert's gathered rows, their gate/up, activation and output.
  std::vector<float> router_logits_;
  std::vector<int32_t> topk_ids_;
  std::vector<float> topk_weights_;
  std::vector<float> expert_in_, expert_gate_up_, expert_act_, expert_out_;
  std::vector<int64_t> moe_begin_, moe_order_, moe_next_;  // the experts' counting sort
};

}  // namespace pagellm::models
