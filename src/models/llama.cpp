#include "models/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/error.h"
#include "common/thread_pool.h"
#include "quant/fp8_weights.h"
#include "quant/int_weights.h"
#include "quant/kv_cache_quant.h"

namespace pagellm::models {

void KvCache::FreeDeleter::operator()(float* p) const { std::free(p); }

KvCache::KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                 int64_t head_dim, const KvCacheQuant& quant, int64_t layer_begin,
                 kv::KvLayout layout)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim),
      layout_(layout.slots > 0 ? std::move(layout)
                               : kv::KvLayout::uniform(static_cast<int>(num_layers))) {
  if (layout_.num_layers() != num_layers)
    throw_error(ErrorKind::kInternal, "KV cache: the layout covers " +
                                          std::to_string(layout_.num_layers()) + " layers, not " +
                                          std::to_string(num_layers));
  if (quant.fp8) {
    fp8_ = quant::fp8_format(*quant.fp8);
    scales_.assign(static_cast<size_t>(2 * num_layers), 1.f);
    if (!quant.scales.empty()) {
      if (int64_t(quant.scales.size()) < 2 * (layer_begin + num_layers))
        throw_error(ErrorKind::kInternal, "KV cache: fewer FP8 scales than layers");
      std::copy_n(quant.scales.begin() + 2 * layer_begin, 2 * num_layers, scales_.begin());
    }
    if (quant.calculate_scales) pending_.assign(static_cast<size_t>(num_layers), 1);
  }
  const size_t count =
      static_cast<size_t>(layout_.slots * 2 * num_blocks * block_size * num_kv_heads * head_dim);
  data_.reset(static_cast<float*>(std::calloc(count, sizeof(float))));
  if (!data_)
    throw_error(
        ErrorKind::kResourceExhausted,
        "KV cache: cannot allocate " + std::to_string(count * sizeof(float) >> 20) + " MiB");
}

cpu::KvLayerView KvCache::slot(int64_t slot) {
  const int64_t per_tensor = num_blocks_ * block_size_ * num_kv_heads_ * head_dim_;
  float* base = data_.get() + slot * 2 * per_tensor;
  return cpu::KvLayerView{base, base + per_tensor, block_size_, num_kv_heads_, head_dim_};
}

cpu::KvLayerView KvCache::layer(int64_t index) {
  cpu::KvLayerView v = slot(layout_.layer_slot.at(static_cast<size_t>(index)));
  if (fp8_) {
    v.fp8 = true;
    v.fp8_format = *fp8_;
    v.k_scale = scales_[static_cast<size_t>(2 * index)];
    v.v_scale = scales_[static_cast<size_t>(2 * index + 1)];
  }
  return v;
}

void KvCache::calculate_scales(int64_t index, const float* k, const float* v, int64_t row_stride,
                               int64_t num_tokens) {
  if (!scales_pending(index) || num_tokens == 0) return;
  const int64_t width = num_kv_heads_ * head_dim_;
  float amax_k = 0.f, amax_v = 0.f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      amax_k = std::max(amax_k, std::fabs(k[t * row_stride + i]));
      amax_v = std::max(amax_v, std::fabs(v[t * row_stride + i]));
    }
  }
  scales_[static_cast<size_t>(2 * index)] = quant::kv_scale_from_amax(amax_k, *fp8_);
  scales_[static_cast<size_t>(2 * index + 1)] = quant::kv_scale_from_amax(amax_v, *fp8_);
  pending_[static_cast<size_t>(index)] = 0;
}

void KvCache::copy_block(int64_t src, int64_t dst) {
  const int64_t block_floats =
      block_size_ * num_kv_heads_ * head_dim_;  // [block_size, kv_heads, head_dim]
  for (int64_t l = 0; l < layout_.slots; ++l) {
    cpu::KvLayerView v = slot(l);
    std::memcpy(v.k + dst * block_floats, v.k + src * block_floats, block_floats * sizeof(float));
    std::memcpy(v.v + dst * block_floats, v.v + src * block_floats, block_floats * sizeof(float));
  }
}

