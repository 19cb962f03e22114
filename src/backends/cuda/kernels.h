// Host API of pagellm's CUDA kernels. Every kernel takes raw device pointers and one Params struct,
// runs on the given stream, and returns cudaSuccess, cudaErrorInvalidValue (bad shape or pointer),
// cudaErrorNotSupported (a dtype / shape this kernel has no path for) or the launch error. No
// launcher synchronizes or allocates, so all of them can be captured into CUDA graphs.
//
// Activations and weights share one element type per call (`dtype`: f32, f16 or bf16); arithmetic
// is fp32. Where Hugging Face rounds an intermediate to the model dtype (residual sums, the
// normalized row before the weight multiply, silu(gate) before the product), the kernels round at
// the same place so that bf16 results track transformers' as closely as possible.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/sample_rows.h"
#include "common/dtype.h"

namespace pagellm::cuda {

// ---- launch.cpp --------------------------------------------------------------------------------
// Whether the forward-pass kernels start as programmatic dependent launches (common.cuh), on GPUs
// that have them (sm_90+). By default per step: on inside a ProgrammaticLaunchScope that wants it
// (the CUDA runner asks for it on single-GPU decode steps, where it measured +1-4 %, except FP8
// steps on the tensor-core weight-only kernel, which lose 1.5 %; docs/PERF.md "late trigger"),
// off elsewhere.
// PAGELLM_PDL=1 / set_programmatic_launch(true) turn it on everywhere, PAGELLM_PDL=0 /
// set_programmatic_launch(false) off everywhere.
bool programmatic_launch();
void set_programmatic_launch(bool on);
// The calling thread's launches follow `wanted` while the scope lives (per-step mode only); a
// CUDA graph captured inside keeps the launch kind its kernels were captured with.
class ProgrammaticLaunchScope {
 public:
  explicit ProgrammaticLaunchScope(bool wanted);
  ~ProgrammaticLaunchScope();
  ProgrammaticLaunchScope(const ProgrammaticLaunchScope&) = delete;
  ProgrammaticLaunchScope& operator=(const ProgrammaticLaunchScope&) = delete;

 private:
  bool outer_;
};
// The current device's SM count (cached per device; 132 if the query fails), for grids sized to
// the GPU (persistent weight streams, k splits).
int sm_count();
// Whether the current device runs sm_90a code (compute capability 9.0 exactly: wgmma, TMA), asked
// once per device.
bool device_is_sm90();

// ---- embedding.cu ------------------------------------------------------------------------------
struct EmbeddingParams {
  DType dtype = DType::kBF16;
  const int32_t* token_ids = nullptr;  // [num_tokens]
  const void* table = nullptr;         // [vocab_size, hidden]
  void* out = nullptr;                 // [num_tokens, hidden]
  int num_tokens = 0;
  int hidden = 0;
  int vocab_size = 0;  // rows of table
  // Row of id is id - id_offset; ids whose row falls outside [0, vocab_size) produce a zero row
  // (a vocab-parallel shard; the engine validates ids against the whole vocabulary).
  int id_offset = 0;
  // != 1: each element times scale, rounded to dtype (Gemma's sqrt(hidden), given already
  // rounded to dtype as transformers rounds it).
  float scale = 1.f;
};
cudaError_t embedding(const EmbeddingParams& p, cudaStream_t stream);

// An FP8 (e4m3) copy of a kernel's output rows for the FP8 GEMM that reads them next: the dynamic
// activation quantization of fp8_linear (gemm/fp8_gemm.h: QuantizeFp8Params, Fp8LinearParams::
// x_quantized) done by the kernel that writes the activation (RMSNorm, SiLU-and-mul), with the
// same bytes and scales as quantize_fp8_per_token on its 16-bit output. q [rows, cols] codes
// (16-byte aligned); scale [rows], or with group 128 one per 128-column group, [cols / 128, rows]
// (cols a multiple of 128).
struct Fp8Out {
  void* q = nullptr;
  float* scale = nullptr;
  int group = 0;  // 0: one scale per row; 128: per 128-column group
  bool on() const { return q != nullptr; }
};

// ---- norm.cu -----------------------------------------------------------------------------------
// With `residual`: residual = x + residual (rounded to dtype), out = rmsnorm(residual) * weight.
// Without: out = rmsnorm(x) * weight. `out` may alias `x`. Also used per head (Qwen3 q/k norm) with
// num_rows = num_tokens * num_heads and hidden = head_dim. With fp8 on (contiguous rows, hidden a
// multiple of 16), the normed rows are also quantized into it, and `out` may be null (not written).
struct RmsNormParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;       // [num_rows, hidden]
  void* residual = nullptr;      // [num_rows, hidden] or null
  const void* weight = nullptr;  // [hidden]
  void* out = nullptr;           // [num_rows, hidden]
  int num_rows = 0;
  int hidden = 0;
  float eps = 1e-6f;
  // Rows in groups (per-head norms inside a fused qkv row): row r sits at element
  // (r / rows_per_group) * group_stride + (r % rows_per_group) * hidden of x, residual and out.
  // 0 = contiguous rows.
  int rows_per_group = 0;
  int64_t group_stride = 0;
  // With groups: rows from index second_rows_from of each group on take second_weight (Qwen3's q
  // and k heads, normed by one launch). Null: every row takes weight.
  const void* second_weight = nullptr;
  int second_rows_from = 0;
  Fp8Out fp8{};
  // Gemma's RMSNorm: out = x * inv * (1 + weight) in fp32, rounded once (no rounding of the
  // normalized row before the weight, and the weight offset by one).
  bool unit_offset = false;
};
cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream);

