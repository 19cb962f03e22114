#include "runner/cuda_runner.h"
#include "runner/cuda_runner_impl.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "backends/cpu/rope_frequencies.h"
#include "backends/cuda/gemm/fp8_gemm.h"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/moe.h"
#include "common/error.h"
#include "common/logging.h"
#include "common/phase_times.h"
#include "engine/sampler.h"
#include "quant/fp8_weights.h"
#include "quant/int_weights.h"
#include "quant/kv_cache_quant.h"
#include "runner/cuda_weight_loader.h"

namespace pagellm::runner {

// ---- setup -----------------------------------------------------------------------------------

void CudaRunner::Impl::init(const io::WeightStore* checkpoint) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0)
    throw_error(ErrorKind::kUnsupported, "--device cuda: no CUDA GPU is visible");
  if (opt.device < 0 || opt.device >= device_count)
    throw_error(ErrorKind::kInvalidArgument, "cuda runner: GPU " + std::to_string(opt.device) +
                                                 " asked for but only " +
                                                 std::to_string(device_count) + " are visible");
  check(cudaSetDevice(opt.device), "selecting GPU " + std::to_string(opt.device));
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, opt.device), "reading device properties");
  if (prop.major < 8)
    unsupported(std::string("--device cuda: ") + prop.name + " is sm_" +
                std::to_string(prop.major * 10 + prop.minor) +
                "; pagellm's kernels need sm_80 or newer");
  num_sms = prop.multiProcessorCount;
  geo = parallel::shard_geometry(config, opt.shard);
  leader = opt.shard.tp_rank == 0 && opt.shard.last_stage();
  const io::ModelConfig c = parallel::local_config(config, opt.shard);
  hidden = int(c.hidden_size), num_heads = int(c.num_attention_heads),
  num_kv_heads = int(c.num_key_value_heads);
  head_dim = int(c.head_dim), inter = int(c.intermediate_size), vocab = int(c.vocab_size),
  num_layers = int(c.num_hidden_layers);
  kv_layout = kv::kv_layout_of(c);
  qkv_width = (num_heads + 2 * num_kv_heads) * head_dim;
  if (c.is_moe()) {
    moe_experts = int(c.moe.num_experts), moe_top_k = int(c.moe.top_k);
    moe_inter = int(c.moe.intermediate_size);
    if (moe_experts > cuda::kMoeMaxExperts || moe_top_k > cuda::kMoeMaxTopK)
      unsupported(opt.model_name + ": the GPU's routing takes at most " +
                  std::to_string(cuda::kMoeMaxExperts) + " experts (num_experts) and top-" +
                  std::to_string(cuda::kMoeMaxTopK) + " (num_experts_per_tok)");
  }
  dt = opt.dtype;
  esz = dtype_size(dt);
  kv_dt = opt.kv_cache_fp8.value_or(dt);
  if (opt.kv_cache_fp8 && !is_fp8(*opt.kv_cache_fp8))
    internal("cuda runner: kv_cache_fp8 must be an FP8 dtype");
  if (opt.kv_cache_fp8 && dt == DType::kF32)
    unsupported(
        "--kv-cache-dtype fp8 with --dtype float32: the CUDA FP8 KV cache serves bfloat16 "
        "and float16 models");
  if (opt.block_size < 1 || opt.max_num_seqs < 1 || opt.max_num_batched_tokens < 1)
    invalid_argument(
        "cuda runner: block size, max_num_seqs and max_num_batched_tokens must be positive");
  const int max_len = opt.max_model_len > 0 ? opt.max_model_len : int(c.max_position_embeddings);
  if (max_len < 1) invalid_argument("cuda runner: max model length must be positive");
  opt.max_model_len = max_len;
  max_seqs = opt.max_num_seqs;
  max_tokens = std::max(opt.max_num_batched_tokens, max_seqs);
  max_blocks = (max_len + opt.block_size - 1) / opt.block_size;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "creating a stream");
  check(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking), "creating a stream");
  check(cudaEventCreateWithFlags(&ids_uploaded, cudaEventDisableTiming), "creating an event");
  cudaError_t err = cudaSuccess;
  gemm = cuda::gemm_create(32u << 20, &err);
  check(err, "creating the cuBLASLt context");

  auto t0 = std::chrono::steady_clock::now();
  load_weights(checkpoint);
  stats.load_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  alloc_activations();
  init_kv_scales(checkpoint);
  profile_and_alloc_kv();
  stats.profile_ms = ms_since(t0);
  if (!opt.enforce_eager) {
    t0 = std::chrono::steady_clock::now();
    capture_graphs();
    stats.graph_ms = ms_since(t0);
  }
  // From here on steps carry real tokens: the first one sets the scales.
  kv_scales_pending = opt.calculate_kv_scales && is_fp8(kv_dt);
}