LlamaModel::LlamaModel(io::ModelConfig config, LlamaWeights weights, ModelParallel par)
    : config_(std::move(config)),
      local_(parallel::local_config(config_, par.shard)),
      geo_(parallel::shard_geometry(config_, par.shard)),
      par_(par),
      w_(std::move(weights)) {
  if (par_.shard.tp_size > 1 && (par_.tp == nullptr || par_.tp->size() != par_.shard.tp_size))
    throw_error(ErrorKind::kInternal, "llama: tensor parallelism needs a communicator of its size");
  if (par_.shard.pp_size > 1 && par_.world == nullptr)
    throw_error(ErrorKind::kInternal, "llama: pipeline parallelism needs a world communicator");
  inv_freq_ = cpu::rope_inv_freq(config_.rope_scaling, config_.rope_theta, config_.head_dim);
  if (config_.gemma.local_rope_theta > 0.0)
    local_inv_freq_ = cpu::rope_inv_freq({}, config_.gemma.local_rope_theta, config_.head_dim);
  if (config_.gemma.enabled) {  // Gemma's RMSNorm scales by (1 + w), in fp32 as transformers does
    auto plus_one = [](std::vector<float>& w) {
      for (float& x : w) x += 1.0f;
    };
    plus_one(w_.final_norm);
    for (LlamaLayerWeights& lw : w_.layers)
      for (auto* v : {&lw.input_norm, &lw.post_norm, &lw.attn_out_norm, &lw.mlp_out_norm,
                      &lw.q_norm, &lw.k_norm})
        plus_one(*v);
  }
  const auto& c = local_;
  const int64_t hd = c.head_dim;
  const int64_t qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    LlamaLayerWeights& lw = w_.layers[l];
    PackedLayer& p = packed_.emplace_back();
    p.qkv = cpu::pack_matrix(lw.qkv.data(), qkv_width, c.hidden_size);
    p.o_proj = cpu::pack_matrix(lw.o_proj.data(), c.hidden_size, c.num_attention_heads * hd);
    if (config_.moe_layer(geo_.layer_begin + int64_t(l)))
      pack_experts(lw, p);
    else {
      p.gate_up = cpu::pack_matrix(lw.gate_up.data(), 2 * c.intermediate_size, c.hidden_size);
      p.down = cpu::pack_matrix(lw.down.data(), c.hidden_size, c.intermediate_size);
    }
    for (auto* v : {&lw.qkv, &lw.o_proj, &lw.gate_up, &lw.down, &lw.router, &lw.experts_gate_up,
                    &lw.experts_down})
      std::vector<float>().swap(*v);
  }
  if (config_.eagle) {
    if (par_.shard.tp_size != 1 || par_.shard.pp_size != 1)
      throw_error(ErrorKind::kInternal, "llama: an EAGLE head runs without parallelism");
    eagle_fc_ = cpu::pack_matrix(w_.eagle_fc.data(), c.hidden_size, 2 * c.hidden_size);
    std::vector<float>().swap(w_.eagle_fc);
  }
  if (!par_.shard.last_stage()) return;
  const std::vector<float>& head = w_.lm_head.empty() ? w_.embed : w_.lm_head;
  lm_head_ = cpu::pack_matrix(head.data(), geo_.vocab, c.hidden_size);
  std::vector<float>().swap(w_.lm_head);
}

namespace {

// Runs fn(begin, end) over token rows on the pool, in chunks of at least ~32k elements of work so
// small batches (single-stream decode) stay on the calling thread. Every row is processed by the
// same per-row code whatever the chunk, so splitting never changes a result.
template <typename Fn>
void parallel_rows(int64_t num_rows, int64_t work_per_row, Fn&& fn) {
  const int64_t min_rows = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, work_per_row));
  ThreadPool::global().parallel_for(
      static_cast<size_t>(num_rows),
      [&](size_t begin, size_t end) { fn(static_cast<int64_t>(begin), static_cast<int64_t>(end)); },
      static_cast<size_t>(min_rows));
}

}  // namespace