// ---- rope.cu -----------------------------------------------------------------------------------
// Rotate-half (GPT-NeoX / HF Llama) rotary embedding applied in place to q and k. The angle of pair
// i at position p is float(p) * inv_freq[i], one fp32 product like transformers' rotary module, so
// that long positions round the same way.
struct RopeParams {
  DType dtype = DType::kBF16;
  void* q = nullptr;                   // [num_tokens, num_heads, head_dim]
  void* k = nullptr;                   // [num_tokens, num_kv_heads, head_dim]
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [head_dim / 2], from cpu::rope_inv_freq()
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;            // even
  int64_t q_token_stride = 0;  // elements between tokens in q (0 = num_heads * head_dim)
  int64_t k_token_stride = 0;  // elements between tokens in k (0 = num_kv_heads * head_dim)
  // Optional table from rope_cos_sin_cache() ([cache_rows, head_dim] of dtype): positions below
  // cache_rows read their cos / sin from it instead of computing them (same values).
  const void* cos_sin = nullptr;
  int cache_rows = 0;
  // cos and sin are multiplied by this before rounding (longrope's attention factor; the table
  // must have been made with the same scale).
  float cos_sin_scale = 1.f;
};
cudaError_t rope(const RopeParams& p, cudaStream_t stream);

// The cos / sin table of positions [0, rows): row p holds cos(float(p) * inv_freq[i]) for
// i < head_dim / 2, then the sines, each rounded to dtype as rope() rounds them. vLLM keeps the
// same cache: accurate fp32 sines of large angles cost ~50 instructions each, which made rope() the
// slowest small kernel of a decode step.
// scale: cos and sin multiplied by it before rounding (RopeParams::cos_sin_scale).
cudaError_t rope_cos_sin_cache(DType dtype, const float* inv_freq, int head_dim, int rows,
                               void* out, cudaStream_t stream, float scale = 1.f);

// ---- activation.cu -----------------------------------------------------------------------------
// out = silu(gate) * up, where each input row is [gate | up] (the merged gate_up projection); with
// gelu_tanh, gelu_tanh(gate) * up (Gemma: transformers' gelu_pytorch_tanh), the same roundings.
struct SiluAndMulParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;  // [num_tokens, 2 * inner]
  void* out = nullptr;      // [num_tokens, inner]; may be null with fp8 on (not written)
  int num_tokens = 0;
  int inner = 0;
  bool gelu_tanh = false;
  // The down projection's FP8 input, quantized on the way out: the bytes and scales of
  // quantize_fp8_per_token on the 16-bit output. Only where silu_and_mul_fp8_valid; else
  // cudaErrorInvalidValue.
  Fp8Out fp8{};
};
cudaError_t silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream);
// Whether silu_and_mul can write p.fp8 (set): 16-bit rows, inner a multiple of 16 (of 128 with
// group scales; at most 80 K columns with a row scale), 16-byte aligned x, out and codes.
bool silu_and_mul_fp8_valid(const SiluAndMulParams& p);

// x = cap * tanh(x / cap) over `count` elements of dtype, in place (Gemma 2's final logit cap).
cudaError_t soft_cap(DType dtype, void* x, int64_t count, float cap, cudaStream_t stream);

