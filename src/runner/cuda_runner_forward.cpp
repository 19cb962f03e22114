// CudaRunner::Impl::forward: one step's forward pass enqueued on the runner's stream (embedding or
// the previous stage's hidden states, then every layer: norms, projections, RoPE and the KV write,
// attention, the MLP, the tensor-parallel all-reduces), graph-capturable (apart from the
// host-sorted mixture-of-experts pass, which only eager steps of many tokens take).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "backends/cuda/gemm/fp8_gemm.h"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/moe.h"
#include "backends/cuda/moe_groups.h"
#include "runner/cuda_runner_impl.h"

namespace pagellm::runner {
namespace {

// How a mixture-of-experts layer runs its experts' projections (CudaRunner::Impl::MoePath):
// - kDevice: the slots sorted by expert on the device and one grouped kernel per projection
//   (moe_grouped_linear): each expert in use read once, graph-capturable;
// - kHost: an eager step's routing sorted on the host and cuBLAS GEMMs over the groups
//   (moe_grouped): tensor-core GEMMs for the long prefill steps, at one host synchronisation per
//   layer;
// - kPerSlot: each slot reads its expert's weights (moe_linear): the smallest batches, fp32, and
//   shapes the grouped kernel does not take.
// Tokens from which a step groups on the device: below, few slots share an expert, and the
// per-slot kernel, with no sort before it, was faster (H200, Qwen3-30B-A3B experts at 1 token:
// 22.4 against 29.4 us a layer; even at 4).
constexpr int kMoeDeviceMinTokens = 4;
// Experts in use up to which the host-sorted pass runs a GEMM per expert rather than one strided
// batch over padded blocks of every expert.
constexpr int kMoeFewExperts = 16;

}  // namespace

// PAGELLM_MOE_GROUPING (A/B runs; unset: the automatic choice of moe_path):
//   device — the device-grouped kernels on every step they take;
//   host   — the host-sorted pass on every eager step of 2+ tokens;
//   slot   — the rule before the device-grouped kernels: host-sorted from 16 tokens (eager), the
//            per-slot kernel otherwise.
bool CudaRunner::Impl::moe_grouping_forced(const char* mode) {
  static const char* forced = std::getenv("PAGELLM_MOE_GROUPING");
  return forced && std::strcmp(forced, mode) == 0;
}

// Programmatic dependent launch on single-GPU decode steps (kernels.h), where the next kernel's
// weight stream starting under this one's drain was measured to pay (H200: +1-2 % at batch 1,
// INT4 +3-4 % at 16 and 64), except FP8 steps that take the tensor-core weight-only kernel
// (2-8 tokens, below the decode GEMM's rows: -1.5 %). Prefill-sized steps were not measured with
// it.
bool CudaRunner::Impl::step_wants_pdl(int n) const {
  const bool fp8_mma_rows = !layers.empty() && layers[0].qkv_fp8.on() && n > 1 &&
                            n <= cuda::kFp8WeightOnlyMaxRows && n < cuda::kFp8DecodeMinRows;
  return n <= 64 && !fp8_mma_rows && opt.shard.tp_size == 1 && opt.shard.first_stage() &&
         opt.shard.last_stage();
}

namespace {

// One step's forward pass (CudaRunner::Impl::forward), its parts as methods: the step's shape, and
// what one part leaves for the next (whether x_proj is already reduced over the tensor-parallel
// ranks, whether the last norm wrote the qkv projection's FP8 input).
class ForwardPass {
 public:
  ForwardPass(CudaRunner::Impl& m, const CudaRunner::Impl::Staged& s, void* pool)
      : m_(m),
        s_(s),
        pool_(pool),
        n_(s.num_tokens),
        eps_(float(m.config.rms_norm_eps)),
        gemma_(m.config.gemma.enabled) {}

  void run() {
    m_.stage_input(n_);
    for (int l = 0; l < m_.num_layers; ++l) {
      const LayerWeights& w = m_.layers[size_t(l)];
      if (l == 0) first_norm(w);  // later layers' input norm ends the layer before
      attention(l, w);
      if (m_.config.moe_layer(m_.geo.layer_begin + l)) {
        all_reduce_add_norm(w.post_norm);
        m_.moe_mlp(w, n_);
      } else {
        dense_mlp(w);
      }
      next_norm(l, w);
    }
    if (m_.opt.shard.last_stage()) return;
    // The last residual add is fused into the next stage's first norm: send both halves.
    const parallel::ShardSpec& sh = m_.opt.shard;
    const int next = (sh.pp_rank + 1) * sh.tp_size + sh.tp_rank;
    m_.opt.world->send(m_.x_hidden.get(), size_t(n_) * m_.hidden, m_.dt, next, m_.stream);
    m_.opt.world->send(m_.x_proj.get(), size_t(n_) * m_.hidden, m_.dt, next, m_.stream);
  }