std::span<const float> LlamaModel::forward(const ForwardBatch& batch, KvCache& cache) {
  const auto& c = local_;
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t hd = c.head_dim;
  const int64_t qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  hidden_.resize(static_cast<size_t>(n * c.hidden_size));
  normed_.resize(hidden_.size());
  proj_.resize(hidden_.size());
  qkv_.resize(static_cast<size_t>(n * qkv_width));
  attn_.resize(static_cast<size_t>(n * c.num_attention_heads * hd));
  rope_cos_.resize(static_cast<size_t>(n * (hd / 2)));
  rope_sin_.resize(rope_cos_.size());
  if (!local_inv_freq_.empty()) {
    local_cos_.resize(rope_cos_.size());
    local_sin_.resize(rope_cos_.size());
  }
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t dim = c.hidden_size;
  stage_input(batch);
  parallel_rows(n, 4 * dim, [&](int64_t t0, int64_t t1) {
    // Positions are the same for every layer and for q and k: one rotary table per step.
    cpu::rope_tables(batch.positions.data() + t0, t1 - t0, hd, inv_freq_.data(),
                     rope_cos_.data() + t0 * (hd / 2), rope_sin_.data() + t0 * (hd / 2),
                     static_cast<float>(config_.rope_scaling.attention_factor));
    if (!local_inv_freq_.empty())
      cpu::rope_tables(batch.positions.data() + t0, t1 - t0, hd, local_inv_freq_.data(),
                       local_cos_.data() + t0 * (hd / 2), local_sin_.data() + t0 * (hd / 2));
    if (w_.layers[0].input_norm.empty())  // an EAGLE head's first layer
      std::copy_n(hidden_.data() + t0 * dim, (t1 - t0) * dim, normed_.data() + t0 * dim);
    else
      cpu::rms_norm(hidden_.data() + t0 * dim, w_.layers[0].input_norm.data(),
                    normed_.data() + t0 * dim, t1 - t0, dim, eps);
  });
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    attention_block(l, batch, cache);
    mlp_block(l, n);
  }
  if (!par_.shard.last_stage()) {
    const int next = (par_.shard.pp_rank + 1) * par_.shard.tp_size + par_.shard.tp_rank;
    par_.world->send(hidden_.data(), hidden_.size(), DType::kF32, next, nullptr);
  }
  return {hidden_.data(), hidden_.size()};
}

void LlamaModel::stage_input(const ForwardBatch& batch) {
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t dim = local_.hidden_size;
  if (!par_.shard.first_stage()) {
    const int prev = (par_.shard.pp_rank - 1) * par_.shard.tp_size + par_.shard.tp_rank;
    par_.world->recv(hidden_.data(), hidden_.size(), DType::kF32, prev, nullptr);
    return;
  }
  // Gemma scales the embedding by sqrt(hidden_size).
  const float scale = config_.gemma.enabled ? std::sqrt(static_cast<float>(dim)) : 1.0f;
  if (config_.eagle) {
    eagle_input(batch);
    return;
  }
  if (par_.shard.tp_size == 1) {
    parallel_rows(n, dim, [&](int64_t t0, int64_t t1) {
      float* out = hidden_.data() + t0 * dim;
      cpu::embedding(batch.token_ids.data() + t0, w_.embed.data(), out, t1 - t0, dim);
      if (scale != 1.0f)
        for (int64_t i = 0; i < (t1 - t0) * dim; ++i) out[i] *= scale;
    });
    return;
  }
  // Vocab-parallel: each token's row lives on exactly one rank, so the sum is exact.
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = batch.token_ids[size_t(t)] - geo_.vocab_begin;
    float* out = hidden_.data() + t * dim;
    if (id >= 0 && id < geo_.vocab)
      std::memcpy(out, w_.embed.data() + id * dim, size_t(dim) * sizeof(float));
    else
      std::fill_n(out, dim, 0.0f);
    if (scale != 1.0f)
      for (int64_t i = 0; i < dim; ++i) out[i] *= scale;
  }
  all_reduce(hidden_, n * dim);
}