// Generates a rank's slice of an HF tensor like the CPU loader's dummy weights (same keys and
// bounds, models::dummy_fill; a slice holds the whole tensor's numbers at its positions).
cudaError_t CudaRunner::Impl::fill_dummy(const models::HfTensorSpec& part, void* out) {
  const models::DummyFill f = models::dummy_fill(part, opt.seed);
  if (f.ones) return cuda::fill_constant(dt, out, part.num_elements(), 1.f, stream);
  const int64_t cols_full = part.shape.size() > 1 ? part.shape[1] : 1;
  if (part.slice.dim == 1)
    return cuda::fill_uniform(dt, out, part.shape[0], part.slice.count, cols_full,
                              f.key + uint64_t(part.slice.begin), f.bound, stream);
  const uint64_t first = part.slice.dim == 0 ? uint64_t(part.slice.begin * cols_full) : 0;
  return cuda::fill_uniform(dt, out, 1, part.num_elements(), part.num_elements(), f.key + first,
                            f.bound, stream);
}

// Refuses a model whose weights cannot fit before allocating any of them, naming the sizes.
void CudaRunner::Impl::check_weights_fit(uint64_t weight_bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free memory");
  if (weight_bytes <= free_bytes) return;
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, opt.device), "reading device properties");
  throw_error(ErrorKind::kResourceExhausted,
              opt.model_name + ": weights in " + std::string(dtype_name(dt)) + " need " +
                  std::to_string(weight_bytes >> 20) + " MiB but " + prop.name + " has only " +
                  std::to_string(free_bytes >> 20) + " MiB free (of " +
                  std::to_string(total_bytes >> 20) + " MiB)");
}

// An INT4 / INT8 part dequantized on the host (quant::dequantize_int_part: the CPU backend's exact
// fp32 weights, the rank's slice only) and rounded to the runner's dtype on the device.
void CudaRunner::Impl::upload_dequantized_int(const io::WeightStore& checkpoint,
                                              const models::HfTensorSpec& part, void* out) {
  const int64_t count = part.num_elements();
  std::vector<float> values(static_cast<size_t>(count));
  quant::dequantize_int_part(checkpoint, part, config.quant, values.data());
  DevMem staging(size_t(count) * 4, "dequantized " + part.name);
  check(cudaMemcpyAsync(staging.get(), values.data(), size_t(count) * 4, cudaMemcpyHostToDevice,
                        stream),
        "uploading " + part.name);
  check(cuda::convert_dtype(DType::kF32, staging.get(), dt, out, count, stream),
        "converting " + part.name);
  check(cudaStreamSynchronize(stream), "dequantizing " + part.name);
}

// Expert parts too (quantizable_slot): they are not packed (int_layer), so they are dequantized on
// the host like any part the INT kernels do not take.
bool CudaRunner::Impl::int_part(const models::WeightTensorSpec& t,
                                const models::HfTensorSpec& part) const {
  return config.quant.int_weights() && quant::quantizable_slot(t.slot) &&
         quant::int_part_quantized(config.quant, part.name);
}

void CudaRunner::Impl::load_weights(const io::WeightStore* checkpoint) {
  const auto& c = config;
  const std::vector<models::WeightTensorSpec> plan = models::llama_weight_plan(c, opt.shard);
  quant::check_int_weights_on_gpu(c.quant, opt.model_name);
  if (c.quant.int_weights() && c.quant.int8_activations && dt == DType::kF32)
    unsupported(opt.model_name +
                ": W8A8-INT8 computes in bfloat16 or float16, not --dtype float32");
  if (c.quant.int_weights() && checkpoint)
    log::info(quant::describe_int_weights_on_gpu(c.quant, dt) +
              (c.is_moe() ? "; the expert weights dequantized to " + std::string(dtype_name(dt)) +
                                " at load (no INT expert kernel yet)"
                          : ""));
  // Names and shapes of the whole checkpoint are checked before anything is allocated or read.
  if (checkpoint) models::check_llama_checkpoint(c, *checkpoint);
  check_weights_fit(plan_device_bytes(plan, checkpoint));
  layers.resize(size_t(num_layers));
  load_plan(plan, checkpoint);
  if (c.eagle) {  // the embedding and LM head are the target's
    if (!opt.shared_embed_config)
      throw_error(ErrorKind::kInternal, "EAGLE head runner without its target's config");
    std::vector<models::WeightTensorSpec> shared;
    for (models::WeightTensorSpec& t : models::llama_weight_plan(*opt.shared_embed_config))
      if (t.slot == models::WeightSlot::kEmbed || t.slot == models::WeightSlot::kLmHead)
        shared.push_back(std::move(t));
    load_plan(shared, opt.shared_embed_checkpoint);
  }
  fp8_staging8 = DevMem(), fp8_staging16 = DevMem();
  load_rope_tables();
}