 private:
  // RMSNorm of x (+ residual); with q on, the normed rows go only to q (the next FP8
  // projection's quantized input).
  void norm(const void* x, void* residual, const DevMem& w, void* out, const cuda::Fp8Out& q = {}) {
    cuda::RmsNormParams p{m_.dt, x, residual, w.get(), q.on() ? nullptr : out, n_, m_.hidden, eps_};
    p.fp8 = q;
    p.unit_offset = gemma_;
    check(cuda::rms_norm(p, m_.stream), "rms_norm");
  }

  cuda::Fp8LinearParams fp8_params(const void* x, const DevMem& w, const Fp8Scales& f, void* y,
                                   int out_features, int in_features, const void* b) const {
    cuda::Fp8LinearParams p;
    p.dtype = m_.dt, p.x = x, p.wq = w.get(), p.w_scale = f.scale.as<float>(), p.y = y, p.bias = b;
    p.m = n_, p.n = out_features, p.k = in_features, p.w_block = f.block;
    p.xq_work = m_.fp8_xq.get(), p.x_scale_work = m_.fp8_xscale.as<float>();
    return p;
  }

  static const void* bias_of(const DevMem* bias) {
    return bias && bias->get() ? bias->get() : nullptr;
  }

  // Where RMSNorm, writing an FP8 projection's input, quantizes it for the projection
  // (gemm/fp8_gemm.h x_quantized): on the tensor-core path; off, fp8_linear does.
  cuda::Fp8Out fused_fp8_input(const DevMem& w, const Fp8Scales& f, void* y, int out_features,
                               int in_features, const DevMem* bias) const {
    if (!f.on() || !cuda::fp8_linear_quantizes_x(m_.gemm, fp8_params(nullptr, w, f, y, out_features,
                                                                     in_features, bias_of(bias))))
      return {};
    return {m_.fp8_xq.get(), m_.fp8_xscale.as<float>(), f.block};
  }

  void int8_linear(const void* x, const DevMem& w, const IntScales& iq, void* y, int out_features,
                   int in_features, const void* b) {
    cuda::Int8LinearParams p;
    p.dtype = m_.dt, p.x = x, p.wq = w.as<int8_t>(), p.w_scale = iq.scale.as<float>(), p.y = y;
    p.bias = b, p.m = n_, p.n = out_features, p.k = in_features;
    p.xq_work = m_.int8_xq.as<int8_t>(), p.x_scale_work = m_.int8_xscale.as<float>();
    p.acc_work = m_.int8_acc.as<int32_t>(),
    p.acc_rows = int(std::min<int64_t>(m_.max_tokens, kInt8AccRows));
    check(cuda::int8_linear(m_.gemm, p, m_.stream), "int8 linear");
  }

  // The INT kernels' parameters; act-order layers gather x's columns into the scratch first.
  cuda::IntLinearParams int_params(const void* x, const DevMem& w, const IntScales& iq, void* y,
                                   int out_features, int in_features, const void* b) {
    if (iq.perm.get()) {
      check(cuda::int_gather_columns(m_.dt, x, iq.perm.as<int32_t>(), m_.int_x_perm.get(), n_,
                                     in_features, m_.stream),
            "act-order gather");
      x = m_.int_x_perm.get();
    }
    cuda::IntLinearParams p;
    p.dtype = m_.dt, p.bits = iq.bits, p.x = x, p.wq = w.get(), p.scale = iq.scale.get();
    p.zero = iq.zero.as<uint8_t>(), p.y = y, p.bias = b;
    p.m = n_, p.n = out_features, p.k = in_features, p.group_size = iq.group_size;
    p.w_work = m_.int_w_work.get();
    return p;
  }

  void int_linear(const void* x, const DevMem& w, const IntScales& iq, void* y, int out_features,
                  int in_features, const void* b) {
    check(
        cuda::int_linear(m_.gemm, int_params(x, w, iq, y, out_features, in_features, b), m_.stream),
        "int linear");
  }