// ---- kv_cache.cu -------------------------------------------------------------------------------
// Writes this step's K/V rows into the paged cache: token t goes to slot slot_mapping[t] (block =
// slot / block_size, offset = slot % block_size); a negative slot skips the token (padding).
// An FP8 cache (cache_dtype kF8E4M3 / kF8E5M2, --kv-cache-dtype fp8) stores each element as
// fp8(x / scale), rounded to nearest even and saturated (common/fp8.h's encoding), with the
// per-tensor scales *k_scale / *v_scale (device floats; null = 1).
struct KvCacheWriteParams {
  DType dtype = DType::kBF16;        // of key / value
  DType cache_dtype = DType::kBF16;  // dtype, kF8E4M3 or kF8E5M2
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const void* key = nullptr;              // [num_tokens, num_kv_heads, head_dim] (row stride below)
  const void* value = nullptr;            // [num_tokens, num_kv_heads, head_dim]
  void* k_cache = nullptr;                // [num_blocks, block_size, num_kv_heads, head_dim]
  void* v_cache = nullptr;                // [num_blocks, block_size, num_kv_heads, head_dim]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  int num_tokens = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t num_slots = 0;           // num_blocks * block_size; slots >= this are skipped
  int64_t key_token_stride = 0;    // elements between tokens in key (0 = num_kv_heads * head_dim)
  int64_t value_token_stride = 0;  // likewise for value
};
cudaError_t write_kv_cache(const KvCacheWriteParams& p, cudaStream_t stream);

// rope() and write_kv_cache() in one launch (one kernel fewer per layer of a decode step): kv.key
// must be rope.k with the same token stride, shapes and dtype; the cache receives the rotated k,
// bit for bit what rope() then write_kv_cache() store.
cudaError_t rope_and_write_kv_cache(const RopeParams& rope, const KvCacheWriteParams& kv,
                                    cudaStream_t stream);

// --calculate-kv-scales: *k_scale = 2 * max(amax(key rows), 1e-6) / fp8_max(cache_dtype) over the
// tokens with a valid slot (likewise *v_scale from value), so values up to twice the first batch's
// largest fit the FP8 range. Reads p's key / value / slot_mapping / strides; writes nothing else.
cudaError_t compute_kv_scales(const KvCacheWriteParams& p, float* k_scale, float* v_scale,
                              cudaStream_t stream);

// ---- attention/ --------------------------------------------------------------------------------
// Paged attention over a mixed batch. Sequence s owns query tokens [query_start_loc[s],
// query_start_loc[s+1]); its context after this step is seq_lens[s] tokens, whose K/V (the new ones
// included: write_kv_cache runs first) sit in the cache blocks block_tables[s]. Query i of s sits
// at position seq_lens[s] - q_len + i and attends causally to keys [0, position]. GQA: query head h
// reads kv head h / (num_heads / num_kv_heads).
// An FP8 cache (kv_dtype kF8E4M3 / kF8E5M2; bf16 / f16 models) holds fp8(x / scale) with the
// per-tensor scales *k_scale / *v_scale (device floats, null = 1), read back as code * scale.
struct AttentionParams {
  DType dtype = DType::kBF16;     // of q and out
  DType kv_dtype = DType::kBF16;  // of the cache: dtype, kF8E4M3 or kF8E5M2
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const void* q = nullptr;        // [num_tokens, num_heads, head_dim] (token stride q_token_stride)
  const void* k_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const void* v_cache = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  void* out = nullptr;            // [num_tokens, num_heads, head_dim], contiguous
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int num_seqs = 0;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  int max_blocks_per_seq = 0;
  // Slots in each cache (num_blocks * block_size): the bounds of the Hopper prefill kernel's TMA
  // loads. 0 (unknown) leaves prefill to the mma.sync tile kernel.
  int64_t num_slots = 0;
  int64_t q_token_stride = 0;  // 0 = num_heads * head_dim
  float scale = 0.f;           // softmax scale, usually 1/sqrt(head_dim)
  // > 0: a query at position p attends keys (p - window, p] only (sliding-window layers).
  int window = 0;
  // > 0: scores (after scale) become softcap * tanh(score / softcap) (Gemma 2).
  float softcap = 0.f;
};