void LlamaModel::eagle_input(const ForwardBatch& batch) {
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t dim = local_.hidden_size;
  if (batch.features.size() != static_cast<size_t>(n * dim))
    throw_error(ErrorKind::kInternal, "EAGLE head: " + std::to_string(batch.features.size()) +
                                          " feature values for " + std::to_string(n) + " tokens");
  eagle_in_.resize(static_cast<size_t>(n * 2 * dim));
  parallel_rows(n, 2 * dim, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = eagle_in_.data() + t * 2 * dim;
      cpu::embedding(batch.token_ids.data() + t, w_.embed.data(), row, 1, dim);
      std::copy_n(batch.features.data() + t * dim, dim, row + dim);
    }
  });
  cpu::matmul(eagle_in_.data(), eagle_fc_,
              w_.eagle_fc_bias.empty() ? nullptr : w_.eagle_fc_bias.data(), hidden_.data(), n);
}

// The inputs of FP8 projections (fp8: LlamaLayerWeights' flag) are quantized per token to e4m3
// and back (the GPU's dynamic activation quantization, W8A8), so the CPU computes what FP8 tensor
// cores compute; under W8A8-INT8 to int8 the same way. Weight-only schemes (W4A16, W8A16) and the
// 16-bit projections of an FP8 checkpoint leave activations alone.
void LlamaModel::quantize_activations(std::vector<float>& x, int64_t n, int64_t cols, bool fp8) {
  if (config_.quant.fp8()) {
    if (!fp8) return;
    parallel_rows(n, 8 * cols, [&](int64_t t0, int64_t t1) {
      quant::fake_quantize_rows(x.data() + t0 * cols, t1 - t0, cols);
    });
  } else if (config_.quant.int8_activations) {
    parallel_rows(n, 8 * cols, [&](int64_t t0, int64_t t1) {
      quant::fake_quantize_rows_int8(x.data() + t0 * cols, t1 - t0, cols);
    });
  }
}

void LlamaModel::all_reduce(std::vector<float>& x, int64_t num_floats) {
  if (par_.shard.tp_size > 1) par_.tp->all_reduce_sum(x.data(), size_t(num_floats), DType::kF32, nullptr);
}