  // A projection: 16-bit through cuBLASLt, FP8 (gemm/fp8_gemm.h) when the layer has scales, or
  // the INT kernels; x_quantized: its FP8 input is already in the scratch (fused_fp8_input).
  void linear(const void* x, const DevMem& w, const Fp8Scales& f, const IntScales& iq, void* y,
              int out_features, int in_features, const DevMem* bias, bool x_quantized = false) {
    const void* b = bias_of(bias);
    if (iq.w8a8) return int8_linear(x, w, iq, y, out_features, in_features, b);
    if (iq.on()) return int_linear(x, w, iq, y, out_features, in_features, b);
    if (f.on()) {
      cuda::Fp8LinearParams p = fp8_params(x, w, f, y, out_features, in_features, b);
      p.x_quantized = x_quantized;
      check(cuda::fp8_linear(m_.gemm, p, m_.stream), "fp8 linear");
      return;
    }
    cuda::GemmParams p{m_.dt, x, w.get(), y, n_, out_features, in_features, false, b};
    check(cuda::gemm(m_.gemm, p, m_.stream), "gemm");
  }

  // x_proj's all-reduce over the tensor-parallel ranks, then x_hidden += x_proj and x_normed =
  // RMSNorm(x_hidden): one fused kernel where the communicator has one (the one-shot NVLink
  // all-reduce), else the all-reduce and the fused add + norm. Returns whether the norm wrote q
  // (see norm). Gemma's x_proj is already reduced (proj_reduced_: normalize_proj below).
  bool all_reduce_add_norm(const DevMem& w_norm, const cuda::Fp8Out& q = {}) {
    if (m_.opt.shard.tp_size > 1 && !gemma_ &&
        m_.opt.tp->all_reduce_add_rms_norm(m_.x_proj.get(), m_.x_hidden.get(), w_norm.get(),
                                           m_.x_normed.get(), n_, m_.hidden, eps_, m_.dt,
                                           m_.stream))
      return false;
    if (!proj_reduced_) m_.all_reduce_proj(n_);
    proj_reduced_ = false;
    norm(m_.x_proj.get(), m_.x_hidden.get(), w_norm, m_.x_normed.get(), q);
    return q.on();
  }

  // Gemma's output norms: x_proj = RMSNorm(x_proj summed over the ranks), in place; the add +
  // norm after it then has nothing left to reduce.
  void normalize_proj(const DevMem& w_norm) {
    m_.all_reduce_proj(n_);
    proj_reduced_ = true;
    norm(m_.x_proj.get(), nullptr, w_norm, m_.x_proj.get());
  }

  // The FP8 input of layer l's qkv projection, for the norm before it.
  cuda::Fp8Out qkv_fp8_input(int l) const {
    const LayerWeights& w = m_.layers[size_t(l)];
    return fused_fp8_input(w.qkv, w.qkv_fp8, m_.x_qkv.get(), m_.qkv_width, m_.hidden, &w.qkv_bias);
  }

  // Layer 0's input norm (an EAGLE head's first layer takes fc's output as it is).
  void first_norm(const LayerWeights& w) {
    if (m_.config.eagle) {
      check(cudaMemcpyAsync(m_.x_normed.get(), m_.x_hidden.get(), size_t(n_) * m_.hidden * m_.esz,
                            cudaMemcpyDeviceToDevice, m_.stream),
            "EAGLE layer 0 input");
      return;
    }
    const cuda::Fp8Out q = qkv_fp8_input(0);
    const bool first = m_.opt.shard.first_stage();
    norm(first ? m_.x_hidden.get() : m_.x_proj.get(), first ? nullptr : m_.x_hidden.get(),
         w.input_norm, m_.x_normed.get(), q);
    qkv_quantized_ = q.on();
  }

  void* qkv_at(size_t heads) const {
    return m_.x_qkv.as<unsigned char>() + heads * size_t(m_.head_dim) * m_.esz;
  }