void CudaRunner::Impl::load_plan(const std::vector<models::WeightTensorSpec>& plan,
                                 const io::WeightStore* checkpoint) {
  std::optional<WeightUploader> uploader;
  if (checkpoint) {
    size_t largest = 0;
    for (const auto& t : plan)
      for (const auto& part : t.parts)
        if (!int_part(t, part))  // INT parts are dequantized on the host, not streamed
          largest = std::max(
              largest, size_t(part.num_elements()) * dtype_size(checkpoint->get(part.name).dtype));
    uploader.emplace(stream, dt, largest);
  }
  for (const models::WeightTensorSpec& t : plan) {
    DevMem& mem = models::weight_slot(*this, t);
    if (fp8_layer(t, checkpoint)) {
      load_fp8_layer(t, checkpoint, uploader ? &*uploader : nullptr, mem, fp8_slot(t));
      any_fp8 = true;
      continue;
    }
    if (int_layer(t, checkpoint) && load_int_layer(t, checkpoint, mem, int_slot(t))) continue;
    // Under tensor parallelism the vocabulary shards are padded to vocab_shard zero rows, so the
    // LM head's output gathers as equal blocks.
    const bool vocab_rows =
        t.slot == models::WeightSlot::kEmbed || t.slot == models::WeightSlot::kLmHead;
    const size_t rows_pad =
        vocab_rows && opt.shard.tp_size > 1 ? size_t(geo.vocab_shard - geo.vocab) : 0;
    mem = DevMem((size_t(t.num_elements()) + rows_pad * size_t(hidden)) * esz, t.label);
    if (rows_pad > 0)
      check(cudaMemsetAsync(mem.get(), 0, mem.bytes(), stream), "zeroing " + t.label);
    stats.weight_bytes += int64_t(mem.bytes());
    unsigned char* out = mem.as<unsigned char>();  // fused parts follow each other
    for (const models::HfTensorSpec& part : t.parts) {
      const int64_t count = part.num_elements();
      if (uploader && int_part(t, part)) {
        upload_dequantized_int(*checkpoint, part, out);
      } else if (uploader) {
        uploader->upload(checkpoint->get(part.name), part, out);
      } else {
        check(fill_dummy(part, out), "filling " + part.name);
      }
      out += size_t(count) * esz;
    }
  }
  if (uploader) {
    uploader->finish();
    stats.checkpoint_bytes += int64_t(uploader->bytes_read());
  }
  check(cudaStreamSynchronize(stream), "loading weights");
}

// The frequencies come from the CPU backend's cpu::rope_inv_freq (transformers' float32
// initialisers, one formula for both backends); longrope's factors are those picked for the served
// context (use_long) and its attention factor scales cos / sin, as in cpu::rope_tables.
void CudaRunner::Impl::load_rope_tables() {
  const io::RopeScaling& r = config.rope_scaling;
  rope_scale = float(r.attention_factor);
  make_rope_tables(cpu::rope_inv_freq(r, config.rope_theta, head_dim), rope_scale, inv_freq,
                   rope_cache);
  if (config.gemma.local_rope_theta > 0.0)
    make_rope_tables(cpu::rope_inv_freq({}, config.gemma.local_rope_theta, head_dim), 1.f,
                     local_inv_freq, local_rope_cache);
  check(cudaStreamSynchronize(stream), "generating weights");
}

void CudaRunner::Impl::make_rope_tables(const std::vector<float>& freqs, float scale,
                                        DevMem& freq_out, DevMem& cache_out) {
  freq_out = DevMem(freqs.size() * 4, "rope frequencies");
  check(cudaMemcpy(freq_out.get(), freqs.data(), freqs.size() * 4, cudaMemcpyHostToDevice),
        "uploading rope frequencies");
  cache_out = DevMem(size_t(opt.max_model_len) * head_dim * esz, "rope cos/sin cache");
  check(cuda::rope_cos_sin_cache(dt, freq_out.as<float>(), head_dim, opt.max_model_len,
                                 cache_out.get(), stream, scale),
        "rope cos/sin cache");
}

void CudaRunner::Impl::alloc_activations() {
  const size_t T = size_t(max_tokens);
  x_hidden = DevMem(T * hidden * esz, "activations");
  x_normed = DevMem(T * hidden * esz, "activations");
  x_proj = DevMem(T * hidden * esz, "activations");
  x_qkv = DevMem(T * qkv_width * esz, "activations");
  x_attn = DevMem(T * num_heads * head_dim * esz, "activations");
  // The dense MLP's buffers only where a layer of the stage has a dense MLP: a mixture of experts
  // with none (Mixtral, most Qwen3-MoE checkpoints) would size them by intermediate_size for
  // nothing.
  bool dense_mlp = false;
  for (int l = 0; l < num_layers; ++l)
    dense_mlp = dense_mlp || !config.moe_layer(geo.layer_begin + l);
  if (dense_mlp) {
    x_gate_up = DevMem(T * 2 * inter * esz, "activations");
    x_act = DevMem(T * inter * esz, "activations");
  }
  x_rows = DevMem(size_t(max_seqs) * hidden * esz, "activations");
  if (config.eagle) {
    x_eagle_in = DevMem(T * 2 * hidden * esz, "activations");
    x_features = DevMem(T * hidden * esz, "activations");
    check(cudaMemset(x_features.get(), 0, x_features.bytes()), "zeroing EAGLE features");
  }
  if (moe_experts > 0) alloc_moe_buffers(T);
  alloc_quant_scratch(T);
  x_logits = DevMem(size_t(max_seqs) * vocab * esz, "logits");
  if (opt.shard.tp_size > 1 && opt.shard.last_stage()) {
    x_logits_shard = DevMem(size_t(max_seqs) * size_t(geo.vocab_shard) * esz, "logits shard");
    x_logits_gather = DevMem(size_t(opt.shard.tp_size) * x_logits_shard.bytes(), "logits gather");
  }
  // Split partials: items * splits <= items + 2 * num_sms (see plan_attention) for any plan.
  attn_ws = DevMem((T + 2 * size_t(num_sms) + 64) * 4 * num_heads * (head_dim + 1) * sizeof(float),
                   "attention workspace");
  // The split blocks' merge counters (items <= T): zero at first, run_attention leaves them so.
  attn_counters = DevMem(T * num_heads * sizeof(unsigned), "attention split counters");
  check(cudaMemset(attn_counters.get(), 0, attn_counters.bytes()), "clearing the split counters");
  alloc_step_inputs();
  stats.activation_bytes = int64_t(
      x_hidden.bytes() * 3 + x_qkv.bytes() + x_attn.bytes() + x_gate_up.bytes() + x_act.bytes() +
      x_rows.bytes() + x_logits.bytes() + attn_ws.bytes() + lay.total + x_sample_work.bytes() +
      x_sample_weights.bytes() + x_router.bytes() + moe_ids.bytes() + moe_weights.bytes() +
      x_moe_act.bytes() + x_moe_out.bytes() + x_moe_gate_up.bytes() + moe_w16.bytes());
}