// Host-side plan of one attention call (FlashInfer's plan/run split): which tokens go to the
// split-KV kernel, which query tiles go to the tensor-core tile kernel, and how many KV splits.
// Built from host copies of query_start_loc / seq_lens; the caller uploads the item lists (plain
// int32) and fills AttentionPlan's pointers, so run_attention itself is graph-capturable.
struct AttentionPlanHost {
  std::vector<int32_t> split_items;  // [num_split_items, 2]: (token, seq)
  std::vector<int32_t> tile_items;   // [num_tile_items, 2]: (seq, first query row of the tile)
  int tile_rows = 64;               // query rows per tile item: kAttentionTileRows or kSm90TileRows
  int num_splits = 1;               // KV splits per split item; each splits its own context evenly
  std::size_t workspace_bytes = 0;  // device scratch for split partials (0 when num_splits == 1)
  std::size_t split_counters = 0;   // u32 counters AttentionPlan::split_counters must hold
};

// Device view of a plan.
struct AttentionPlan {
  const int32_t* split_items = nullptr;  // device [num_split_items, 2]
  int num_split_items = 0;
  int num_splits = 1;
  const int32_t* tile_items = nullptr;  // device [num_tile_items, 2]
  int num_tile_items = 0;
  int tile_rows = 64;  // the host plan's tile_rows, which names the tile kernel
  // Device u32 counters of the split blocks' in-kernel merge, at least the plan's split_counters
  // (needed when num_splits > 1). Zero them once when allocated (cudaMemset): every call leaves
  // them at zero again. Calls sharing them run one after another (one stream). They live apart
  // from the workspace, whose layout changes with each call's shape.
  unsigned* split_counters = nullptr;
};

// Query rows per tile of the mma.sync tile kernel (any tensor-core GPU, FP8 caches included) and
// of the Hopper wgmma kernel (compute capability 9.0, 16-bit caches), which the planner prefers.
// Tile items are ordered longest first, so that the causal tail runs in the first wave.
constexpr int kAttentionTileRows = 64;
constexpr int kSm90TileRows = 128;

// Plans a call. query_start_loc_host [num_seqs + 1] and seq_lens_host [num_seqs] are host copies.
// fixed_num_splits > 0 forces that split count (CUDA graphs capture one count for every context);
// otherwise it is chosen to fill num_sms from the batch's longest split-path context.
cudaError_t plan_attention(const AttentionParams& p, const int32_t* query_start_loc_host,
                           const int32_t* seq_lens_host, int num_sms, int fixed_num_splits,
                           AttentionPlanHost* out);

// Runs the planned call. workspace: at least workspace_bytes of device memory (may be null when 0).
cudaError_t run_attention(const AttentionParams& p, const AttentionPlan& plan, void* workspace,
                          cudaStream_t stream);

// ---- sampler.cu --------------------------------------------------------------------------------
// The CPU sampler's pipeline (engine/sampler.cpp, see its header comment) for every row on the GPU:
// raw logprobs + top-N, bans and penalties, greedy or temperature / top-k / top-p / min-p and the
// two-level inverse-CDF draw in token-id order with the row's uniform u. Weights are
// (float)exp((double)((x - max) / T)) on both backends, block masses and the draw use the CPU's
// summation order, and top-p sums in the CPU's order whenever its candidate prefix has at most
// kSampleSortMax tokens, so the GPU draws the CPU's token (see sampler.cu for the rare exceptions).
// The model-dtype logits are left untouched; `work` and `weights` are fp32 scratch.
constexpr int kSampleSortMax = 2048;
struct SampleParams {
  DType dtype = DType::kBF16;
  const void* logits = nullptr;  // [num_rows, vocab]
  int num_rows = 0;
  int vocab = 0;
  const SampleRow* rows = nullptr;  // [num_rows]
  const int32_t* ids = nullptr;     // flat id lists indexed by SampleRow::ids_begin (may be null)
  float* work = nullptr;            // [num_rows, vocab] scratch: cleaned, penalized logits
  float* weights = nullptr;         // [num_rows, vocab] scratch: flags, then weights
  SampleOutput* out = nullptr;      // [num_rows]
  // Optional: the rows as the host packed them (what `rows` holds on the device). With them, the
  // plain greedy rows of a large vocabulary are reduced by several blocks each
  // (sampler_greedy.cuh).
  const SampleRow* host_rows = nullptr;
};
cudaError_t sample(const SampleParams& p, cudaStream_t stream);