  // RoPE over q and k, and k and v into layer l's cache blocks (from the rotated keys, which set
  // the FP8 cache scales first when they are still to be calculated).
  void rope_and_cache(int l, int window, unsigned char* k_cache, cuda::KvCacheWriteParams& kw) {
    const bool local_rope = window > 0 && m_.local_inv_freq.get();  // Gemma 3's sliding layers
    cuda::RopeParams rp;
    rp.dtype = m_.dt, rp.q = qkv_at(0), rp.k = qkv_at(size_t(m_.num_heads));
    rp.positions = m_.dev<int32_t>(m_.lay.positions);
    rp.inv_freq = (local_rope ? m_.local_inv_freq : m_.inv_freq).as<float>();
    rp.cos_sin = (local_rope ? m_.local_rope_cache : m_.rope_cache).get();
    rp.cache_rows = m_.opt.max_model_len;
    rp.cos_sin_scale = local_rope ? 1.f : m_.rope_scale;
    rp.num_tokens = n_, rp.num_heads = m_.num_heads, rp.num_kv_heads = m_.num_kv_heads;
    rp.head_dim = m_.head_dim;
    rp.q_token_stride = rp.k_token_stride = m_.qkv_width;
    kw.dtype = m_.dt, kw.cache_dtype = m_.kv_dt;
    float* k_scale = is_fp8(m_.kv_dt) ? m_.kv_scales.as<float>() + 2 * l : nullptr;
    kw.k_scale = k_scale, kw.v_scale = k_scale ? k_scale + 1 : nullptr;
    kw.key = rp.k, kw.value = qkv_at(size_t(m_.num_heads + m_.num_kv_heads));
    kw.k_cache = k_cache, kw.v_cache = k_cache + layer_bytes();
    kw.slot_mapping = m_.dev<int64_t>(m_.lay.slots) + kv_group(l) * size_t(m_.max_tokens);
    kw.num_tokens = n_, kw.num_kv_heads = m_.num_kv_heads, kw.head_dim = m_.head_dim;
    kw.num_slots = int64_t(m_.num_blocks) * m_.opt.block_size;
    kw.key_token_stride = kw.value_token_stride = m_.qkv_width;
    if (m_.kv_scales_pending) {
      check(cuda::rope(rp, m_.stream), "rope");
      check(cuda::compute_kv_scales(kw, k_scale, k_scale + 1, m_.stream), "kv cache scales");
      check(cuda::write_kv_cache(kw, m_.stream), "kv cache write");
    } else {
      check(cuda::rope_and_write_kv_cache(rp, kw, m_.stream), "rope and kv cache write");
    }
  }

  size_t layer_bytes() const { return size_t(m_.num_blocks) * m_.block_bytes; }  // a layer's K
  // Layer l's group of the KV layout (hybrid layouts): its rows of slot mappings and block tables.
  size_t kv_group(int l) const { return size_t(m_.kv_layout.layer_group[size_t(l)]); }

  // The qkv projection, q / k norms, RoPE and the cache write, attention and the o projection
  // into x_proj (Gemma: normalised after the all-reduce, before the residual add).
  void attention(int l, const LayerWeights& w) {
    linear(m_.x_normed.get(), w.qkv, w.qkv_fp8, w.qkv_int, m_.x_qkv.get(), m_.qkv_width, m_.hidden,
           &w.qkv_bias, qkv_quantized_);
    if (m_.config.qk_norm) {  // the q heads and the k heads that follow them, in one launch
      const int heads = m_.num_heads + m_.num_kv_heads;
      cuda::RmsNormParams qk{m_.dt,      qkv_at(0),   nullptr, w.q_norm.get(), qkv_at(0),
                             n_ * heads, m_.head_dim, eps_,    heads,          m_.qkv_width};
      qk.second_weight = w.k_norm.get(), qk.second_rows_from = m_.num_heads;
      qk.unit_offset = gemma_;
      check(cuda::rms_norm(qk, m_.stream), "q / k norm");
    }
    const int window = int(m_.config.layer_window(m_.geo.layer_begin + l));
    unsigned char* k_cache = static_cast<unsigned char*>(pool_) +
                             size_t(m_.kv_layout.layer_slot[size_t(l)]) * 2 * layer_bytes();
    cuda::KvCacheWriteParams kw;
    rope_and_cache(l, window, k_cache, kw);
    // The step's shape as planned (planning_params), with this layer's buffers and the inputs.
    cuda::AttentionParams ap = m_.planning_params(n_, s_.num_seqs);
    ap.k_scale = kw.k_scale, ap.v_scale = kw.v_scale;
    ap.q = qkv_at(0), ap.k_cache = kw.k_cache, ap.v_cache = kw.v_cache;
    ap.query_start_loc = m_.dev<int32_t>(m_.lay.qsl);
    ap.seq_lens = m_.dev<int32_t>(m_.lay.seq_lens);
    ap.block_tables =
        m_.dev<int32_t>(m_.lay.tables) + kv_group(l) * size_t(m_.max_seqs) * size_t(m_.max_blocks);
    ap.scale =
        1.f / std::sqrt(gemma_ ? float(m_.config.gemma.query_pre_attn_scalar) : float(m_.head_dim));
    ap.window = window;
    check(cuda::run_attention(ap, s_.plan, m_.attn_ws.get(), m_.stream), "attention");
    linear(m_.x_attn.get(), w.o_proj, w.o_proj_fp8, w.o_proj_int, m_.x_proj.get(), m_.hidden,
           m_.num_heads * m_.head_dim, nullptr);
    if (gemma_) normalize_proj(w.attn_out_norm);
  }