// The mixture-of-experts layers' buffers for steps of T tokens: router logits, routing, the slots'
// activations and, for FP8 experts on the host-sorted pass, the dequantized expert scratch.
void CudaRunner::Impl::alloc_moe_buffers(size_t T) {
  const size_t slots = T * size_t(moe_top_k);
  x_router = DevMem(T * moe_experts * esz, "MoE activations");
  moe_ids = DevMem(slots * 4, "MoE routing");
  moe_weights = DevMem(slots * 4, "MoE routing");
  // Rows for the grouped pass's padded layout too (moe_grouped: blocks of at most twice the
  // mean count rounded up to 16, then the overflow).
  const size_t rows = 3 * slots + 32 * size_t(moe_experts);
  x_moe_act = DevMem(rows * moe_inter * esz, "MoE activations");
  x_moe_out = DevMem(rows * hidden * esz, "MoE activations");
  x_moe_gate_up = DevMem(rows * 2 * moe_inter * esz, "MoE activations");
  moe_rows = DevMem((rows + slots) * 4, "MoE routing");
  const bool fp8_experts = std::any_of(layers.begin(), layers.end(), [](const LayerWeights& l) {
    return l.experts_gate_up_fp8.on();
  });
  if (fp8_experts && (int(T) >= kMoeHostMinTokens || moe_grouping_forced("host")))
    moe_w16 = DevMem(size_t(moe_experts) * 2 * moe_inter * hidden * esz,  // the larger one
                     "MoE FP8 experts dequantized");
  check(cudaMallocHost(reinterpret_cast<void**>(&moe_host), (rows + 2 * slots) * 4),
        "pinned MoE routing");
}

// The quantized projections' scratch for steps of T tokens: FP8 / int8 activations and scales,
// int8 sums, INT weights dequantized for prefill (split-k sums for decode), act-order columns.
void CudaRunner::Impl::alloc_quant_scratch(size_t T) {
  if (any_fp8) {  // the widest projection input: hidden, the attention output or the MLP's
    const size_t k = size_t(std::max({hidden, num_heads * head_dim, inter}));
    fp8_xq = DevMem(T * k, "FP8 activations");
    fp8_xscale = DevMem(T * (k / size_t(cuda::kFp8Block) + 1) * 4, "FP8 activation scales");
  }
  if (any_w8a8) {
    const size_t k = size_t(std::max({hidden, num_heads * head_dim, inter}));
    int8_xq = DevMem(T * k, "int8 activations");
    int8_xscale = DevMem(T * 4, "int8 activation scales");
    int8_acc = DevMem(std::min(T, kInt8AccRows) * size_t(widest_out) * 4, "int8 GEMM sums");
  }
  if (any_int && T > size_t(cuda::kIntWeightOnlyMaxRows))
    int_w_work = DevMem(size_t(int_largest) * esz,
                        "INT weights dequantized for prefill, split-k sums for decode");
  if (any_int_perm)
    int_x_perm = DevMem(T * size_t(std::max({hidden, num_heads * head_dim, inter})) * esz,
                        "act-order activations");
}

// The step inputs' layout in one device buffer (and its pinned host twin), the pinned logits and
// the sampler's buffers.
void CudaRunner::Impl::alloc_step_inputs() {
  const size_t T = size_t(max_tokens);
  auto align = [](size_t v) { return (v + 15) / 16 * 16; };
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t o = off;
    off = align(off + bytes);
    return o;
  };
  const size_t S = size_t(max_seqs);
  lay.token_ids = take(T * 4);
  lay.positions = take(T * 4);
  const size_t G = size_t(kv_layout.num_groups());
  lay.slots = take(G * T * 8);  // [group, max_tokens]
  lay.qsl = take((S + 1) * 4);
  lay.seq_lens = take(S * 4);
  lay.tables = take(G * S * size_t(max_blocks) * 4);  // [group, max_seqs, max_blocks]
  lay.split_items = take(2 * T * 4);
  lay.tile_items = take(2 * (T / cuda::kAttentionTileRows + S + 1) * 4);
  lay.rows = take(T * 4);
  lay.sample_rows = take(S * sizeof(cuda::SampleRow));
  lay.total = off;
  ints_dev = DevMem(lay.total, "step inputs");
  check(cudaMallocHost(reinterpret_cast<void**>(&ints_host), lay.total), "pinned step inputs");
  check(cudaMallocHost(&logits_host, S * vocab * esz), "pinned logits");
  x_sample_work = DevMem(S * vocab * sizeof(float), "sampler scratch");
  x_sample_weights = DevMem(S * vocab * sizeof(float), "sampler scratch");
  x_sample_out = DevMem(S * sizeof(cuda::SampleOutput), "sampler outputs");
  check(cudaMallocHost(reinterpret_cast<void**>(&sample_out_host), S * sizeof(cuda::SampleOutput)),
        "pinned sampler outputs");
}