// ---- fill.cu -----------------------------------------------------------------------------------
// Dummy weights (--load-format dummy) generated on the device with the CPU loader's counter-based
// scheme (models/llama_weights.cpp): out[i] = (2u - 1) * bound with u = (splitmix64(key + i) >> 11)
// * 2^-53, so CPU and GPU runners build the same random model up to dtype rounding. out is dense
// [rows, cols]; its element (r, c) is element r * row_stride + c of the generator's stream (a
// tensor-parallel column slice of a wider matrix: key already advanced to the slice's first
// column; a whole tensor: rows = 1).
cudaError_t fill_uniform(DType dtype, void* out, int64_t rows, int64_t cols, int64_t row_stride,
                         uint64_t key, double bound, cudaStream_t stream);
cudaError_t fill_constant(DType dtype, void* out, int64_t count, float value, cudaStream_t stream);

// ---- convert.cu --------------------------------------------------------------------------------
// dst[i] = src[i] converted from src_dtype to dst_dtype (weights of a checkpoint whose dtype is not
// the runner's), bit for bit like common/dtype.h on the host: f16/bf16 -> f32 exact, f32 ->
// f16/bf16 rounded to nearest even (NaN stays NaN with the host's bits), f16 <-> bf16 through f32,
// equal dtypes copied unchanged. src and dst must be aligned to their element sizes.
cudaError_t convert_dtype(DType src_dtype, const void* src, DType dst_dtype, void* dst,
                          int64_t count, cudaStream_t stream);

// Decode tokens of GQA models (bf16 / f16, head_dim 64 or 128) use tensor cores unless this turns
// them off (process-wide; for benchmarks and tests of the CUDA-core path).
void attention_set_decode_tensor_cores(bool enabled);
// The MMA layout of the tensor-core decode kernel for groups of up to 8 query heads per KV head:
// kAuto picks the faster one measured for the cache dtype (docs/PERF.md); the others force one
// (process-wide; tests and benchmarks run both). PAGELLM_DECODE_MMA_LAYOUT=heads / keys at start
// does the same.
enum class DecodeMmaLayout { kAuto, kHeadRows, kKeyRows };
void attention_set_decode_mma_layout(DecodeMmaLayout layout);
// Prefill tiles on compute capability 9.0 use the wgmma kernel (kSm90TileRows rows per tile)
// unless this (or PAGELLM_PREFILL_WGMMA=0 at start) turns it off: process-wide, read when a call is
// planned; for tests and benchmarks of the mma.sync kernel.
void attention_set_prefill_wgmma(bool enabled);

// ---- gemm.cpp (cuBLASLt) -----------------------------------------------------------------------
// y = x · wᵀ (+ y when accumulate), the layout of a Hugging Face Linear: x [m, k], w [n, k], y [m,
// n], all row-major and of one dtype; fp32 accumulation (no TF32 for fp32 inputs, so fp32 runs stay
// exact).
class GemmContext;
GemmContext* gemm_create(std::size_t workspace_bytes, cudaError_t* error);
void gemm_destroy(GemmContext* ctx);
struct GemmParams {
  DType dtype = DType::kBF16;
  const void* x = nullptr;  // [m, k]
  const void* w = nullptr;  // [n, k]
  void* y = nullptr;        // [m, n]
  int m = 0;
  int n = 0;
  int k = 0;
  bool accumulate = false;     // y += x · wᵀ (residual fused into the GEMM)
  const void* bias = nullptr;  // [n] added to every row (cuBLASLt epilogue), or null
  // batch > 1: `batch` independent GEMMs of these shapes, the b-th at x + b * stride_x,
  // w + b * stride_w, y + b * stride_y (elements; cuBLASLt strided batch, no bias).
  int batch = 1;
  int64_t stride_x = 0, stride_w = 0, stride_y = 0;
};
// m <= 8 goes to pagellm's own skinny kernel (weight-bandwidth bound decode) unless disabled here.
cudaError_t gemm(GemmContext* ctx, const GemmParams& p, cudaStream_t stream);
// The gated MLP's gate/up projection fused with SiLU-and-mul where the skinny kernel takes the
// shape: w = [gate; up] (p.n = 2 x inner), y [m, inner] = silu_and_mul(x · wᵀ), the same bits as
// gemm() then silu_and_mul(). cudaErrorNotSupported otherwise (the caller runs the two).
cudaError_t gemm_silu_and_mul(GemmContext* ctx, const GemmParams& p, cudaStream_t stream);
void gemm_set_use_gemv(GemmContext* ctx, bool use);

}  // namespace pagellm::cuda