  // The add + norm, gate/up, SiLU-and-mul (Gemma: GeLU-tanh) and down into x_proj. 16-bit, FP8
  // or INT weight-only at decode sizes take SiLU-and-mul in the gate/up GEMV's epilogue (W8A8-INT8
  // and an input the norm already quantized keep the two kernels).
  void dense_mlp(const LayerWeights& w) {
    const int inter = m_.inter;
    const bool gate_up_quantized = all_reduce_add_norm(
        w.post_norm, fused_fp8_input(w.gate_up, w.gate_up_fp8, m_.x_gate_up.get(), 2 * inter,
                                     m_.hidden, nullptr));
    const bool fusable = !gate_up_quantized && !w.gate_up_int.w8a8 && !gemma_;
    cudaError_t fused = cudaErrorNotSupported;
    bool down_quantized = false;
    if (fusable && w.gate_up_int.on()) {
      // INT weights never reach the 16-bit GEMV below; the fused kernel takes one row (trying it
      // for more would also gather act-order columns twice).
      if (n_ == 1)
        fused =
            cuda::int_linear_silu_and_mul(m_.gemm,
                                          int_params(m_.x_normed.get(), w.gate_up, w.gate_up_int,
                                                     m_.x_act.get(), 2 * inter, m_.hidden, nullptr),
                                          m_.stream);
    } else if (fusable && w.gate_up_fp8.on()) {
      fused =
          cuda::fp8_linear_silu_and_mul(m_.gemm,
                                        fp8_params(m_.x_normed.get(), w.gate_up, w.gate_up_fp8,
                                                   m_.x_act.get(), 2 * inter, m_.hidden, nullptr),
                                        m_.stream);
    } else if (fusable) {
      fused = cuda::gemm_silu_and_mul(
          m_.gemm,
          {m_.dt, m_.x_normed.get(), w.gate_up.get(), m_.x_act.get(), n_, 2 * inter, m_.hidden},
          m_.stream);
    }
    if (fused != cudaErrorNotSupported) {
      check(fused, "gate/up projection with silu_and_mul");
    } else {
      linear(m_.x_normed.get(), w.gate_up, w.gate_up_fp8, w.gate_up_int, m_.x_gate_up.get(),
             2 * inter, m_.hidden, nullptr, gate_up_quantized);
      down_quantized = silu_and_mul_for_down(w);
    }
    linear(m_.x_act.get(), w.down, w.down_fp8, w.down_int, m_.x_proj.get(), m_.hidden, inter,
           nullptr, down_quantized);
    if (gemma_) normalize_proj(w.mlp_out_norm);
  }

  // SiLU-and-mul (Gemma: GeLU-tanh) of x_gate_up into x_act, or, where the down projection takes
  // an FP8 input on the tensor cores, straight into its quantized input (kernels.h
  // SiluAndMulParams::fp8). Returns whether it did the latter.
  bool silu_and_mul_for_down(const LayerWeights& w) {
    cuda::SiluAndMulParams p{m_.dt, m_.x_gate_up.get(), m_.x_act.get(), n_, m_.inter, gemma_};
    p.fp8 = fused_fp8_input(w.down, w.down_fp8, m_.x_proj.get(), m_.hidden, m_.inter, nullptr);
    if (p.fp8.on() && cuda::silu_and_mul_fp8_valid(p))
      p.out = nullptr;
    else
      p.fp8 = {};
    check(cuda::silu_and_mul(p, m_.stream), "silu_and_mul");
    return p.fp8.on();
  }

  // The norm after layer l: the next layer's input norm, or the final norm at the end of the last
  // stage (an EAGLE head: the residual add alone, its rows as they are).
  void next_norm(int l, const LayerWeights& w) {
    if (l + 1 < m_.num_layers) {
      qkv_quantized_ =
          all_reduce_add_norm(m_.layers[size_t(l) + 1].input_norm, qkv_fp8_input(l + 1));
    } else if (m_.config.eagle) {
      // x_hidden += x_proj (the norm's residual add; its normed rows are dropped into x_proj).
      norm(m_.x_proj.get(), m_.x_hidden.get(), w.post_norm, m_.x_proj.get());
      check(cudaMemcpyAsync(m_.x_normed.get(), m_.x_hidden.get(), size_t(n_) * m_.hidden * m_.esz,
                            cudaMemcpyDeviceToDevice, m_.stream),
            "EAGLE output");
    } else if (m_.opt.shard.last_stage()) {
      all_reduce_add_norm(m_.final_norm);
    } else if (!proj_reduced_) {
      m_.all_reduce_proj(n_);  // sent on as two halves
    }
  }