// ---- one step --------------------------------------------------------------------------------

// What plan_attention needs of a step of this shape (pointers for their alignment only).
cuda::AttentionParams CudaRunner::Impl::planning_params(int num_tokens, int num_seqs) const {
  cuda::AttentionParams ap;
  ap.dtype = dt;
  ap.kv_dtype = kv_dt;
  ap.q = x_qkv.get();
  ap.k_cache = kv_pool.get() ? kv_pool.get() : x_qkv.get();
  ap.v_cache = ap.k_cache;
  ap.out = x_attn.get();
  ap.num_seqs = num_seqs;
  ap.num_tokens = num_tokens;
  ap.num_heads = num_heads;
  ap.num_kv_heads = num_kv_heads;
  ap.head_dim = head_dim;
  ap.block_size = opt.block_size;
  ap.max_blocks_per_seq = max_blocks;
  ap.num_slots = kv_pool.get() ? int64_t(num_blocks) * opt.block_size : 0;
  ap.q_token_stride = qkv_width;
  // A model with sliding windows or soft caps plans with them, so that no layer's attention is
  // planned for the wgmma kernel, which has neither (attention.cu).
  ap.window = int(config.sliding_window);
  ap.softcap = float(config.gemma.attn_logit_softcapping);
  return ap;
}

CudaRunner::Impl::DecodeShape CudaRunner::Impl::decode_shape(int num_seqs, int q) {
  DecodeShape shape;
  for (int b : graph_batch_sizes(max_seqs)) {
    if (b >= num_seqs) {
      shape.padded_seqs = b;
      break;
    }
  }
  if (q > 1 && (shape.padded_seqs == 0 || int64_t(shape.padded_seqs) * q > max_seqs))
    return DecodeShape{};
  if (shape.padded_seqs == 0 || num_seqs < 1)
    internal("decode batch of " + std::to_string(num_seqs) + " seqs exceeds max_num_seqs");
  const int b = shape.padded_seqs;
  auto it = decode_splits.find({b, q});
  if (it == decode_splits.end()) {
    // Splits are fixed per shape: chosen for the longest context such a step may see.
    std::vector<int32_t> qsl(size_t(b) + 1), lens(size_t(b), opt.max_model_len);
    for (int i = 0; i <= b; ++i) qsl[size_t(i)] = i * q;
    cuda::AttentionPlanHost ph;
    check(cuda::plan_attention(planning_params(b * q, b), qsl.data(), lens.data(), num_sms, 0, &ph),
          "planning decode attention");
    it = decode_splits.emplace(std::pair{b, q}, ph.num_splits).first;
  }
  shape.num_splits = it->second;
  return shape;
}

CudaRunner::Impl::Staged CudaRunner::Impl::stage(
    const std::vector<int32_t>& token_ids, const std::vector<int32_t>& positions,
    const std::vector<int64_t>& slots, const std::vector<int32_t>& qsl,
    const std::vector<int32_t>& seq_lens, const std::vector<const int32_t*>& tables,
    const std::vector<int>& table_lens, int fixed_splits, const MoreKvGroups* more) {
  Staged s;
  s.num_tokens = int(token_ids.size());
  s.num_seqs = int(seq_lens.size());
  if (s.num_tokens > max_tokens || s.num_seqs > max_seqs)
    internal("step of " + std::to_string(s.num_tokens) + " tokens / " + std::to_string(s.num_seqs) +
             " seqs exceeds the runner's limits");
  std::memcpy(host<int32_t>(lay.token_ids), token_ids.data(), token_ids.size() * 4);
  std::memcpy(host<int32_t>(lay.positions), positions.data(), positions.size() * 4);
  for (int g = 0; g < kv_layout.num_groups(); ++g) {
    const bool own = g > 0 && more && size_t(g - 1) < more->slots.size();
    const std::vector<int64_t>& gs = own ? more->slots[size_t(g - 1)] : slots;
    std::memcpy(host<int64_t>(lay.slots) + size_t(g) * max_tokens, gs.data(), gs.size() * 8);
  }
  std::memcpy(host<int32_t>(lay.qsl), qsl.data(), qsl.size() * 4);
  std::memcpy(host<int32_t>(lay.seq_lens), seq_lens.data(), seq_lens.size() * 4);
  for (int g = 0; g < kv_layout.num_groups(); ++g) {
    const bool own = g > 0 && more && size_t(g - 1) < more->tables.size();
    const std::vector<const int32_t*>& gt = own ? more->tables[size_t(g - 1)] : tables;
    int32_t* tab =
        host<int32_t>(lay.tables) + size_t(g) * max_seqs * max_blocks;  // [num_seqs, max_blocks]
    for (int i = 0; i < s.num_seqs; ++i) {
      const int len = std::min(table_lens[size_t(i)], max_blocks);
      std::memcpy(tab + size_t(i) * max_blocks, gt[size_t(i)], size_t(len) * 4);
      std::fill(tab + size_t(i) * max_blocks + len, tab + size_t(i + 1) * max_blocks, 0);
    }
  }
  const cuda::AttentionParams ap = planning_params(s.num_tokens, s.num_seqs);
  cuda::AttentionPlanHost ph;
  check(cuda::plan_attention(ap, qsl.data(), seq_lens.data(), num_sms, fixed_splits, &ph),
        "planning attention");
  std::memcpy(host<int32_t>(lay.split_items), ph.split_items.data(), ph.split_items.size() * 4);
  std::memcpy(host<int32_t>(lay.tile_items), ph.tile_items.data(), ph.tile_items.size() * 4);
  s.plan.split_items = dev<int32_t>(lay.split_items);
  s.plan.num_split_items = int(ph.split_items.size() / 2);
  s.plan.num_splits = ph.num_splits;
  s.plan.tile_items = dev<int32_t>(lay.tile_items);
  s.plan.num_tile_items = int(ph.tile_items.size() / 2);
  s.plan.tile_rows = ph.tile_rows;
  s.plan.split_counters = attn_counters.as<unsigned>();
  if (ph.workspace_bytes > attn_ws.bytes() ||
      ph.split_counters * sizeof(unsigned) > attn_counters.bytes())
    internal("attention workspace too small");
  return s;
}

