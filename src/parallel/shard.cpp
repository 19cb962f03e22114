#include "parallel/shard.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace pagellm::parallel {

void check_parallel_config(const io::ModelConfig& c, int tp, int pp) {
  auto fail = [&](const std::string& what) { invalid_argument(what); };
  if (tp < 1) fail("--tensor-parallel-size must be at least 1, got " + std::to_string(tp));
  if (pp < 1) fail("--pipeline-parallel-size must be at least 1, got " + std::to_string(pp));
  const std::string tps = "--tensor-parallel-size " + std::to_string(tp);
  if (c.num_attention_heads % tp != 0)
    fail(tps + ": config.json num_attention_heads (" + std::to_string(c.num_attention_heads) +
         ") is not divisible by it");
  if (c.num_key_value_heads % tp != 0 && tp % c.num_key_value_heads != 0)
    fail(tps + ": config.json num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
         ") neither divides nor is divisible by it");
  if (c.intermediate_size % tp != 0)
    fail(tps + ": config.json intermediate_size (" + std::to_string(c.intermediate_size) +
         ") is not divisible by it");
  if (c.is_moe() && c.moe.intermediate_size % tp != 0)
    fail(tps + ": config.json's expert intermediate size (" +
         std::to_string(c.moe.intermediate_size) + ") is not divisible by it");
  if (c.vocab_size < tp)
    fail(tps + ": config.json vocab_size (" + std::to_string(c.vocab_size) +
         ") has fewer rows than ranks");
  if (c.num_hidden_layers < pp)
    fail("--pipeline-parallel-size " + std::to_string(pp) + ": config.json num_hidden_layers (" +
         std::to_string(c.num_hidden_layers) + ") has fewer layers than stages");
}

ShardGeometry shard_geometry(const io::ModelConfig& c, const ShardSpec& s) {
  ShardGeometry g;
  const int64_t tp = s.tp_size, r = s.tp_rank;
  g.num_q_heads = c.num_attention_heads / tp;
  g.q_head_begin = r * g.num_q_heads;
  if (c.num_key_value_heads >= tp) {
    g.num_kv_heads = c.num_key_value_heads / tp;
    g.kv_head_begin = r * g.num_kv_heads;
  } else {
    // Replicated: ranks r .. r + tp/kv - 1 share KV head r / (tp / kv), the head their q heads
    // read under GQA.
    g.num_kv_heads = 1;
    g.kv_head_begin = r / (tp / c.num_key_value_heads);
  }
  g.inter = c.intermediate_size / tp;
  g.inter_begin = r * g.inter;
  g.moe_inter = c.moe.intermediate_size / tp;
  g.moe_inter_begin = r * g.moe_inter;
  g.vocab_shard = (c.vocab_size + tp - 1) / tp;
  g.vocab_begin = std::min(c.vocab_size, r * g.vocab_shard);
  g.vocab = std::min(c.vocab_size, g.vocab_begin + g.vocab_shard) - g.vocab_begin;
  // Layers split as evenly as possible, earlier stages taking the remainder.
  const int64_t L = c.num_hidden_layers, pp = s.pp_size, base = L / pp, extra = L % pp;
  g.layer_begin = s.pp_rank * base + std::min<int64_t>(s.pp_rank, extra);
  g.layer_end = g.layer_begin + base + (s.pp_rank < extra ? 1 : 0);
  return g;
}

io::ModelConfig local_config(const io::ModelConfig& config, const ShardSpec& spec) {
  const ShardGeometry g = shard_geometry(config, spec);
  io::ModelConfig c = config;
  c.num_attention_heads = g.num_q_heads;
  c.num_key_value_heads = g.num_kv_heads;
  c.intermediate_size = g.inter;
  c.moe.intermediate_size = g.moe_inter;
  c.num_hidden_layers = g.num_layers();
  return c;
}

}  // namespace pagellm::parallel