  CudaRunner::Impl& m_;
  const CudaRunner::Impl::Staged& s_;
  void* pool_;
  const int n_;
  const float eps_;
  const bool gemma_;
  bool proj_reduced_ = false;   // x_proj already summed over the ranks (normalize_proj)
  bool qkv_quantized_ = false;  // the last norm wrote the next qkv projection's input as FP8
};

}  // namespace

// Enqueues the whole forward pass of a staged step on `stream` (graph-capturable: no sync, no
// allocation). Leaves the final-normed hidden states in x_normed.
void CudaRunner::Impl::forward(const Staged& s, void* pool) {
  const cuda::ProgrammaticLaunchScope pdl(step_wants_pdl(s.num_tokens));
  ForwardPass(*this, s, pool).run();
}

// The router GEMM, top-k routing on the device, every slot's expert gate/up (with the SiLU-and-mul)
// and down (reading only the experts the tokens picked), then each token's weighted sum of its
// slots into x_proj.
void CudaRunner::Impl::moe_mlp(const LayerWeights& w, int n) {
  const cuda::GemmParams router{dt, x_normed.get(), w.router.get(), x_router.get(),
                                n,  moe_experts,    hidden,         false};
  check(cuda::gemm(this->gemm, router, stream), "MoE router");
  cuda::MoeRouteParams r;
  r.dtype = dt, r.logits = x_router.get(), r.num_tokens = n, r.num_experts = moe_experts;
  r.top_k = moe_top_k, r.renormalize = config.moe.norm_topk_prob;
  r.ids = moe_ids.as<int32_t>(), r.weights = moe_weights.as<float>();
  check(cuda::moe_route(r, stream), "MoE routing");
  const int slots = n * moe_top_k;
  const int32_t* y_rows = nullptr;
  const MoePath path = moe_path(n, w.experts_gate_up_fp8.on());
  if (path == MoePath::kHost) {
    y_rows = moe_grouped(w, n);
  } else if (path == MoePath::kDevice) {
    y_rows = moe_device_grouped(w, n);
  } else {
    cuda::MoeLinearParams up;  // gate/up with the SiLU-and-mul: the activation of every slot
    up.dtype = dt, up.x = x_normed.get(), up.x_row_div = moe_top_k, up.gated = true;
    up.w = w.experts_gate_up.get(), up.ids = r.ids, up.y = x_moe_act.get(), up.num_slots = slots;
    up.w_scale = w.experts_gate_up_fp8.scale.as<float>();
    up.out_features = moe_inter, up.in_features = hidden;
    check(cuda::moe_linear(up, stream), "MoE gate/up");
    cuda::MoeLinearParams down = up;
    down.x = x_moe_act.get(), down.x_row_div = 1, down.gated = false, down.w = w.experts_down.get();
    down.w_scale = w.experts_down_fp8.scale.as<float>();
    down.y = x_moe_out.get(), down.out_features = hidden, down.in_features = moe_inter;
    check(cuda::moe_linear(down, stream), "MoE down");
  }
  cuda::MoeCombineParams sum;
  sum.dtype = dt, sum.y = x_moe_out.get(), sum.y_rows = y_rows, sum.weights = r.weights;
  sum.out = x_proj.get(), sum.num_tokens = n, sum.top_k = moe_top_k, sum.hidden = hidden;
  check(cuda::moe_combine(sum, stream), "MoE combine");
}

CudaRunner::Impl::MoePath CudaRunner::Impl::moe_path(int n, bool fp8) const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &capture), "querying stream capture");
  // The host-sorted pass runs 16-bit cuBLAS GEMMs: FP8 experts need the scratch they are
  // dequantized into (moe_w16) for it.
  const bool eager = capture == cudaStreamCaptureStatusNone && (!fp8 || moe_w16.get());
  const bool device = cuda::moe_grouped_linear_supported(dt, moe_inter, hidden, fp8) &&
                      cuda::moe_grouped_linear_supported(dt, hidden, moe_inter, fp8);
  if (moe_grouping_forced("slot")) return eager && n >= 16 ? MoePath::kHost : MoePath::kPerSlot;
  if (moe_grouping_forced("host") && eager && n > 1) return MoePath::kHost;
  if (moe_grouping_forced("device") && device) return MoePath::kDevice;
  if (eager && n >= kMoeHostMinTokens) return MoePath::kHost;
  return device && n >= kMoeDeviceMinTokens ? MoePath::kDevice : MoePath::kPerSlot;
}