void CudaRunner::Impl::upload_inputs() {
  check(cudaMemcpyAsync(ints_dev.get(), ints_host, lay.total, cudaMemcpyHostToDevice, stream),
        "uploading step inputs");
}

// Logits [num_rows, vocab] (into x_logits) of the rows listed at rows[first, first + num_rows).
// Last stage only (a no-op elsewhere); with tensor parallelism every rank computes its padded
// vocabulary shard, the shards are all-gathered and laid side by side.
void CudaRunner::Impl::compute_logits(int first, int num_rows) {
  if (!opt.shard.last_stage()) return;
  // Gathering rows is an embedding lookup with the hidden states as the table.
  check(cuda::embedding({dt, dev<int32_t>(lay.rows) + first, x_normed.get(), x_rows.get(), num_rows,
                         hidden, max_tokens, 0},
                        stream),
        "gathering logits rows");
  const DevMem& head = lm_head.get() ? lm_head : embed;
  const int tp = opt.shard.tp_size;
  const int shard = int(geo.vocab_shard);
  cuda::GemmParams p{
      dt,       x_rows.get(),           head.get(), tp > 1 ? x_logits_shard.get() : x_logits.get(),
      num_rows, tp > 1 ? shard : vocab, hidden,     false,
      nullptr};
  check(cuda::gemm(gemm, p, stream), "lm head");
  if (tp == 1) return soft_cap_logits(num_rows);
  const size_t block = size_t(num_rows) * size_t(shard);  // one rank's [num_rows, shard]
  opt.tp->all_gather(x_logits_shard.get(), x_logits_gather.get(), block, dt, stream);
  for (int t = 0; t < tp; ++t) {
    const int begin = t * shard, count = std::max(0, std::min(vocab, begin + shard) - begin);
    if (count == 0) continue;
    check(cudaMemcpy2DAsync(x_logits.as<unsigned char>() + size_t(begin) * esz, size_t(vocab) * esz,
                            x_logits_gather.as<unsigned char>() + size_t(t) * block * esz,
                            size_t(shard) * esz, size_t(count) * esz, size_t(num_rows),
                            cudaMemcpyDeviceToDevice, stream),
          "laying out gathered logits");
  }
  soft_cap_logits(num_rows);
}

void CudaRunner::Impl::soft_cap_logits(int num_rows) {
  const double cap = config.gemma.final_logit_softcapping;
  if (cap > 0.0)
    check(cuda::soft_cap(dt, x_logits.get(), int64_t(num_rows) * vocab, float(cap), stream),
          "logit soft cap");
}

std::span<int32_t> CudaRunner::Impl::sample_ids_buffer(size_t n) {
  if (n > sample_ids_capacity) {
    // The old buffers are idle: only the sampler reads them, and every step ends with a stream
    // synchronize. (Called after the forward pass is queued, the frees below wait for it.)
    const size_t cap = std::max(n, 2 * sample_ids_capacity);
    if (sample_ids_host) cudaFreeHost(sample_ids_host);
    sample_ids_host = nullptr;
    sample_ids_capacity = 0;
    sample_ids_dev = DevMem();
    sample_ids_dev = DevMem(cap * 4, "sampler id lists");
    check(cudaMallocHost(reinterpret_cast<void**>(&sample_ids_host), cap * 4),
          "pinned sampler id lists");
    sample_ids_capacity = cap;
  }
  return {sample_ids_host, n};
}