// Expects normed_ = input_norm(hidden_) of this layer; leaves normed_ = post_norm(hidden_).
void LlamaModel::attention_block(int64_t layer, const ForwardBatch& batch, KvCache& cache) {
  const auto& c = local_;
  const LlamaLayerWeights& lw = w_.layers[static_cast<size_t>(layer)];
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t hd = c.head_dim, num_heads = c.num_attention_heads, num_kv = c.num_key_value_heads;
  const int64_t qkv_width = (num_heads + 2 * num_kv) * hd;
  const int64_t dim = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const PackedLayer& pw = packed_[static_cast<size_t>(layer)];
  const int64_t window = config_.layer_window(geo_.layer_begin + layer);
  quantize_activations(normed_, n, dim, lw.qkv_fp8);
  cpu::matmul(normed_.data(), pw.qkv, lw.qkv_bias.empty() ? nullptr : lw.qkv_bias.data(),
              qkv_.data(), n);
  // --calculate-kv-scales: the layer's first batch sets its scales before any of it is stored.
  const bool calculate = cache.scales_pending(layer);
  cpu::KvLayerView kv = cache.layer(layer);
  const std::span<const int64_t> slots = batch.group_slots(cache.group(layer));
  parallel_rows(n, 4 * qkv_width, [&](int64_t t0, int64_t t1) {
    float* q = qkv_.data() + t0 * qkv_width;  // [t1 - t0, qkv_width], q heads first
    float* k = q + num_heads * hd;            // same rows, after the q heads
    float* v = k + num_kv * hd;
    if (c.qk_norm) {
      for (int64_t t = 0; t < t1 - t0; ++t) {
        cpu::rms_norm(q + t * qkv_width, lw.q_norm.data(), q + t * qkv_width, num_heads, hd, eps);
        cpu::rms_norm(k + t * qkv_width, lw.k_norm.data(), k + t * qkv_width, num_kv, hd, eps);
      }
    }
    // q and k heads are adjacent in each row: one rotation pass covers both.
    const bool local = window > 0 && !local_inv_freq_.empty();
    cpu::apply_rope(q, qkv_width, (local ? local_cos_ : rope_cos_).data() + t0 * (hd / 2),
                    (local ? local_sin_ : rope_sin_).data() + t0 * (hd / 2), t1 - t0,
                    num_heads + num_kv, hd);
    // K/V of the new tokens go into the cache first, so attention reads every position the same
    // way.
    if (!calculate) cpu::write_kv(kv, k, v, qkv_width, slots.data() + t0, t1 - t0);
  });
  if (calculate) {
    const float* k = qkv_.data() + num_heads * hd;
    cache.calculate_scales(layer, k, k + num_kv * hd, qkv_width, n);
    kv = cache.layer(layer);
    cpu::write_kv(kv, k, k + num_kv * hd, qkv_width, slots.data(), n);
  }
  const io::GemmaConfig& gemma = config_.gemma;
  const double scale_base = gemma.enabled ? gemma.query_pre_attn_scalar : double(hd);
  cpu::paged_attention(kv, qkv_.data(), qkv_width, batch.group_seqs(cache.group(layer)), num_heads,
                       static_cast<float>(1.0 / std::sqrt(scale_base)), attn_.data(), window,
                       static_cast<float>(gemma.attn_logit_softcapping));
  quantize_activations(attn_, n, num_heads * hd, lw.o_proj_fp8);
  cpu::matmul(attn_.data(), pw.o_proj, nullptr, proj_.data(), n);
  all_reduce(proj_, n * dim);
  add_residual(n, lw.attn_out_norm, lw.post_norm.data());
}

void LlamaModel::add_residual(int64_t n, const std::vector<float>& out_norm,
                              const float* next_norm) {
  const int64_t dim = local_.hidden_size;
  const float eps = static_cast<float>(local_.rms_norm_eps);
  parallel_rows(n, 4 * dim, [&](int64_t t0, int64_t t1) {
    float* out = proj_.data() + t0 * dim;
    if (!out_norm.empty()) cpu::rms_norm(out, out_norm.data(), out, t1 - t0, dim, eps);
    cpu::add_inplace(hidden_.data() + t0 * dim, out, (t1 - t0) * dim);
    if (next_norm != nullptr)
      cpu::rms_norm(hidden_.data() + t0 * dim, next_norm, normed_.data() + t0 * dim, t1 - t0, dim,
                    eps);
  });
}

void LlamaModel::pack_experts(const LlamaLayerWeights& lw, PackedLayer& p) const {
  const auto& c = local_;
  const int64_t dim = c.hidden_size, inter = c.moe.intermediate_size;
  p.router = cpu::pack_matrix(lw.router.data(), c.moe.num_experts, dim);
  for (int64_t e = 0; e < c.moe.num_experts; ++e) {
    p.experts_gate_up.push_back(
        cpu::pack_matrix(lw.experts_gate_up.data() + e * 2 * inter * dim, 2 * inter, dim));
    p.experts_down.push_back(
        cpu::pack_matrix(lw.experts_down.data() + e * dim * inter, dim, inter));
  }
}

