// Private state of the CUDA runner, shared by its translation units (setup and step execution).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda/kernels.h"
#include "common/error.h"
#include "kv/kv_layout.h"
#include "models/weight_plan.h"
#include "runner/cuda_runner.h"

namespace pagellm::runner {

inline void check(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so later calls report their own
  const ErrorKind kind =
      err == cudaErrorMemoryAllocation ? ErrorKind::kResourceExhausted : ErrorKind::kInternal;
  throw_error(kind, "cuda runner: " + what + ": " + cudaGetErrorString(err));
}

[[noreturn]] inline void internal(const std::string& message) {
  throw_error(ErrorKind::kInternal, "cuda runner: " + message);
}

inline double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Owning device allocation.
class DevMem {
 public:
  DevMem() = default;
  DevMem(size_t bytes, const std::string& what) : bytes_(bytes) {
    if (bytes > 0)
      check(cudaMalloc(&ptr_, bytes),
            "allocating " + what + " (" + std::to_string(bytes >> 20) + " MiB)");
  }
  DevMem(DevMem&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DevMem& operator=(DevMem&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DevMem() {
    if (ptr_) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// The scales of an FP8 linear layer, whose e4m3 weight is the LayerWeights member of the same name
// (gemm/fp8_gemm.h). Empty for a 16-bit layer.
struct Fp8Scales {
  DevMem scale;   // [n] per output row, or [ceil(n / 128), fp8_block_scale_stride(k)] per block
  int block = 0;  // 0 or cuda::kFp8Block
  bool on() const { return scale.get() != nullptr; }
};

// The group constants of an INT4 / INT8 linear layer, whose packed weight is the LayerWeights
// member of the same name (gemm/int_gemm.h, quant/int_gpu_layout.h). Empty for other layers.
struct IntScales {
  DevMem scale;  // [n, k / group_size] of the runner's dtype
  DevMem zero;   // [n, k / group_size] uint8, or empty (symmetric)
  DevMem perm;   // [k] int32 act-order column order, or empty
  int bits = 0, group_size = 0;
  // W8A8-INT8: the weight is int8 [n, k], `scale` fp32 [n] per output row, activations quantized
  // per token (gemm/int_gemm.h int8_linear).
  bool w8a8 = false;
  bool on() const { return bits != 0; }
};

struct LayerWeights {
  DevMem input_norm;  // [hidden]
  DevMem qkv;         // [(H + 2 Hkv) * D, hidden]
  DevMem qkv_bias;    // [(H + 2 Hkv) * D] or empty
  DevMem q_norm;      // [D] or empty
  DevMem k_norm;      // [D] or empty
  DevMem o_proj;      // [hidden, H * D]
  DevMem post_norm;   // [hidden]
  DevMem attn_out_norm, mlp_out_norm;  // Gemma: [hidden] each, else empty
  DevMem gate_up;     // [2 * inter, hidden]
  DevMem down;        // [hidden, inter]
  // Mixture-of-experts layers instead of gate_up / down (cuda/moe.h):
  DevMem router;           // [E, hidden]
  DevMem experts_gate_up;  // [E, 2 * moe_inter, hidden]
  DevMem experts_down;     // [E, hidden, moe_inter]
  Fp8Scales qkv_fp8, o_proj_fp8, gate_up_fp8, down_fp8;
  // FP8 experts (an FP8 checkpoint, or dummy weights under its config): experts_gate_up /
  // experts_down hold e4m3 codes, these a scale per row ([E * 2 * moe_inter], [E * hidden]).
  Fp8Scales experts_gate_up_fp8, experts_down_fp8;
  IntScales qkv_int, o_proj_int, gate_up_int, down_int;
};

// Rows per slice of the W8A8-INT8 GEMM (bounds its int32 scratch: 117 MB at 28,672 outputs).
constexpr size_t kInt8AccRows = 1024;

// Padded batch sizes that get a decode CUDA graph: 1, 2, 4, 8, then every 8 up to max_num_seqs.
inline std::vector<int> graph_batch_sizes(int max_num_seqs) {
  std::vector<int> sizes;
  for (int b : {1, 2, 4, 8})
    if (b <= max_num_seqs) sizes.push_back(b);
  for (int b = 16; b <= max_num_seqs; b += 8) sizes.push_back(b);
  if (sizes.empty() || sizes.back() != max_num_seqs) sizes.push_back(max_num_seqs);
  return sizes;
}

struct CudaRunner::Impl {
  io::ModelConfig config;  // the whole model's
  CudaRunnerOptions opt;
  parallel::ShardGeometry geo;  // this rank's slices (everything without parallelism)
  bool leader = true;  // samples and returns tokens: the last stage's first tensor-parallel rank
  DType dt = DType::kBF16;
  size_t esz = 2;
  int hidden = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, inter = 0, vocab = 0,
      num_layers = 0;
  int qkv_width = 0;
  int max_tokens = 0;  // activation rows: max(max_num_batched_tokens, max_num_seqs)
  int max_seqs = 0;    // max_num_seqs
  int max_blocks = 0;  // block-table columns: ceil(max_model_len / block_size)
  int num_sms = 0;
  cudaStream_t stream = nullptr;
  cuda::GemmContext* gemm = nullptr;
  CudaStartupStats stats;

  // Weights.
  DevMem embed, final_norm, lm_head,
      inv_freq;       // [vocab, hidden], [hidden], [vocab, hidden] or empty, [D/2]
  DevMem rope_cache;  // [max_model_len, D] cos | sin per position (cuda::rope_cos_sin_cache)
  float rope_scale = 1.f;  // longrope's attention factor, in rope_cache (1 otherwise)
  // Gemma 3's sliding layers: their own (unscaled) rotary base; empty otherwise.
  DevMem local_inv_freq, local_rope_cache;
  std::vector<LayerWeights> layers;
  // An EAGLE head (config.eagle): its fc [hidden, 2 * hidden] and bias (or empty); its input rows
  // [T, 2 * hidden] (embedding | feature) and the features uploaded for a step [T, hidden].
  DevMem eagle_fc, eagle_fc_bias, x_eagle_in, x_features;
  // The target of an EAGLE head (set_return_hidden): every step's final-normed rows go back.
  bool return_hidden = false;

  // FP8 linear layers: activation quantization scratch (gemm/fp8_gemm.h), sized for max_tokens
  // rows of the widest input; empty without FP8.
  DevMem fp8_xq, fp8_xscale;
  DevMem fp8_staging8, fp8_staging16;  // load-time only
  bool any_fp8 = false;
  // INT4 / INT8 layers: the weight dequantized for prefill-sized steps ([n, k] of the largest
  // layer) and act-order activations ([T, widest input]); empty when not needed.
  DevMem int_w_work, int_x_perm;
  // W8A8-INT8: quantized activations [T, widest input], their scales [T], int32 sums
  // [min(T, kInt8AccRows), widest output].
  DevMem int8_xq, int8_xscale, int8_acc;
  bool any_int = false, any_int_perm = false, any_w8a8 = false;
  int64_t widest_out = 0;
  int64_t int_largest = 0;  // elements of the largest INT layer

  // Activations, sized for max_tokens rows.
  DevMem x_hidden;          // [T, hidden] residual stream
  DevMem x_normed;          // [T, hidden]
  DevMem x_proj;            // [T, hidden]
  DevMem x_qkv;             // [T, qkv_width]
  DevMem x_attn;            // [T, H * D]
  DevMem x_gate_up;         // [T, 2 * inter]
  DevMem x_act;             // [T, inter]
  // Mixture of experts (config.is_moe()): experts, experts per token, each expert's intermediate
  // columns on this rank; the router logits, the routing and the per-slot activations (slot
  // t * top_k + j: token t's j-th expert).
  int moe_experts = 0, moe_top_k = 0, moe_inter = 0;
  DevMem x_router;          // [T, E]
  DevMem moe_ids;           // [T, top_k] int32
  DevMem moe_weights;       // [T, top_k] fp32
  DevMem x_moe_act;         // [T * top_k, moe_inter]
  DevMem x_moe_out;         // [T * top_k, hidden]
  // The grouped pass (moe_grouped: eager steps of many tokens), whose rows (R, at most
  // 3 * T * top_k + 32 * E)
  // hold the slots sorted by expert: their gate/up, the rows' tokens and the slots' rows on the
  // device, and a pinned staging area for both ways. x_moe_act and x_moe_out have R rows too.
  DevMem x_moe_gate_up;         // [R, 2 * moe_inter]
  DevMem moe_rows;              // int32: token_of_row [R], then row_of_slot [T * top_k]
  // FP8 experts: one projection of every expert dequantized ([E, 2 * moe_inter, hidden]), for the
  // host-sorted pass's GEMMs; empty otherwise, or when no step reaches kMoeHostMinTokens.
  DevMem moe_w16;
  // Tokens from which an eager step sorts on the host (H200, Qwen3-30B-A3B prefill in chunks of
  // 256 tokens: device 11.17 against host 8.11 requests/s; of 512: 13.55 against 13.92, a wash,
  // so the mixed steps of 512-1023 tokens, whose decode rows favour the device, stay there).
  static constexpr int kMoeHostMinTokens = 1024;
  // Whether PAGELLM_MOE_GROUPING (cuda_runner_forward.cpp) forces `mode`.
  static bool moe_grouping_forced(const char* mode);
  int32_t* moe_host = nullptr;  // pinned: the routing back [T * top_k], then moe_rows' contents
  DevMem x_rows;            // [max_seqs, hidden] normed rows that need logits
  DevMem x_logits;          // [max_seqs, vocab]
  DevMem x_logits_shard;    // [max_seqs, vocab_shard] this rank's LM-head columns (TP only)
  DevMem x_logits_gather;   // [tp_size, max_seqs, vocab_shard] all ranks' columns (TP only)
  DevMem attn_ws;           // split-KV partials
  DevMem attn_counters;     // split-KV merge counters (zero between steps)
  DevMem x_sample_work;     // [max_seqs, vocab] fp32 sampler scratch: penalized logits
  DevMem x_sample_weights;  // [max_seqs, vocab] fp32 sampler scratch: flags, then weights
  DevMem x_sample_out;      // [max_seqs] cuda::SampleOutput
  // Greedy chains (execute_greedy_chain): each step's answers [steps, seqs] int32, grown on
  // demand, and the event after a step's input upload (the pinned inputs are rewritten after it).
  DevMem chain_tokens;
  cudaEvent_t inputs_uploaded = nullptr;
  cuda::SampleOutput* sample_out_host = nullptr;  // pinned [max_seqs]
  // The sampler's flat id lists (bans, penalties, masks), grown on demand: pinned host + device
  // copy, uploaded on copy_stream while the forward pass runs (the sampler waits for ids_uploaded).
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t ids_uploaded = nullptr;
  DevMem sample_ids_dev;               // [sample_ids_capacity] int32
  int32_t* sample_ids_host = nullptr;  // pinned [sample_ids_capacity]
  size_t sample_ids_capacity = 0;

  // Step inputs: one pinned host block mirrored by one device block, uploaded with one copy.
  struct Layout {
    size_t token_ids, positions, slots, qsl, seq_lens, tables, split_items, tile_items, rows,
        sample_rows, total;  // sample_rows: [max_seqs] cuda::SampleRow
  } lay{};
  DevMem ints_dev;
  unsigned char* ints_host = nullptr;
  void* logits_host = nullptr;  // [max_seqs, vocab] of dtype

  // KV pool: [slots, 2, num_blocks, block_size, Hkv, D] of kv_dt (dt, or FP8); layer l in slot
  // kv_layout.layer_slot[l] through its group's block tables (kv/kv_layout.h).
  kv::KvLayout kv_layout;
  DType kv_dt = DType::kBF16;
  // FP8 cache: per local layer (k, v) scales on the device [num_layers, 2]; while
  // kv_scales_pending (--calculate-kv-scales), the next real step computes them first.
  DevMem kv_scales;
  bool kv_scales_pending = false;
  DevMem kv_pool;
  int num_blocks = 0;
  size_t block_bytes = 0;  // one block of one layer's K (or V)
  // Pinned host swap pool: [num_swap_blocks, slots, 2, block_size, Hkv, D] of dtype.
  unsigned char* swap_pool = nullptr;
  int num_swap_blocks = 0;

  // (padded batch size, tokens per seq) -> graph: decode steps (1 token per seq, captured at
  // startup) and speculative verification steps (1 + k tokens per seq, captured on first use).
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs;
  std::map<std::pair<int, int>, int> decode_splits;  // the same key -> its KV split count

  ~Impl() {
    for (auto& [b, g] : graphs) cudaGraphExecDestroy(g);
    if (inputs_uploaded) cudaEventDestroy(inputs_uploaded);
    if (ids_uploaded) cudaEventDestroy(ids_uploaded);
    if (copy_stream) cudaStreamDestroy(copy_stream);
    if (ints_host) cudaFreeHost(ints_host);
    if (logits_host) cudaFreeHost(logits_host);
    if (sample_out_host) cudaFreeHost(sample_out_host);
    if (sample_ids_host) cudaFreeHost(sample_ids_host);
    if (moe_host) cudaFreeHost(moe_host);
    if (swap_pool) cudaFreeHost(swap_pool);
    cuda::gemm_destroy(gemm);
    if (stream) cudaStreamDestroy(stream);
  }

  template <typename T>
  T* host(size_t off) {
    return reinterpret_cast<T*>(ints_host + off);
  }
  template <typename T>
  T* dev(size_t off) {
    return reinterpret_cast<T*>(ints_dev.as<unsigned char>() + off);
  }

  void init(const io::WeightStore* checkpoint);
  // Weights of the shared plan (models/weight_plan.h): streamed from the checkpoint, or dummy.
  void load_weights(const io::WeightStore* checkpoint);
  // Fills the weights of `plan` from `checkpoint` (null: dummy weights) in the runner's dtype.
  void load_plan(const std::vector<models::WeightTensorSpec>& plan,
                 const io::WeightStore* checkpoint);
  void load_rope_tables();
  void check_weights_fit(uint64_t weight_bytes);
  // FP8 layers (cuda_fp8_loader.cpp). Whether plan entry t runs in FP8 under config.quant.
  bool fp8_layer(const models::WeightTensorSpec& t, const io::WeightStore* checkpoint) const;
  // Device bytes of a plan's weights: 16-bit, or e4m3 + scales for FP8 layers.
  uint64_t plan_device_bytes(const std::vector<models::WeightTensorSpec>& plan,
                             const io::WeightStore* checkpoint) const;
  // Loads FP8 layer t into w (e4m3) and s: FP8 parts as stored (their scales per row, or 128x128
  // blocks when the rank's slice keeps whole blocks), everything else quantized per channel here.
  // True when `part` of t is an INT4 / INT8 weight of the checkpoint (dequantized at load).
  bool int_part(const models::WeightTensorSpec& t, const models::HfTensorSpec& part) const;
  void upload_dequantized_int(const io::WeightStore& checkpoint, const models::HfTensorSpec& part,
                              void* out);
  void load_fp8_layer(const models::WeightTensorSpec& t, const io::WeightStore* checkpoint,
                      class WeightUploader* uploader, DevMem& w, Fp8Scales& s);
  // INT layers (cuda_int_loader.cpp). Whether every part of plan entry t is an INT4 / INT8 weight
  // (of the checkpoint, or dummy under an INT config) that the runner's dtype can run packed.
  bool int_layer(const models::WeightTensorSpec& t, const io::WeightStore* checkpoint) const;
  // Loads INT layer t packed into w and s; false (nothing allocated, the reason logged once) when
  // the kernel cannot take its shape or group layout: the caller dequantizes it instead.
  bool load_int_layer(const models::WeightTensorSpec& t, const io::WeightStore* checkpoint,
                      DevMem& w, IntScales& s);
  IntScales& int_slot(const models::WeightTensorSpec& t);
  // W8A8-INT8 layer t: int8 weights and per-row scales (cuda_int_loader.cpp).
  void load_w8a8_layer(const models::WeightTensorSpec& t, const io::WeightStore* checkpoint,
                       DevMem& w, IntScales& s);
  Fp8Scales& fp8_slot(const models::WeightTensorSpec& t) {
    LayerWeights& l = layers.at(size_t(t.layer));
    switch (t.slot) {
      case models::WeightSlot::kQkv:
        return l.qkv_fp8;
      case models::WeightSlot::kOProj:
        return l.o_proj_fp8;
      case models::WeightSlot::kGateUp:
        return l.gate_up_fp8;
      case models::WeightSlot::kDown:
        return l.down_fp8;
      case models::WeightSlot::kExpertsGateUp:
        return l.experts_gate_up_fp8;
      case models::WeightSlot::kExpertsDown:
        return l.experts_down_fp8;
      default:
        internal(t.label + " is not an FP8 layer");
    }
  }
  void requantize_fp8_blocks(const models::HfTensorSpec& part, const io::WeightStore* checkpoint,
                             class WeightUploader* uploader, unsigned char* wout, float* sout);
  cudaError_t fill_dummy(const models::HfTensorSpec& part, void* out);
  void alloc_activations();
  void alloc_moe_buffers(size_t tokens);  // alloc_activations's parts
  void alloc_quant_scratch(size_t tokens);
  void alloc_step_inputs();
  // The FP8 cache's per-layer scales: the checkpoint's, 1.0, or pending (--calculate-kv-scales).
  void init_kv_scales(const io::WeightStore* checkpoint);
  void profile_and_alloc_kv();
  // Allocates the pinned swap pool of opt.swap_space_gib (after block_bytes is known).
  void alloc_swap_pool();
  void capture_graphs();
  // Captures the graph of b seqs of q tokens each (padding seqs: q tokens that write nothing and
  // read block 0), unless it exists or --enforce-eager; before the step's own inputs are staged.
  void capture_graph(int b, int q);

  // The shape every step of num_seqs seqs of q tokens each (q = 1: decode; q > 1: speculative
  // verification) runs with, graph or eager: the batch padded to the next graph size and the fixed
  // KV split count chosen for that shape at max_model_len. Sharing it makes --enforce-eager run the
  // graphs' kernels on the graphs' shapes (same cuBLASLt algorithm for the same m, same split-KV
  // partition), so both give identical tokens. padded_seqs 0: no such shape (q > 1 and the padded
  // batch's rows exceed max_num_seqs logits rows).
  struct DecodeShape {
    int padded_seqs = 0;
    int num_splits = 1;
  };
  DecodeShape decode_shape(int num_seqs, int q = 1);
  cuda::AttentionParams planning_params(int num_tokens, int num_seqs) const;

  // Host-side staging of one step; returns the attention plan (device pointers filled).
  struct Staged {
    int num_tokens = 0, num_seqs = 0;
    cuda::AttentionPlan plan;
  };
  // The step inputs of KV cache groups 1.. (kv_layout): per group, the tokens' slots and the seqs'
  // block tables, as long as group 0's. A group not given uses group 0's.
  struct MoreKvGroups {
    std::vector<std::vector<int64_t>> slots;
    std::vector<std::vector<const int32_t*>> tables;
  };
  Staged stage(const std::vector<int32_t>& token_ids, const std::vector<int32_t>& positions,
               const std::vector<int64_t>& slots, const std::vector<int32_t>& qsl,
               const std::vector<int32_t>& seq_lens, const std::vector<const int32_t*>& tables,
               const std::vector<int>& table_lens, int fixed_splits,
               const MoreKvGroups* more = nullptr);
  void upload_inputs();
  void forward(const Staged& s, void* k_pool);
  // Whether a forward pass of num_tokens launches its kernels with programmatic dependent launch.
  bool step_wants_pdl(int num_tokens) const;
  // The stage's input hidden states: the (vocab-parallel) embedding on the first stage, else the
  // residual stream and last projection received from the stage before.
  void stage_input(int num_tokens);
  // An EAGLE head's input: x_hidden = fc(concat(x_hidden, x_features)) (the embedding in x_hidden).
  void eagle_input(int num_tokens);
  // An EAGLE head's features of the batch's tokens into x_features, in the model dtype.
  void upload_features(const engine::SchedulerOutput& batch, std::span<const float> features);
  // The first num_rows rows of x_normed, as fp32 (synchronizes the stream).
  std::vector<float> download_normed(int first, int num_rows);
  // x_proj = the mixture-of-experts MLP of x_normed (this rank's share, before the all-reduce).
  void moe_mlp(const LayerWeights& w, int num_tokens);
  // The experts of a step of many tokens, grouped: the routing comes back to the host, the slots
  // are sorted by expert, and one GEMM per expert used reads its weights once. Leaves the slots'
  // outputs in x_moe_out at sorted rows; returns the device map slot -> row. Eager steps only.
  const int32_t* moe_grouped(const LayerWeights& w, int num_tokens);
  // The experts of any step (graph-capturable): the slots sorted by expert on the device, one
  // grouped kernel per projection that reads each expert in use once. Same outputs as moe_grouped.
  const int32_t* moe_device_grouped(const LayerWeights& w, int num_tokens);
  // Which of the three a step of num_tokens takes (cuda_runner_forward.cpp).
  enum class MoePath { kDevice, kHost, kPerSlot };
  // fp8: the layer's experts are FP8 (the host-sorted pass only with moe_w16 to dequantize into).
  MoePath moe_path(int num_tokens, bool fp8) const;
  double moe_launch_rows() const;
  // Sums x_proj's first num_tokens rows over the stage's tensor-parallel ranks (row-parallel
  // o_proj / down_proj); no-op without tensor parallelism.
  void all_reduce_proj(int num_tokens);
  void compute_logits(int row_offset_in_rows, int num_rows);
  // Gemma 2's final cap on the first num_rows rows of x_logits (no-op without one).
  void soft_cap_logits(int num_rows);
  // One rotary base's frequencies [head_dim / 2] uploaded, and their cos / sin cache (* scale).
  void make_rope_tables(const std::vector<float>& freqs, float scale, DevMem& freq_out,
                        DevMem& cache_out);
  // The pinned buffer of the sampler's id lists, grown to hold n ints (the previous step's upload
  // has completed: every step ends with a stream synchronize).
  std::span<int32_t> sample_ids_buffer(size_t n);
  // Uploads the buffer's first n ints on copy_stream; the stream's later work waits for them.
  void upload_sample_ids(size_t n);
  // Samples / scores rows [0, num_rows) of x_logits with the SampleRows at lay.sample_rows (already
  // on the device) and returns the outputs (synchronizes the stream).
  void sample_rows(int num_rows, cuda::SampleOutput* out);
  // Queues the sampler over rows [0, num_rows) of x_logits into x_sample_out (no synchronization).
  void launch_sampler(int num_rows);
};

}  // namespace pagellm::runner