void CudaRunner::Impl::upload_sample_ids(size_t n) {
  if (n == 0) return;
  // Beside the forward pass (queued on `stream` already): the copy's megabyte of masks at a 128k
  // vocabulary no longer waits for the forward pass to end. The previous step's sampler has
  // finished reading the device buffer (every step ends with a stream synchronize).
  check(cudaMemcpyAsync(sample_ids_dev.get(), sample_ids_host, n * 4, cudaMemcpyHostToDevice,
                        copy_stream),
        "uploading sampler id lists");
  check(cudaEventRecord(ids_uploaded, copy_stream), "recording an event");
  check(cudaStreamWaitEvent(stream, ids_uploaded, 0), "ordering the sampler after its inputs");
}

void CudaRunner::Impl::sample_rows(int num_rows, cuda::SampleOutput* out) {
  launch_sampler(num_rows);
  check(cudaMemcpyAsync(sample_out_host, x_sample_out.get(),
                        size_t(num_rows) * sizeof(cuda::SampleOutput), cudaMemcpyDeviceToHost,
                        stream),
        "downloading sampled tokens");
  {
    phase::Scope timed(phase::kDeviceWait);
    check(cudaStreamSynchronize(stream), "running the step");
  }
  std::copy_n(sample_out_host, num_rows, out);
}

void CudaRunner::Impl::launch_sampler(int num_rows) {
  cuda::SampleParams p;
  p.dtype = dt;
  p.logits = x_logits.get();
  p.num_rows = num_rows;
  p.vocab = vocab;
  p.rows = dev<cuda::SampleRow>(lay.sample_rows);
  p.host_rows = host<cuda::SampleRow>(lay.sample_rows);  // what was uploaded for this step
  p.ids = sample_ids_dev.as<int32_t>();
  p.work = x_sample_work.as<float>();
  p.weights = x_sample_weights.as<float>();
  p.out = x_sample_out.as<cuda::SampleOutput>();
  check(cuda::sample(p, stream), "sampling");
}

void CudaRunner::Impl::init_kv_scales(const io::WeightStore* checkpoint) {
  if (!is_fp8(kv_dt)) return;
  std::vector<float> scales(size_t(2 * num_layers), 1.f);
  const std::vector<float> stored =
      checkpoint ? quant::read_kv_scales(config, *checkpoint) : std::vector<float>{};
  if (!stored.empty())  // the whole model's layers: this stage's slice
    std::copy_n(stored.begin() + 2 * geo.layer_begin, 2 * num_layers, scales.begin());
  kv_scales = DevMem(scales.size() * sizeof(float), "KV cache scales");
  check(cudaMemcpy(kv_scales.get(), scales.data(), scales.size() * sizeof(float),
                   cudaMemcpyHostToDevice),
        "uploading KV cache scales");
}

void CudaRunner::Impl::profile_and_alloc_kv() {
  const int64_t bs = opt.block_size;
  block_bytes = size_t(bs) * num_kv_heads * head_dim * dtype_size(kv_dt);
  const size_t per_block_all_layers = 2 * size_t(kv_layout.slots) * block_bytes;
  // A maximum-size dummy step (every KV group on the same blocks) (max_tokens tokens in seqs of at
  // most max_model_len) on a temporary pool: every activation buffer, cuBLASLt's workspace and
  // lazily created state get touched.
  std::vector<int32_t> ids, pos, qsl{0}, lens, rows;
  std::vector<int64_t> slots;
  std::vector<std::vector<int32_t>> tables;
  int next_block = 0;
  for (int left = max_tokens; left > 0 && int(lens.size()) < max_seqs;) {
    const int len = std::min(left, opt.max_model_len);
    std::vector<int32_t> table;
    for (int b = 0; b < (len + bs - 1) / bs; ++b) table.push_back(next_block++);
    for (int i = 0; i < len; ++i) {
      ids.push_back(i % vocab);
      pos.push_back(i);
      slots.push_back(int64_t(table[size_t(i / bs)]) * bs + i % bs);
    }
    tables.push_back(std::move(table));
    lens.push_back(len);
    qsl.push_back(qsl.back() + len);
    left -= len;
  }
  std::vector<const int32_t*> tptr;
  std::vector<int> tlen;
  for (auto& t : tables) tptr.push_back(t.data()), tlen.push_back(int(t.size()));
  {
    num_blocks = next_block;
    DevMem temp_pool(size_t(next_block) * per_block_all_layers, "profiling KV pool");
    kv_pool = std::move(temp_pool);
    Staged st = stage(ids, pos, slots, qsl, lens, tptr, tlen, 0);
    const int num_rows = std::min(max_seqs, int(ids.size()));
    for (int r = 0; r < num_rows; ++r) host<int32_t>(lay.rows)[r] = r;
    upload_inputs();
    forward(st, kv_pool.get());
    compute_logits(0, num_rows);
    check(cudaStreamSynchronize(stream), "profiling step");
    kv_pool = DevMem();
  }
  size_t free_bytes = 0, total_bytes = 0;
  check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free memory");
  int64_t blocks = opt.num_kv_blocks;
  if (blocks <= 0) {
    const double budget = opt.gpu_memory_utilization * double(total_bytes) -
                          double(total_bytes - free_bytes) - double(opt.draft_fixed_bytes);
    const double per_block =
        double(per_block_all_layers) + double(opt.draft_kv_bytes_per_token) * double(bs);
    blocks = budget > 0 ? int64_t(budget / per_block) : 0;
  }
  blocks = std::min<int64_t>(blocks, INT32_MAX / 2 / bs);
  // Every rank agrees (on the minimum) before any can fail, so none waits for a failed peer.
  if (opt.agree_min) blocks = opt.agree_min(blocks);
  if (blocks < 1)
    throw_error(ErrorKind::kResourceExhausted,
                "--gpu-memory-utilization " + std::to_string(opt.gpu_memory_utilization) +
                    ": weights (" + std::to_string(stats.weight_bytes >> 20) +
                    " MiB) and activations leave no room for a KV block of " +
                    std::to_string(per_block_all_layers >> 10) + " KiB on a GPU of " +
                    std::to_string(total_bytes >> 20) + " MiB (on some rank)");
  num_blocks = int(blocks);
  kv_pool = DevMem(size_t(blocks) * per_block_all_layers, "KV cache");
  stats.kv_bytes = int64_t(kv_pool.bytes());
  // Sliding-window groups point the blocks they gave back at block 0, which the KV manager never
  // hands out: a kernel tile that starts before the window loads it, masked, so it must hold
  // finite values (zeros).
  if (kv_layout.hybrid()) {
    for (int t = 0; t < 2 * kv_layout.slots; ++t)
      check(cudaMemset(kv_pool.as<unsigned char>() + size_t(t) * num_blocks * block_bytes, 0,
                       block_bytes),
            "clearing the null KV block");
  }
  alloc_swap_pool();
}

