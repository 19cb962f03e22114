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

// Enqueues the whole forward pass of a staged step on `stream` (graph-capturable: no sync, no
// allocation). Leaves the final-normed hidden states in x_normed.
void CudaRunner::Impl::forward(const Staged& s, void* pool) {
  const int n = s.num_tokens;
  const cuda::ProgrammaticLaunchScope pdl(step_wants_pdl(n));
  const float eps = float(config.rms_norm_eps);
  const bool gemma = config.gemma.enabled;
  const size_t layer_bytes = size_t(num_blocks) * block_bytes;  // one layer's K (or V)
  auto at = [&](const DevMem& m, size_t elems) { return m.as<unsigned char>() + elems * esz; };
  // With q on, the normed rows go only to q (the next FP8 projection's quantized input).
  auto norm = [&](const void* x, void* residual, const DevMem& w, void* out,
                  const cuda::Fp8Out& q = {}) {
    cuda::RmsNormParams p{dt, x, residual, w.get(), q.on() ? nullptr : out, n, hidden, eps};
    p.fp8 = q;
    p.unit_offset = gemma;
    check(cuda::rms_norm(p, stream), "rms_norm");
  };
  auto fp8_params = [&](const void* x, const DevMem& w, const Fp8Scales& f, void* y,
                        int out_features, int in_features, const void* b) {
    cuda::Fp8LinearParams p;
    p.dtype = dt, p.x = x, p.wq = w.get(), p.w_scale = f.scale.as<float>(), p.y = y, p.bias = b;
    p.m = n, p.n = out_features, p.k = in_features, p.w_block = f.block;
    p.xq_work = fp8_xq.get(), p.x_scale_work = fp8_xscale.as<float>();
    return p;
  };
  auto bias_of = [](const DevMem* bias) { return bias && bias->get() ? bias->get() : nullptr; };
  // Where RMSNorm, writing an FP8 projection's input, quantizes it for the projection
  // (gemm/fp8_gemm.h x_quantized): on the tensor-core path; off, fp8_linear does.
  auto fused_fp8_input = [&](const DevMem& w, const Fp8Scales& f, void* y, int out_features,
                             int in_features, const DevMem* bias) -> cuda::Fp8Out {
    if (!f.on() ||
        !cuda::fp8_linear_quantizes_x(
            this->gemm, fp8_params(nullptr, w, f, y, out_features, in_features, bias_of(bias))))
      return {};
    return {fp8_xq.get(), fp8_xscale.as<float>(), f.block};
  };
  // A projection: 16-bit through cuBLASLt, or FP8 (gemm/fp8_gemm.h) when the layer has scales;
  // x_quantized: its FP8 input is already in the scratch (fused_fp8_input).
  auto gemm = [&](const void* x, const DevMem& w, const Fp8Scales& f, const IntScales& iq, void* y,
                  int out_features, int in_features, const DevMem* bias, bool x_quantized = false) {
    const void* b = bias_of(bias);
    if (iq.w8a8) {
      cuda::Int8LinearParams p;
      p.dtype = dt, p.x = x, p.wq = w.as<int8_t>(), p.w_scale = iq.scale.as<float>(), p.y = y;
      p.bias = b, p.m = n, p.n = out_features, p.k = in_features;
      p.xq_work = int8_xq.as<int8_t>(), p.x_scale_work = int8_xscale.as<float>();
      p.acc_work = int8_acc.as<int32_t>(),
      p.acc_rows = int(std::min<int64_t>(max_tokens, kInt8AccRows));
      check(cuda::int8_linear(this->gemm, p, stream), "int8 linear");
      return;
    }
    if (iq.on()) {
      if (iq.perm.get()) {
        check(cuda::int_gather_columns(dt, x, iq.perm.as<int32_t>(), int_x_perm.get(), n,
                                       in_features, stream),
              "act-order gather");
        x = int_x_perm.get();
      }
      cuda::IntLinearParams p;
      p.dtype = dt, p.bits = iq.bits, p.x = x, p.wq = w.get(), p.scale = iq.scale.get();
      p.zero = iq.zero.as<uint8_t>(), p.y = y, p.bias = b;
      p.m = n, p.n = out_features, p.k = in_features, p.group_size = iq.group_size;
      p.w_work = int_w_work.get();
      check(cuda::int_linear(this->gemm, p, stream), "int linear");
      return;
    }
    if (f.on()) {
      cuda::Fp8LinearParams p = fp8_params(x, w, f, y, out_features, in_features, b);
      p.x_quantized = x_quantized;
      check(cuda::fp8_linear(this->gemm, p, stream), "fp8 linear");
      return;
    }
    cuda::GemmParams p{dt, x, w.get(), y, n, out_features, in_features, false, b};
    check(cuda::gemm(this->gemm, p, stream), "gemm");
  };
  // x_proj's all-reduce over the tensor-parallel ranks, then x_hidden += x_proj and x_normed =
  // RMSNorm(x_hidden): one fused kernel where the communicator has one (the one-shot NVLink
  // all-reduce), else the all-reduce and the fused add + norm.
  // Returns whether the norm wrote q (see norm). Gemma's x_proj is already reduced (proj_reduced:
  // normalize_proj below).
  bool proj_reduced = false;
  auto all_reduce_add_norm = [&](const DevMem& w_norm, const cuda::Fp8Out& q = {}) {
    if (opt.shard.tp_size > 1 && !gemma &&
        opt.tp->all_reduce_add_rms_norm(x_proj.get(), x_hidden.get(), w_norm.get(), x_normed.get(),
                                        n, hidden, eps, dt, stream))
      return false;
    if (!proj_reduced) all_reduce_proj(n);
    proj_reduced = false;
    norm(x_proj.get(), x_hidden.get(), w_norm, x_normed.get(), q);
    return q.on();
  };
  // Gemma's output norms: x_proj = RMSNorm(x_proj summed over the ranks), in place; the add +
  // norm after it then has nothing left to reduce.
  auto normalize_proj = [&](const DevMem& w_norm) {
    all_reduce_proj(n);
    proj_reduced = true;
    norm(x_proj.get(), nullptr, w_norm, x_proj.get());
  };
  // The FP8 input of layer l's qkv projection, for the norm before it.
  auto qkv_fp8_input = [&](int l) {
    const LayerWeights& w = layers[size_t(l)];
    return fused_fp8_input(w.qkv, w.qkv_fp8, x_qkv.get(), qkv_width, hidden, &w.qkv_bias);
  };
  bool qkv_quantized = false;  // the input norm wrote layer l's qkv input as FP8
  stage_input(n);
  for (int l = 0; l < num_layers; ++l) {
    const LayerWeights& w = layers[size_t(l)];
    // Later layers' input norm was fused into the previous layer's last all-reduce.
    if (l == 0 && config.eagle) {  // an EAGLE head's first layer takes fc's output as it is
      check(cudaMemcpyAsync(x_normed.get(), x_hidden.get(), size_t(n) * hidden * esz,
                            cudaMemcpyDeviceToDevice, stream),
            "EAGLE layer 0 input");
    } else if (l == 0) {
      const cuda::Fp8Out q = qkv_fp8_input(0);
      norm(opt.shard.first_stage() ? x_hidden.get() : x_proj.get(),
           opt.shard.first_stage() ? nullptr : x_hidden.get(), w.input_norm, x_normed.get(), q);
      qkv_quantized = q.on();
    }
    gemm(x_normed.get(), w.qkv, w.qkv_fp8, w.qkv_int, x_qkv.get(), qkv_width, hidden, &w.qkv_bias,
         qkv_quantized);
    void* q = x_qkv.get();
    void* k = at(x_qkv, size_t(num_heads) * head_dim);
    void* v = at(x_qkv, size_t(num_heads + num_kv_heads) * head_dim);
    if (config.qk_norm) {  // the q heads and the k heads that follow them, in one launch
      const int heads = num_heads + num_kv_heads;
      cuda::RmsNormParams qk{dt,        q,        nullptr, w.q_norm.get(), q,
                             n * heads, head_dim, eps,     heads,          qkv_width};
      qk.second_weight = w.k_norm.get(), qk.second_rows_from = num_heads;
      qk.unit_offset = gemma;
      check(cuda::rms_norm(qk, stream), "q / k norm");
    }
    // Gemma 3's sliding layers rotate with their own base.
    const int window = int(config.layer_window(geo.layer_begin + l));
    const bool local_rope = window > 0 && local_inv_freq.get();
    cuda::RopeParams rp;
    rp.dtype = dt;
    rp.q = q;
    rp.k = k;
    rp.positions = dev<int32_t>(lay.positions);
    rp.inv_freq = (local_rope ? local_inv_freq : inv_freq).as<float>();
    rp.cos_sin = (local_rope ? local_rope_cache : rope_cache).get();
    rp.cache_rows = opt.max_model_len;
    rp.cos_sin_scale = local_rope ? 1.f : rope_scale;
    rp.num_tokens = n;
    rp.num_heads = num_heads;
    rp.num_kv_heads = num_kv_heads;
    rp.head_dim = head_dim;
    rp.q_token_stride = rp.k_token_stride = qkv_width;
    const size_t group = size_t(kv_layout.layer_group[size_t(l)]);
    unsigned char* k_cache = static_cast<unsigned char*>(pool) +
                             size_t(kv_layout.layer_slot[size_t(l)]) * 2 * layer_bytes;
    unsigned char* v_cache = k_cache + layer_bytes;
    cuda::KvCacheWriteParams kw;
    kw.dtype = dt;
    kw.cache_dtype = kv_dt;
    float* k_scale = is_fp8(kv_dt) ? kv_scales.as<float>() + 2 * l : nullptr;
    kw.k_scale = k_scale;
    kw.v_scale = k_scale ? k_scale + 1 : nullptr;
    kw.key = k;
    kw.value = v;
    kw.k_cache = k_cache;
    kw.v_cache = v_cache;
    kw.slot_mapping = dev<int64_t>(lay.slots) + group * size_t(max_tokens);
    kw.num_tokens = n;
    kw.num_kv_heads = num_kv_heads;
    kw.head_dim = head_dim;
    kw.num_slots = int64_t(num_blocks) * opt.block_size;
    kw.key_token_stride = kw.value_token_stride = qkv_width;
    if (kv_scales_pending) {  // the scales come from the rotated keys, before the write
      check(cuda::rope(rp, stream), "rope");
      check(cuda::compute_kv_scales(kw, k_scale, k_scale + 1, stream), "kv cache scales");
      check(cuda::write_kv_cache(kw, stream), "kv cache write");
    } else {
      check(cuda::rope_and_write_kv_cache(rp, kw, stream), "rope and kv cache write");
    }
    // The step's shape as planned (planning_params), with this layer's buffers and the step inputs.
    cuda::AttentionParams ap = planning_params(n, s.num_seqs);
    ap.k_scale = kw.k_scale;
    ap.v_scale = kw.v_scale;
    ap.q = q;
    ap.k_cache = k_cache;
    ap.v_cache = v_cache;
    ap.query_start_loc = dev<int32_t>(lay.qsl);
    ap.seq_lens = dev<int32_t>(lay.seq_lens);
    ap.block_tables = dev<int32_t>(lay.tables) + group * size_t(max_seqs) * size_t(max_blocks);
    ap.scale = 1.f / std::sqrt(gemma ? float(config.gemma.query_pre_attn_scalar) : float(head_dim));
    ap.window = window;
    check(cuda::run_attention(ap, s.plan, attn_ws.get(), stream), "attention");
    gemm(x_attn.get(), w.o_proj, w.o_proj_fp8, w.o_proj_int, x_proj.get(), hidden,
         num_heads * head_dim, nullptr);
    // Gemma normalises the attention output (after the all-reduce) before the residual add.
    if (gemma) normalize_proj(w.attn_out_norm);
    if (config.moe_layer(geo.layer_begin + l)) {
      all_reduce_add_norm(w.post_norm);
      moe_mlp(w, n);
    } else {
      const bool gate_up_quantized = all_reduce_add_norm(
          w.post_norm,
          fused_fp8_input(w.gate_up, w.gate_up_fp8, x_gate_up.get(), 2 * inter, hidden, nullptr));
      // 16-bit or FP8 weights at decode sizes: SiLU-and-mul in the gate/up GEMV's epilogue.
      // (INT weights and an input the norm already quantized keep the two kernels.)
      const bool fusable =
          !gate_up_quantized && !w.gate_up_int.on() && !w.gate_up_int.w8a8 && !gemma;
      cudaError_t fused = cudaErrorNotSupported;
      if (fusable && w.gate_up_fp8.on()) {
        fused = cuda::fp8_linear_silu_and_mul(this->gemm,
                                              fp8_params(x_normed.get(), w.gate_up, w.gate_up_fp8,
                                                         x_act.get(), 2 * inter, hidden, nullptr),
                                              stream);
      } else if (fusable) {
        fused = cuda::gemm_silu_and_mul(
            this->gemm, {dt, x_normed.get(), w.gate_up.get(), x_act.get(), n, 2 * inter, hidden},
            stream);
      }
      if (fused != cudaErrorNotSupported) {
        check(fused, "gate/up projection with silu_and_mul");
      } else {
        gemm(x_normed.get(), w.gate_up, w.gate_up_fp8, w.gate_up_int, x_gate_up.get(), 2 * inter,
             hidden, nullptr, gate_up_quantized);
        // SiLU-and-mul leaves the down projection's quantization to fp8_linear: fused, one block
        // per row (for the row's scale) ran no faster than the two kernels (docs/PERF.md).
        check(cuda::silu_and_mul({dt, x_gate_up.get(), x_act.get(), n, inter, gemma}, stream),
              "silu_and_mul");
      }
      gemm(x_act.get(), w.down, w.down_fp8, w.down_int, x_proj.get(), hidden, inter, nullptr);
      if (gemma) normalize_proj(w.mlp_out_norm);
    }
    // The next norm: the next layer's input norm, or the final norm at the end of the last stage.
    if (l + 1 < num_layers) {
      qkv_quantized = all_reduce_add_norm(layers[size_t(l) + 1].input_norm, qkv_fp8_input(l + 1));
    } else if (config.eagle) {
      // No final norm: x_hidden += x_proj (the norm's residual add; its normed rows are dropped
      // into x_proj), then the rows as they are.
      norm(x_proj.get(), x_hidden.get(), w.post_norm, x_proj.get());
      check(cudaMemcpyAsync(x_normed.get(), x_hidden.get(), size_t(n) * hidden * esz,
                            cudaMemcpyDeviceToDevice, stream),
            "EAGLE output");
    } else if (opt.shard.last_stage())
      all_reduce_add_norm(final_norm);
    else if (!proj_reduced)
      all_reduce_proj(n);  // sent on as two halves below
  }
  if (opt.shard.last_stage()) return;
  // The last residual add is fused into the next stage's first norm: send both halves.
  const int next = (opt.shard.pp_rank + 1) * opt.shard.tp_size + opt.shard.tp_rank;
  opt.world->send(x_hidden.get(), size_t(n) * hidden, dt, next, stream);
  opt.world->send(x_proj.get(), size_t(n) * hidden, dt, next, stream);
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