// Expects normed_ = post_norm(hidden_); leaves normed_ = the next layer's input_norm(hidden_).
void LlamaModel::mlp_block(int64_t layer, int64_t n) {
  const auto& c = local_;
  const PackedLayer& pw = packed_[static_cast<size_t>(layer)];
  const LlamaLayerWeights& lw = w_.layers[static_cast<size_t>(layer)];
  const int64_t dim = c.hidden_size, inter = c.intermediate_size;
  if (config_.moe_layer(geo_.layer_begin + layer)) {
    moe_mlp(layer, n);
  } else {  // sized here, so a model without dense MLPs never holds them
    gate_up_.resize(static_cast<size_t>(n * 2 * inter));
    act_.resize(static_cast<size_t>(n * inter));
    quantize_activations(normed_, n, dim, lw.gate_up_fp8);
    cpu::matmul(normed_.data(), pw.gate_up, nullptr, gate_up_.data(), n);
    const bool gelu = config_.gemma.enabled;
    parallel_rows(n, 8 * inter, [&](int64_t t0, int64_t t1) {
      (gelu ? cpu::gelu_tanh_mul : cpu::silu_mul)(gate_up_.data() + t0 * 2 * inter,
                                                  act_.data() + t0 * inter, t1 - t0, inter);
    });
    quantize_activations(act_, n, inter, lw.down_fp8);
    cpu::matmul(act_.data(), pw.down, nullptr, proj_.data(), n);
  }
  all_reduce(proj_, n * dim);
  const bool last = layer + 1 == c.num_hidden_layers;
  const float* next_norm = last ? nullptr : w_.layers[static_cast<size_t>(layer + 1)].input_norm.data();
  add_residual(n, w_.layers[static_cast<size_t>(layer)].mlp_out_norm, next_norm);
}

// Routes each token to its top-k experts, then runs each expert once over the rows routed to it
// (gathered), adding weight * output into the token's row in expert order, as transformers does.
// Only the experts some token picked are computed.
void LlamaModel::moe_mlp(int64_t layer, int64_t n) {
  const auto& c = local_;
  const PackedLayer& pw = packed_[static_cast<size_t>(layer)];
  const int64_t dim = c.hidden_size, inter = c.moe.intermediate_size;
  const int64_t num_experts = c.moe.num_experts, k = c.moe.top_k;
  router_logits_.resize(size_t(n * num_experts));
  topk_ids_.resize(size_t(n * k));
  topk_weights_.resize(size_t(n * k));
  cpu::matmul(normed_.data(), pw.router, nullptr, router_logits_.data(), n);
  cpu::moe_route(router_logits_.data(), n, num_experts, k, c.moe.norm_topk_prob, topk_ids_.data(),
                 topk_weights_.data());
  // Counting sort of the (token, slot) pairs by expert, tokens ascending within an expert.
  std::vector<int64_t>&begin = moe_begin_, &order = moe_order_, &next = moe_next_;  // reused
  begin.assign(size_t(num_experts + 1), 0);
  order.resize(size_t(n * k));
  for (int32_t e : topk_ids_) ++begin[size_t(e) + 1];
  for (int64_t e = 0; e < num_experts; ++e) begin[size_t(e + 1)] += begin[size_t(e)];
  next.assign(begin.begin(), begin.end() - 1);
  for (int64_t i = 0; i < n * k; ++i) order[size_t(next[size_t(topk_ids_[size_t(i)])]++)] = i;
  std::fill_n(proj_.begin(), n * dim, 0.0f);
  for (int64_t e = 0; e < num_experts; ++e) {
    const int64_t first = begin[size_t(e)], rows = begin[size_t(e + 1)] - first;
    if (rows == 0) continue;
    expert_in_.resize(size_t(rows * dim));
    expert_gate_up_.resize(size_t(rows * 2 * inter));
    expert_act_.resize(size_t(rows * inter));
    expert_out_.resize(size_t(rows * dim));
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(normed_.data() + (order[size_t(first + r)] / k) * dim, dim,
                  expert_in_.data() + r * dim);
    cpu::matmul(expert_in_.data(), pw.experts_gate_up[size_t(e)], nullptr, expert_gate_up_.data(),
                rows);
    cpu::silu_mul(expert_gate_up_.data(), expert_act_.data(), rows, inter);
    cpu::matmul(expert_act_.data(), pw.experts_down[size_t(e)], nullptr, expert_out_.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t slot = order[size_t(first + r)];
      const float w = topk_weights_[size_t(slot)];
      float* out = proj_.data() + (slot / k) * dim;
      const float* y = expert_out_.data() + r * dim;
      for (int64_t i = 0; i < dim; ++i) out[i] += y[i] * w;
    }
  }
}