void CudaRunner::Impl::alloc_swap_pool() {
  if (!(opt.swap_space_gib > 0)) return;  // the same on every rank
  const size_t per_block_all_layers = 2 * size_t(kv_layout.slots) * block_bytes;
  double blocks = std::floor(opt.swap_space_gib * 1073741824.0 / double(per_block_all_layers));
  blocks = std::min(blocks, double(INT32_MAX / 2));
  // Ranks of different stages hold different layer counts: all use the smallest pool.
  if (opt.agree_min) blocks = double(opt.agree_min(int64_t(blocks)));
  if (blocks < 1) return;
  num_swap_blocks = int(blocks);
  const size_t bytes = size_t(num_swap_blocks) * per_block_all_layers;
  const cudaError_t err = cudaMallocHost(reinterpret_cast<void**>(&swap_pool), bytes);
  if (err != cudaSuccess) {
    swap_pool = nullptr;
    num_swap_blocks = 0;
    cudaGetLastError();
    throw_error(ErrorKind::kResourceExhausted,
                "--swap-space " + std::to_string(opt.swap_space_gib) + ": cannot pin " +
                    std::to_string(bytes >> 20) +
                    " MiB of host memory: " + cudaGetErrorString(err));
  }
}

void CudaRunner::Impl::capture_graphs() {
  for (int b : graph_batch_sizes(max_seqs)) capture_graph(b, 1);
  stats.num_graphs = int(graphs.size());
}

void CudaRunner::Impl::capture_graph(int b, int q) {
  if (opt.enforce_eager || graphs.count({b, q}) != 0) return;
  const int splits = decode_shape(b, q).num_splits;
  const int n = b * q;
  std::vector<int32_t> ids(size_t(n), 0), pos(size_t(n), 0), qsl(size_t(b) + 1), lens(size_t(b), q);
  std::vector<int64_t> slots(size_t(n), -1);
  for (int t = 0; t < n; ++t) pos[size_t(t)] = t % q;
  const int32_t zero_block = 0;
  std::vector<const int32_t*> tptr(size_t(b), &zero_block);
  std::vector<int> tlen(size_t(b), 1);
  for (int i = 0; i <= b; ++i) qsl[size_t(i)] = i * q;
  Staged st = stage(ids, pos, slots, qsl, lens, tptr, tlen, splits);
  for (int r = 0; r < n; ++r) host<int32_t>(lay.rows)[r] = r;
  upload_inputs();
  forward(st, kv_pool.get());  // warm-up outside the capture (cuBLASLt heuristics, attributes)
  compute_logits(0, n);
  check(cudaStreamSynchronize(stream), "graph warm-up");
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
        "beginning graph capture");
  forward(st, kv_pool.get());
  compute_logits(0, n);
  check(cudaStreamEndCapture(stream, &graph), "ending graph capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(err, "instantiating a decode graph");
  graphs[{b, q}] = exec;
}

// ---- CudaRunner --------------------------------------------------------------------------------

CudaRunner::CudaRunner(io::ModelConfig config, const io::WeightStore* checkpoint,
                       const CudaRunnerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->config = std::move(config);
  impl_->opt = options;
  impl_->init(checkpoint);
}

CudaRunner::~CudaRunner() = default;

int CudaRunner::num_kv_blocks() const { return impl_->num_blocks; }
int CudaRunner::num_swap_blocks() const { return impl_->num_swap_blocks; }
int CudaRunner::block_size() const { return impl_->opt.block_size; }
const io::ModelConfig& CudaRunner::config() const { return impl_->config; }
const CudaStartupStats& CudaRunner::startup_stats() const { return impl_->stats; }

}  // namespace pagellm::runner
