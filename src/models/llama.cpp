#include "models/llama.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/error.h"
#include "common/thread_pool.h"

namespace pagellm::models {

void KvCache::FreeDeleter::operator()(float* p) const { std::free(p); }

KvCache::KvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
                 int64_t head_dim)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim) {
  const size_t count =
      static_cast<size_t>(num_layers * 2 * num_blocks * block_size * num_kv_heads * head_dim);
  data_.reset(static_cast<float*>(std::calloc(count, sizeof(float))));
  if (!data_)
    throw_error(
        ErrorKind::kResourceExhausted,
        "KV cache: cannot allocate " + std::to_string(count * sizeof(float) >> 20) + " MiB");
}

cpu::KvLayerView KvCache::layer(int64_t index) {
  const int64_t per_tensor = num_blocks_ * block_size_ * num_kv_heads_ * head_dim_;
  float* base = data_.get() + index * 2 * per_tensor;
  return {base, base + per_tensor, block_size_, num_kv_heads_, head_dim_};
}

void KvCache::copy_block(int64_t src, int64_t dst) {
  const int64_t block_floats =
      block_size_ * num_kv_heads_ * head_dim_;  // [block_size, kv_heads, head_dim]
  for (int64_t l = 0; l < num_layers_; ++l) {
    cpu::KvLayerView v = layer(l);
    std::memcpy(v.k + dst * block_floats, v.k + src * block_floats, block_floats * sizeof(float));
    std::memcpy(v.v + dst * block_floats, v.v + src * block_floats, block_floats * sizeof(float));
  }
}

LlamaModel::LlamaModel(io::ModelConfig config, LlamaWeights weights)
    : config_(std::move(config)), w_(std::move(weights)) {
  inv_freq_ = cpu::rope_inv_freq(config_.rope_scaling, config_.rope_theta, config_.head_dim);
  const auto& c = config_;
  const int64_t hd = c.head_dim;
  const int64_t qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  for (LlamaLayerWeights& lw : w_.layers) {
    PackedLayer& p = packed_.emplace_back();
    p.qkv = cpu::pack_matrix(lw.qkv.data(), qkv_width, c.hidden_size);
    p.o_proj = cpu::pack_matrix(lw.o_proj.data(), c.hidden_size, c.num_attention_heads * hd);
    p.gate_up = cpu::pack_matrix(lw.gate_up.data(), 2 * c.intermediate_size, c.hidden_size);
    p.down = cpu::pack_matrix(lw.down.data(), c.hidden_size, c.intermediate_size);
    for (auto* v : {&lw.qkv, &lw.o_proj, &lw.gate_up, &lw.down}) std::vector<float>().swap(*v);
  }
  const std::vector<float>& head = w_.lm_head.empty() ? w_.embed : w_.lm_head;
  lm_head_ = cpu::pack_matrix(head.data(), c.vocab_size, c.hidden_size);
  std::vector<float>().swap(w_.lm_head);
}

std::span<const float> LlamaModel::forward(const ForwardBatch& batch, KvCache& cache) {
  const auto& c = config_;
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t hd = c.head_dim;
  const int64_t qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  hidden_.resize(static_cast<size_t>(n * c.hidden_size));
  normed_.resize(hidden_.size());
  proj_.resize(hidden_.size());
  qkv_.resize(static_cast<size_t>(n * qkv_width));
  attn_.resize(static_cast<size_t>(n * c.num_attention_heads * hd));
  gate_up_.resize(static_cast<size_t>(n * 2 * c.intermediate_size));
  act_.resize(static_cast<size_t>(n * c.intermediate_size));
  rope_cos_.resize(static_cast<size_t>(n * (hd / 2)));
  rope_sin_.resize(rope_cos_.size());
  // Positions are the same for every layer and for q and k: one table per step.
  cpu::rope_tables(batch.positions.data(), n, hd, inv_freq_.data(), rope_cos_.data(),
                   rope_sin_.data());
  cpu::embedding(batch.token_ids.data(), w_.embed.data(), hidden_.data(), n, c.hidden_size);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    attention_block(l, batch, cache);
    mlp_block(l, n);
  }
  return {hidden_.data(), hidden_.size()};
}