void LlamaModel::final_norm_rows(std::span<const float> hidden, std::span<const int64_t> rows,
                                 float* out) const {
  const int64_t dim = config_.hidden_size;
  if (w_.final_norm.empty()) {  // an EAGLE head: its output goes to the LM head as it is
    for (size_t r = 0; r < rows.size(); ++r)
      std::copy_n(hidden.data() + rows[r] * dim, dim, out + int64_t(r) * dim);
    return;
  }
  for (size_t r = 0; r < rows.size(); ++r)
    cpu::rms_norm(hidden.data() + rows[r] * dim, w_.final_norm.data(), out + int64_t(r) * dim, 1,
                  dim, static_cast<float>(config_.rms_norm_eps));
}

void LlamaModel::compute_logits(std::span<const float> hidden, std::span<const int64_t> rows,
                                float* logits) {
  if (!par_.shard.last_stage())
    throw_error(ErrorKind::kInternal, "llama: logits asked of a stage that is not the last");
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  logits_normed_.resize(static_cast<size_t>(num_rows * config_.hidden_size));
  final_norm_rows(hidden, rows, logits_normed_.data());
  const int tp = par_.shard.tp_size;
  if (tp == 1) {
    cpu::matmul(logits_normed_.data(), lm_head_, nullptr, logits, num_rows);
    soft_cap_logits(logits, num_rows * config_.vocab_size);
    return;
  }
  // Each rank computes its vocabulary columns; the padded shards are gathered and laid side by
  // side.
  const int64_t shard = geo_.vocab_shard, vocab = config_.vocab_size;
  shard_logits_.assign(size_t(num_rows * shard), 0.0f);
  std::vector<float> local(size_t(num_rows * geo_.vocab));
  cpu::matmul(logits_normed_.data(), lm_head_, nullptr, local.data(), num_rows);
  for (int64_t r = 0; r < num_rows; ++r)
    std::copy_n(local.data() + r * geo_.vocab, geo_.vocab, shard_logits_.data() + r * shard);
  gathered_logits_.resize(size_t(tp) * shard_logits_.size());
  par_.tp->all_gather(shard_logits_.data(), gathered_logits_.data(), shard_logits_.size(),
                      DType::kF32, nullptr);
  for (int t = 0; t < tp; ++t) {
    const int64_t begin = t * shard, count = std::max<int64_t>(0, std::min(vocab, begin + shard) - begin);
    for (int64_t r = 0; r < num_rows; ++r)
      std::copy_n(gathered_logits_.data() + (t * num_rows + r) * shard, count,
                  logits + r * vocab + begin);
  }
  soft_cap_logits(logits, num_rows * vocab);
}

void LlamaModel::soft_cap_logits(float* logits, int64_t count) const {
  const float cap = static_cast<float>(config_.gemma.final_logit_softcapping);
  if (cap > 0.0f)
    for (int64_t i = 0; i < count; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

}  // namespace pagellm::models