// The slots sorted by expert on the device, then each projection as one grouped kernel; returns the
// slot -> row map the combine reads through.
const int32_t* CudaRunner::Impl::moe_device_grouped(const LayerWeights& w, int n) {
  const int slots = n * moe_top_k;
  int32_t* slot_of_row = moe_rows.as<int32_t>();  // then row_of_slot, then the groups
  int32_t* row_of_slot = slot_of_row + slots;
  int32_t* groups = row_of_slot + slots;
  const cuda::MoeSortParams sort{moe_ids.as<int32_t>(), slots,       moe_experts,
                                 slot_of_row,           row_of_slot, groups};
  check(cuda::moe_sort(sort, stream), "MoE sort");
  cuda::MoeGroupedLinearParams up;  // gate/up with the SiLU-and-mul, rows in sorted order
  up.dtype = dt, up.x = x_normed.get(), up.slot_of_row = slot_of_row, up.x_row_div = moe_top_k;
  up.gated = true, up.w = w.experts_gate_up.get(), up.groups = groups;
  up.w_scale = w.experts_gate_up_fp8.scale.as<float>();
  up.num_experts = moe_experts, up.num_rows = slots;
  up.max_groups = std::min(moe_experts, slots);
  up.y = x_moe_act.get(), up.out_features = moe_inter, up.in_features = hidden;
  check(cuda::moe_grouped_linear(up, stream), "MoE gate/up");
  cuda::MoeGroupedLinearParams down = up;
  down.x = x_moe_act.get(), down.slot_of_row = nullptr, down.x_row_div = 1, down.gated = false;
  down.w = w.experts_down.get(), down.w_scale = w.experts_down_fp8.scale.as<float>();
  down.y = x_moe_out.get();
  down.out_features = hidden, down.in_features = moe_inter;
  check(cuda::moe_grouped_linear(down, stream), "MoE down");
  return row_of_slot;
}

// An extra GEMM launch of the host-sorted pass in rows of the expert projections: ~8 us of launch
// and issue against a row's 6 * moe_inter * hidden FLOPs at ~500 TFLOP/s (H100 / H200).
double CudaRunner::Impl::moe_launch_rows() const {
  return 8e-6 * 500e12 / (6.0 * double(moe_inter) * double(hidden));
}

const int32_t* CudaRunner::Impl::moe_grouped(const LayerWeights& w, int n) {
  const size_t slots = size_t(n) * size_t(moe_top_k);
  check(cudaMemcpyAsync(moe_host, moe_ids.get(), slots * 4, cudaMemcpyDeviceToHost, stream),
        "downloading the MoE routing");
  check(cudaStreamSynchronize(stream), "routing the MoE layer");
  // With many experts in use, every expert gets a block of the height that costs the fewest GEMM
  // rows (moe_block_rows): one strided-batch GEMM per projection covers the blocks, and a GEMM per
  // busier expert its overflow. With few in use, the experts' rows follow each other, a GEMM per
  // expert: no launch pays for an empty block.
  cuda::MoeGroups g;
  int padded = 0;
  try {
    const std::span<const int32_t> ids(moe_host, slots);
    std::vector<int32_t> counts = cuda::moe_expert_counts(ids, moe_experts);
    const auto used = std::count_if(counts.begin(), counts.end(), [](int32_t c) { return c > 0; });
    if (used > kMoeFewExperts) padded = cuda::moe_block_rows(counts, moe_launch_rows());
    g = cuda::moe_group_slots(ids, moe_top_k, std::move(counts), padded);
  } catch (const std::out_of_range& e) {
    internal(e.what());
  }
  const size_t rows = g.token_of_row.size();
  int32_t* staged = moe_host + slots;
  std::copy(g.token_of_row.begin(), g.token_of_row.end(), staged);
  std::copy(g.row_of_slot.begin(), g.row_of_slot.end(), staged + rows);
  int32_t* dev_rows = moe_rows.as<int32_t>();
  check(cudaMemcpyAsync(dev_rows, staged, (rows + slots) * 4, cudaMemcpyHostToDevice, stream),
        "uploading the MoE rows");
  // x_moe_out holds the sorted input rows until the gate/up GEMMs have read them, then the
  // down projections' outputs (stream order).
  cuda::EmbeddingParams gather{dt, dev_rows, x_normed.get(), x_moe_out.get(), int(rows), hidden, n};
  check(cuda::embedding(gather, stream), "gathering the MoE rows");
  const int gate_up = 2 * moe_inter;
  // FP8 experts: each projection of every expert dequantized into moe_w16 first (its GEMMs are
  // ordered after the dequantization on the stream, and the next one after them).
  auto weights_of = [&](const DevMem& w16, const Fp8Scales& f, int out, int in) -> const DevMem& {
    if (!f.on()) return w16;
    check(cuda::dequantize_fp8_rows(dt, w16.get(), f.scale.as<float>(), int64_t(moe_experts) * out,
                                    in, moe_w16.get(), stream),
          "dequantizing FP8 experts");
    return moe_w16;
  };
  auto project = [&](const char* what, const void* x, const DevMem& weights, void* y, int out,
                     int in) {
    auto rows_of = [&](int e, int begin, int count) {  // expert e on rows [begin, begin + count)
      const cuda::GemmParams p{dt,
                               static_cast<const uint8_t*>(x) + size_t(begin) * in * esz,
                               weights.as<uint8_t>() + size_t(e) * out * in * esz,
                               static_cast<uint8_t*>(y) + size_t(begin) * out * esz,
                               count,
                               out,
                               in};
      check(cuda::gemm(this->gemm, p, stream), what);
    };
    if (padded > 0) {
      cuda::GemmParams p{dt, x, weights.get(), y, padded, out, in};
      p.batch = moe_experts;
      p.stride_x = int64_t(padded) * in, p.stride_w = int64_t(out) * in;
      p.stride_y = int64_t(padded) * out;
      check(cuda::gemm(this->gemm, p, stream), what);
      for (const cuda::MoeGroups::Overflow& o : g.overflow) rows_of(o.expert, o.begin, o.count);
      return;
    }
    for (int e = 0; e < moe_experts; ++e)
      if (g.expert_count[size_t(e)] > 0)
        rows_of(e, g.expert_begin[size_t(e)], g.expert_count[size_t(e)]);
  };
  project("MoE gate/up", x_moe_out.get(),
          weights_of(w.experts_gate_up, w.experts_gate_up_fp8, gate_up, hidden),
          x_moe_gate_up.get(), gate_up, hidden);
  check(
      cuda::silu_and_mul({dt, x_moe_gate_up.get(), x_moe_act.get(), int(rows), moe_inter}, stream),
      "MoE silu_and_mul");
  project("MoE down", x_moe_act.get(),
          weights_of(w.experts_down, w.experts_down_fp8, hidden, moe_inter), x_moe_out.get(),
          hidden, moe_inter);
  return dev_rows + rows;
}