void LlamaModel::attention_block(int64_t layer, const ForwardBatch& batch, KvCache& cache) {
  const auto& c = config_;
  const LlamaLayerWeights& lw = w_.layers[static_cast<size_t>(layer)];
  const int64_t n = static_cast<int64_t>(batch.token_ids.size());
  const int64_t hd = c.head_dim, num_heads = c.num_attention_heads, num_kv = c.num_key_value_heads;
  const int64_t qkv_width = (num_heads + 2 * num_kv) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  cpu::rms_norm(hidden_.data(), lw.input_norm.data(), normed_.data(), n, c.hidden_size, eps);
  const PackedLayer& pw = packed_[static_cast<size_t>(layer)];
  cpu::matmul(normed_.data(), pw.qkv, lw.qkv_bias.empty() ? nullptr : lw.qkv_bias.data(),
              qkv_.data(), n);
  float* q = qkv_.data();         // [n, qkv_width], q heads first
  float* k = q + num_heads * hd;  // same rows, after the q heads
  float* v = k + num_kv * hd;
  if (c.qk_norm) {
    for (int64_t t = 0; t < n; ++t) {
      cpu::rms_norm(q + t * qkv_width, lw.q_norm.data(), q + t * qkv_width, num_heads, hd, eps);
      cpu::rms_norm(k + t * qkv_width, lw.k_norm.data(), k + t * qkv_width, num_kv, hd, eps);
    }
  }
  // q and k heads are adjacent in each row: one rotation pass covers both.
  cpu::apply_rope(q, qkv_width, rope_cos_.data(), rope_sin_.data(), n, num_heads + num_kv, hd);
  const cpu::KvLayerView kv = cache.layer(layer);
  // K/V of the new tokens go into the cache first, so attention reads every position the same way.
  cpu::write_kv(kv, k, v, qkv_width, batch.slot_mapping.data(), n);
  cpu::paged_attention(kv, q, qkv_width, batch.seqs, num_heads,
                       1.0f / std::sqrt(static_cast<float>(hd)), attn_.data());
  cpu::matmul(attn_.data(), pw.o_proj, nullptr, proj_.data(), n);
  cpu::add_inplace(hidden_.data(), proj_.data(), n * c.hidden_size);
}

void LlamaModel::mlp_block(int64_t layer, int64_t n) {
  const auto& c = config_;
  const LlamaLayerWeights& lw = w_.layers[static_cast<size_t>(layer)];
  cpu::rms_norm(hidden_.data(), lw.post_norm.data(), normed_.data(), n, c.hidden_size,
                static_cast<float>(c.rms_norm_eps));
  const PackedLayer& pw = packed_[static_cast<size_t>(layer)];
  cpu::matmul(normed_.data(), pw.gate_up, nullptr, gate_up_.data(), n);
  cpu::silu_mul(gate_up_.data(), act_.data(), n, c.intermediate_size);
  cpu::matmul(act_.data(), pw.down, nullptr, proj_.data(), n);
  cpu::add_inplace(hidden_.data(), proj_.data(), n * c.hidden_size);
}

void LlamaModel::compute_logits(std::span<const float> hidden, std::span<const int64_t> rows,
                                float* logits) {
  const int64_t dim = config_.hidden_size;
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  logits_normed_.resize(static_cast<size_t>(num_rows * dim));
  for (int64_t r = 0; r < num_rows; ++r)
    cpu::rms_norm(hidden.data() + rows[r] * dim, w_.final_norm.data(),
                  logits_normed_.data() + r * dim, 1, dim,
                  static_cast<float>(config_.rms_norm_eps));
  cpu::matmul(logits_normed_.data(), lm_head_, nullptr, logits, num_rows);
}

}  // namespace pagellm::models
