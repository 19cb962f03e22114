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
  cpu::matmul(normed_.data(), lw.qkv.data(), lw.qkv_bias.empty() ? nullptr : lw.qkv_bias.data(),
              qkv_.data(), n, c.hidden_size, qkv_width);
  float* q = qkv_.data();         // [n, qkv_width], q heads first
  float* k = q + num_heads * hd;  // same rows, after the q heads
  float* v = k + num_kv * hd;
  if (c.qk_norm) {
    for (int64_t t = 0; t < n; ++t) {
      cpu::rms_norm(q + t * qkv_width, lw.q_norm.data(), q + t * qkv_width, num_heads, hd, eps);
      cpu::rms_norm(k + t * qkv_width, lw.k_norm.data(), k + t * qkv_width, num_kv, hd, eps);
    }
  }
  cpu::apply_rope(q, qkv_width, batch.positions.data(), n, num_heads, hd, inv_freq_.data());
  cpu::apply_rope(k, qkv_width, batch.positions.data(), n, num_kv, hd, inv_freq_.data());
  const cpu::KvLayerView kv = cache.layer(layer);
  // K/V of the new tokens go into the cache first, so attention reads every position the same way.
  cpu::write_kv(kv, k, v, qkv_width, batch.slot_mapping.data(), n);
  cpu::paged_attention(kv, q, qkv_width, batch.seqs, num_heads,
                       1.0f / std::sqrt(static_cast<float>(hd)), attn_.data());
  cpu::matmul(attn_.data(), lw.o_proj.data(), nullptr, proj_.data(), n, num_heads * hd,
              c.hidden_size);
  cpu::add_inplace(hidden_.data(), proj_.data(), n * c.hidden_size);
}

void LlamaModel::mlp_block(int64_t layer, int64_t n) {
  const auto& c = config_;
  const LlamaLayerWeights& lw = w_.layers[static_cast<size_t>(layer)];
  cpu::rms_norm(hidden_.data(), lw.post_norm.data(), normed_.data(), n, c.hidden_size,
                static_cast<float>(c.rms_norm_eps));
  cpu::matmul(normed_.data(), lw.gate_up.data(), nullptr, gate_up_.data(), n, c.hidden_size,
              2 * c.intermediate_size);
  cpu::silu_mul(gate_up_.data(), act_.data(), n, c.intermediate_size);
  cpu::matmul(act_.data(), lw.down.data(), nullptr, proj_.data(), n, c.intermediate_size,
              c.hidden_size);
  cpu::add_inplace(hidden_.data(), proj_.data(), n * c.hidden_size);
}

void LlamaModel::compute_logits(std::span<const float> hidden, std::span<const int64_t> rows,
                                float* logits) {
  const int64_t dim = config_.hidden_size;
  const int64_t num_rows = static_cast<int64_t>(rows.size());
  std::vector<float> normed(static_cast<size_t>(num_rows * dim));  // [num_rows, hidden]
  for (int64_t r = 0; r < num_rows; ++r)
    cpu::rms_norm(hidden.data() + rows[r] * dim, w_.final_norm.data(), normed.data() + r * dim, 1,
                  dim, static_cast<float>(config_.rms_norm_eps));
  const float* head = w_.lm_head.empty() ? w_.embed.data() : w_.lm_head.data();
  cpu::matmul(normed.data(), head, nullptr, logits, num_rows, dim, config_.vocab_size);
}

}  // namespace pagellm::models