void CudaRunner::Impl::stage_input(int n) {
  if (!opt.shard.first_stage()) {
    const int prev = (opt.shard.pp_rank - 1) * opt.shard.tp_size + opt.shard.tp_rank;
    opt.world->recv(x_hidden.get(), size_t(n) * hidden, dt, prev, stream);
    opt.world->recv(x_proj.get(), size_t(n) * hidden, dt, prev, stream);
    return;
  }
  // Vocab-parallel: ids outside the rank's rows give zero rows; the sum over ranks is exact.
  cuda::EmbeddingParams p{dt,
                          dev<int32_t>(lay.token_ids),
                          embed.get(),
                          x_hidden.get(),
                          n,
                          hidden,
                          int(geo.vocab),
                          int(geo.vocab_begin)};
  if (config.gemma.enabled) {  // sqrt(hidden) as transformers holds it: in the model dtype
    const float s = std::sqrt(float(config.hidden_size));
    p.scale = dt == DType::kBF16  ? bf16_to_f32(f32_to_bf16(s))
              : dt == DType::kF16 ? f16_to_f32(f32_to_f16(s))
                                  : s;
  }
  check(cuda::embedding(p, stream), "embedding");
  if (opt.shard.tp_size > 1) opt.tp->all_reduce_sum(x_hidden.get(), size_t(n) * hidden, dt, stream);
  if (config.eagle) eagle_input(n);
}

void CudaRunner::Impl::eagle_input(int n) {
  const size_t row = size_t(hidden) * esz;
  check(cudaMemcpy2DAsync(x_eagle_in.get(), 2 * row, x_hidden.get(), row, row, size_t(n),
                          cudaMemcpyDeviceToDevice, stream),
        "EAGLE input (embedding)");
  check(cudaMemcpy2DAsync(x_eagle_in.as<unsigned char>() + row, 2 * row, x_features.get(), row, row,
                          size_t(n), cudaMemcpyDeviceToDevice, stream),
        "EAGLE input (features)");
  const cuda::GemmParams p{dt,     x_eagle_in.get(), eagle_fc.get(), x_hidden.get(),     n,
                           hidden, 2 * hidden,       false,          eagle_fc_bias.get()};
  check(cuda::gemm(this->gemm, p, stream), "EAGLE fc");
}

void CudaRunner::Impl::all_reduce_proj(int n) {
  if (opt.shard.tp_size > 1) opt.tp->all_reduce_sum(x_proj.get(), size_t(n) * hidden, dt, stream);
}

}  // namespace pagellm::runner
