#include "io/hf_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace pagellm::io {

namespace {

using nlohmann::json;

// Upper bounds that keep every derived size (weights, KV cache, RoPE tables) far from int64
// overflow. They are generous for real checkpoints: the largest public models stay well inside
// them.
constexpr int64_t kMaxDim = int64_t{1} << 20;
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxPositions = int64_t{1} << 26;

// nlohmann messages are single-line already; this guards the one-line promise anyway.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

json parse_json_object(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    invalid_argument(source + ": invalid JSON: " + one_line(e.what()));
  }
  if (!j.is_object()) invalid_argument(source + ": expected a JSON object at the top level");
  return j;
}

// Readers for optional fields: a missing or null field yields the default; a present field of the
// wrong type is an error naming the field.
class FieldReader {
 public:
  FieldReader(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key, int64_t def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (v.is_number_integer()) return v.get<int64_t>();
    // Some exporters write integral values as floats (e.g. 128.0).
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
        return static_cast<int64_t>(d);
    }
    fail(key, "an integer");
  }

  double number(const char* key, double def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_number()) fail(key, "a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "a finite number");
    return d;
  }

  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j_.at(key).is_boolean()) fail(key, "true or false");
    return j_.at(key).get<bool>();
  }

  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    if (!j_.at(key).is_string()) fail(key, "a string");
    return j_.at(key).get<std::string>();
  }

  // eos_token_id: an int or a list of ints.
  std::vector<int64_t> id_list(const char* key) const {
    std::vector<int64_t> ids;
    if (!has(key)) return ids;
    const json& v = j_.at(key);
    auto take = [&](const json& e) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0)
        fail(key, "a non-negative integer or a list of them");
      ids.push_back(e.get<int64_t>());
    };
    if (v.is_array()) {
      for (const json& e : v) take(e);
    } else {
      take(v);
    }
    return ids;
  }

  [[noreturn]] void fail(const char* key, const char* expected) const {
    invalid_argument(source_ + ": field '" + key + "' must be " + expected);
  }

 private:
  const json& j_;
  const std::string& source_;
};

void check_range(const std::string& source, const char* field, int64_t value, int64_t lo,
                 int64_t hi) {
  if (value < lo || value > hi)
    invalid_argument(source + ": field '" + field + "' = " + std::to_string(value) +
                     " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

struct ArchInfo {
  const char* architecture;
  const char* model_type;
};
// clang-format off
constexpr ArchInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama"},
    {"MistralForCausalLM", "mistral"},
    {"Qwen2ForCausalLM", "qwen2"},
    {"Qwen3ForCausalLM", "qwen3"},
    {"Qwen3MoeForCausalLM", "qwen3_moe"},
    {"MixtralForCausalLM", "mixtral"},
    {"Phi3ForCausalLM", "phi3"},
    {"Gemma2ForCausalLM", "gemma2"},
    {"Gemma3ForCausalLM", "gemma3_text"},
};
// clang-format on

void read_architecture(const json& j, const FieldReader& f, const std::string& source,
                       ModelConfig& c) {
  std::string arch;
  if (j.contains("architectures") && !j.at("architectures").is_null()) {
    const json& a = j.at("architectures");
    if (!a.is_array() || a.empty() || !a.at(0).is_string())
      f.fail("architectures", "a non-empty list of strings");
    arch = a.at(0).get<std::string>();
  }
  const std::string model_type = f.string("model_type", "");
  for (const auto& info : kArchitectures) {
    if (arch == info.architecture || (arch.empty() && model_type == info.model_type)) {
      c.architecture = info.architecture;
      c.model_type = info.model_type;
      return;
    }
  }
  if (arch.empty() && model_type.empty())
    invalid_argument(source + ": neither 'architectures' nor 'model_type' is set");
  if (arch == "Gemma3ForConditionalGeneration" || (arch.empty() && model_type == "gemma3"))
    unsupported(source +
                ": field 'architectures': Gemma3ForConditionalGeneration (Gemma 3 with "
                "its vision tower) is not supported; the text-only Gemma3ForCausalLM is");
  unsupported(
      source + ": unsupported architecture '" + (arch.empty() ? model_type : arch) +
      "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
      "Qwen3MoeForCausalLM, MixtralForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, "
      "Gemma3ForCausalLM)");
}

// A list of head_dim / 2 positive factors.
std::vector<double> read_factors(const json& r, const FieldReader& rf, const char* key,
                                 int64_t count) {
  if (!rf.has(key) || !r.at(key).is_array() || int64_t(r.at(key).size()) != count)
    rf.fail(key, ("a list of head_dim / 2 = " + std::to_string(count) + " numbers").c_str());
  std::vector<double> out;
  for (const json& v : r.at(key)) {
    if (!v.is_number() || !(v.get<double>() > 0.0) || !std::isfinite(v.get<double>()))
      rf.fail(key, "a list of positive numbers");
    out.push_back(v.get<double>());
  }
  return out;
}

// Phi-3's longrope: both factor lists, the original context (in the rope object or, as Phi-3's
// config.json has it, at the top level) and the cos / sin scale transformers derives from
// max_position_embeddings / original_max_position_embeddings unless attention_factor is given.
void read_longrope(const json& j, const json& r, const FieldReader& rf, const std::string& rsource,
                   ModelConfig& c) {
  RopeScaling& s = c.rope_scaling;
  s.type = RopeScaling::Type::kLongRope;
  s.short_factor = read_factors(r, rf, "short_factor", c.head_dim / 2);
  s.long_factor = read_factors(r, rf, "long_factor", c.head_dim / 2);
  const FieldReader top(j, rsource);
  const int64_t original = rf.integer("original_max_position_embeddings",
                                      top.integer("original_max_position_embeddings", 0));
  check_range(rsource, "original_max_position_embeddings", original, 2, kMaxPositions);
  s.original_max_position_embeddings = original;
  const double factor = double(c.max_position_embeddings) / double(original);
  s.attention_factor = rf.has("attention_factor") ? rf.number("attention_factor", 1.0)
                       : factor <= 1.0
                           ? 1.0
                           : std::sqrt(1.0 + std::log(factor) / std::log(double(original)));
  if (!(s.attention_factor > 0.0)) rf.fail("attention_factor", "positive");
  s.use_long = c.max_position_embeddings > original;
}

// rope_scaling (transformers 4.x) or rope_parameters (5.x, which also carries rope_theta).
void read_rope(const json& j, const FieldReader& f, const std::string& source, ModelConfig& c) {
  c.rope_theta = f.number("rope_theta", c.model_type == "gemma3_text" ? 1000000.0 : 10000.0);
  const char* key = nullptr;
  for (const char* k : {"rope_scaling", "rope_parameters"})
    if (f.has(k)) key = k;
  if (key == nullptr) return;
  const json* rp = &j.at(key);
  if (!rp->is_object()) f.fail(key, "an object or null");
  std::string rsource = source + ": " + key;
  // transformers 5 writes Gemma 3's as one object per layer kind: the global layers' is the
  // model's rope (read_gemma takes the sliding layers' base).
  if (rp->contains("full_attention")) {
    rp = &rp->at("full_attention");
    rsource += ".full_attention";
    if (!rp->is_object()) f.fail(key, "an object of rope objects");
  }
  const json& r = *rp;
  FieldReader rf(r, rsource);
  if (rf.has("rope_theta")) c.rope_theta = rf.number("rope_theta", c.rope_theta);
  if (rf.number("partial_rotary_factor", 1.0) != 1.0)
    unsupported(rsource +
                ": partial_rotary_factor < 1 (rotating part of each head) is not supported");
  const std::string type = rf.string("rope_type", rf.string("type", "default"));
  RopeScaling& s = c.rope_scaling;
  if (type == "default") {
    s.type = RopeScaling::Type::kNone;
    return;
  }
  if (type == "longrope" || type == "su") {
    read_longrope(j, r, rf, rsource, c);
    return;
  }
  if (type != "linear" && type != "llama3")
    unsupported(rsource + ": rope type '" + type +
                "' is not supported (supported: default, linear, llama3, longrope)");
  s.factor = rf.number("factor", 1.0);
  if (!(s.factor > 0.0)) invalid_argument(rsource + ": field 'factor' must be positive");
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
    return;
  }
  s.type = RopeScaling::Type::kLlama3;
  s.low_freq_factor = rf.number("low_freq_factor", 1.0);
  s.high_freq_factor = rf.number("high_freq_factor", 4.0);
  s.original_max_position_embeddings = rf.integer("original_max_position_embeddings", 8192);
  if (!(s.low_freq_factor > 0.0) || !(s.high_freq_factor > s.low_freq_factor))
    invalid_argument(rsource + ": llama3 needs 0 < low_freq_factor < high_freq_factor");
  check_range(rsource, "original_max_position_embeddings", s.original_max_position_embeddings, 1,
              kMaxPositions);
}

// Which layers slide: config.json's layer_types (transformers 5) when present, else each family's
// rule: Gemma 2 every other layer from the first, Gemma 3 all but every sliding_window_pattern-th,
// Qwen2 / Qwen3 the layers from max_window_layers on, every layer for the others (Mistral).
std::vector<bool> sliding_layer_pattern(const json& j, const FieldReader& f,
                                        const std::string& source, const ModelConfig& c) {
  const auto n = static_cast<size_t>(c.num_hidden_layers);
  std::vector<bool> slides(n, true);
  if (f.has("layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array() || types.size() != n)
      f.fail("layer_types", "a list of num_hidden_layers layer kinds");
    for (size_t l = 0; l < n; ++l) {
      const json& t = types[l];
      if (!t.is_string() ||
          (t != "sliding_attention" && t != "full_attention" && t != "chunked_attention"))
        f.fail("layer_types", "a list of \"sliding_attention\" / \"full_attention\"");
      if (t == "chunked_attention")
        unsupported(source + ": field 'layer_types': chunked_attention is not supported");
      slides[l] = t == "sliding_attention";
    }
    return slides;
  }
  if (c.model_type == "gemma2") {
    for (size_t l = 0; l < n; ++l) slides[l] = l % 2 == 0;
  } else if (c.model_type == "gemma3_text") {
    const int64_t pattern = f.integer("sliding_window_pattern", 6);
    check_range(source, "sliding_window_pattern", pattern, 1, kMaxLayers);
    for (size_t l = 0; l < n; ++l) slides[l] = (int64_t(l) + 1) % pattern != 0;
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "qwen3_moe") {
    const int64_t first = f.integer("max_window_layers", 28);  // transformers' default
    check_range(source, "max_window_layers", first, 0, kMaxLayers);
    for (size_t l = 0; l < n; ++l) slides[l] = int64_t(l) >= first;
  }
  return slides;
}

// Gemma 2 / 3's fields, with transformers' defaults where config.json leaves them out (Gemma 2
// caps scores at 50 and logits at 30 unless told null; Gemma 3 caps neither).
void read_gemma(const json& j, const FieldReader& f, const std::string& source, ModelConfig& c) {
  GemmaConfig& g = c.gemma;
  const bool gemma2 = c.model_type == "gemma2";
  g.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256.0);
  if (!(g.query_pre_attn_scalar > 0.0)) f.fail("query_pre_attn_scalar", "positive");
  auto cap = [&](const char* key, double def) {
    if (!j.contains(key)) return def;
    const double v = f.number(key, 0.0);  // null: no cap
    if (v < 0.0) f.fail(key, "positive or null");
    return v;
  };
  if (f.boolean("use_bidirectional_attention", false))
    unsupported(source +
                ": field 'use_bidirectional_attention': bidirectional (embedding) Gemma "
                "models are not supported");
  g.attn_logit_softcapping = cap("attn_logit_softcapping", gemma2 ? 50.0 : 0.0);
  g.final_logit_softcapping = cap("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
  if (gemma2) return;
  g.local_rope_theta = f.number("rope_local_base_freq", 10000.0);
  if (f.has("rope_parameters") && j.at("rope_parameters").contains("sliding_attention")) {
    const json& local = j.at("rope_parameters").at("sliding_attention");
    const std::string lsource = source + ": rope_parameters.sliding_attention";
    if (!local.is_object()) f.fail("rope_parameters", "an object of rope objects");
    const FieldReader lf(local, lsource);
    if (lf.string("rope_type", "default") != "default")
      unsupported(lsource + ": only the default rope type is supported for sliding layers");
    g.local_rope_theta = lf.number("rope_theta", g.local_rope_theta);
  }
  if (!(g.local_rope_theta > 0.0)) f.fail("rope_local_base_freq", "positive");
}

// A window that can actually cut the context is recorded in c.sliding_window (the engine serves
// such a model up to the window, where full attention is the same attention).
void read_sliding_window(const json& j, const FieldReader& f, const std::string& source,
                         ModelConfig& c) {
  if (!f.has("sliding_window")) return;
  const int64_t window = f.integer("sliding_window", 0);
  const bool qwen =
      c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  bool sliding_layers = false;  // transformers 5 lists per-layer attention kinds
  if (f.has("layer_types") && j.at("layer_types").is_array())
    for (const json& t : j.at("layer_types"))
      sliding_layers |= t.is_string() && t.get<std::string>() == "sliding_attention";
  if (qwen && !f.boolean("use_sliding_window", false) && !sliding_layers) return;
  check_range(source, "sliding_window", window, 1, kMaxPositions);
  if (window >= c.max_position_embeddings) return;
  c.sliding_window = window;
  c.sliding_layer = sliding_layer_pattern(j, f, source, c);
  if (std::find(c.sliding_layer.begin(), c.sliding_layer.end(), true) == c.sliding_layer.end()) {
    c.sliding_window = 0;  // no layer slides (e.g. Qwen2 below max_window_layers)
    c.sliding_layer.clear();
  }
}

// The mixture-of-experts fields of Qwen3-MoE (num_experts, which transformers 5 writes as
// num_local_experts; moe_intermediate_size; norm_topk_prob; dense layers from decoder_sparse_step
// and mlp_only_layers) and Mixtral (num_local_experts; intermediate_size is each expert's; every
// layer sparse; top-k always renormalised).
void read_moe(const json& j, const FieldReader& f, const std::string& source, ModelConfig& c) {
  const bool qwen = c.model_type == "qwen3_moe";
  if (!qwen && c.model_type != "mixtral") return;
  MoeConfig& m = c.moe;
  m.num_experts = qwen && f.has("num_experts") ? f.integer("num_experts", 0)
                                               : f.integer("num_local_experts", qwen ? 0 : 8);
  m.top_k = f.integer("num_experts_per_tok", 2);
  m.intermediate_size = qwen ? f.integer("moe_intermediate_size", 0) : c.intermediate_size;
  m.norm_topk_prob = qwen ? f.boolean("norm_topk_prob", false) : true;
  check_range(source, qwen ? "num_experts" : "num_local_experts", m.num_experts, 1, 1024);
  check_range(source, "num_experts_per_tok", m.top_k, 1, m.num_experts);
  check_range(source, qwen ? "moe_intermediate_size" : "intermediate_size", m.intermediate_size, 1,
              kMaxDim);
  m.dense_layer.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (!qwen) return;
  const int64_t step = f.integer("decoder_sparse_step", 1);
  check_range(source, "decoder_sparse_step", step, 1, c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) m.dense_layer[size_t(l)] = (l + 1) % step != 0;
  if (!f.has("mlp_only_layers")) return;
  const json& only = j.at("mlp_only_layers");
  if (!only.is_array()) f.fail("mlp_only_layers", "a list of layer indices");
  for (const json& e : only) {
    if (!e.is_number_integer()) f.fail("mlp_only_layers", "a list of layer indices");
    check_range(source, "mlp_only_layers", e.get<int64_t>(), 0, c.num_hidden_layers - 1);
    m.dense_layer[size_t(e.get<int64_t>())] = true;
  }
}

void validate(const FieldReader& f, const std::string& source, const ModelConfig& c) {
  check_range(source, "vocab_size", c.vocab_size, 1, kMaxVocab);
  check_range(source, "hidden_size", c.hidden_size, 1, kMaxDim);
  check_range(source, "intermediate_size", c.intermediate_size, 1, kMaxDim);
  check_range(source, "num_hidden_layers", c.num_hidden_layers, 1, kMaxLayers);
  check_range(source, "num_attention_heads", c.num_attention_heads, 1, 4096);
  check_range(source, "num_key_value_heads", c.num_key_value_heads, 1, c.num_attention_heads);
  check_range(source, "head_dim", c.head_dim, 2, 4096);
  check_range(source, "max_position_embeddings", c.max_position_embeddings, 1, kMaxPositions);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    invalid_argument(source + ": num_attention_heads (" + std::to_string(c.num_attention_heads) +
                     ") is not a multiple of num_key_value_heads (" +
                     std::to_string(c.num_key_value_heads) + ")");
  if (c.head_dim % 2 != 0)
    invalid_argument(source + ": head_dim must be even for rotary embeddings");
  if (!(c.rms_norm_eps > 0.0)) invalid_argument(source + ": field 'rms_norm_eps' must be positive");
  if (!(c.rope_theta > 0.0)) invalid_argument(source + ": field 'rope_theta' must be positive");
  // Gemma's MLP is gelu-tanh (config.json's hidden_activation, older ones hidden_act).
  const bool gemma = c.gemma.enabled;
  const char* act_key = gemma && f.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string want = gemma ? "gelu_pytorch_tanh" : "silu";
  const std::string act = f.string(act_key, want);
  if (act != want)
    unsupported(source + ": " + act_key + " '" + act + "' is not supported for " + c.model_type +
                " (only " + want + ")");
  if (f.boolean("mlp_bias", false)) unsupported(source + ": mlp_bias = true is not supported");
  if (f.number("partial_rotary_factor", 1.0) != 1.0)
    unsupported(source +
                ": partial_rotary_factor < 1 (rotating part of each head) is not supported");
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size)
    invalid_argument(source + ": bos_token_id is outside the vocabulary");
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  const json j = parse_json_object(json_text, source);
  const FieldReader f(j, source);
  ModelConfig c;
  read_architecture(j, f, source, c);
  c.gemma.enabled = c.model_type == "gemma2" || c.model_type == "gemma3_text";
  c.vocab_size = f.integer("vocab_size", 0);
  c.hidden_size = f.integer("hidden_size", 0);
  c.intermediate_size = f.integer("intermediate_size", 0);
  c.num_hidden_layers = f.integer("num_hidden_layers", 0);
  c.num_attention_heads = f.integer("num_attention_heads", 0);
  c.num_key_value_heads = f.integer("num_key_value_heads", c.num_attention_heads);
  const int64_t default_head_dim =
      c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  c.head_dim = f.integer("head_dim", default_head_dim);
  c.max_position_embeddings = f.integer("max_position_embeddings", 2048);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  read_rope(j, f, source, c);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", c.gemma.enabled);
  // Qwen2 always has q/k/v biases; Llama and Qwen3 make them optional; Mistral has none.
  c.attention_bias = c.model_type == "qwen2" || f.boolean("attention_bias", false);
  c.qk_norm =
      c.model_type == "qwen3" || c.model_type == "qwen3_moe" || c.model_type == "gemma3_text";
  const std::string dtype_key = f.has("torch_dtype") ? "torch_dtype" : "dtype";
  const std::string dtype = f.string(dtype_key.c_str(), "float32");
  const auto parsed = dtype_from_torch_name(dtype);
  if (!parsed)
    unsupported(source + ": " + dtype_key + " '" + dtype +
                "' is not supported (float32, float16, bfloat16)");
  c.torch_dtype = *parsed;
  if (f.has("bos_token_id")) {
    c.bos_token_id = f.integer("bos_token_id", 0);
    if (*c.bos_token_id < 0) f.fail("bos_token_id", "a non-negative integer");
  }
  c.eos_token_ids = f.id_list("eos_token_id");
  if (c.num_attention_heads > 0 && c.hidden_size > 0 && !f.has("head_dim") &&
      c.hidden_size % c.num_attention_heads != 0)
    invalid_argument(
        source + ": hidden_size is not a multiple of num_attention_heads and head_dim is not set");
  validate(f, source, c);
  read_moe(j, f, source, c);
  if (c.gemma.enabled) read_gemma(j, f, source, c);
  read_sliding_window(j, f, source, c);
  if (j.contains("quantization_config") && !j["quantization_config"].is_null())
    c.quant = quant::parse_quant_config(j["quantization_config"], source);
  return c;
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& source) {
  const json j = parse_json_object(json_text, source);
  const FieldReader f(j, source);
  GenerationConfig g;
  if (f.has("bos_token_id")) g.bos_token_id = f.integer("bos_token_id", 0);
  g.eos_token_ids = f.id_list("eos_token_id");
  if (f.has("temperature")) g.temperature = f.number("temperature", 1.0);
  if (f.has("top_p")) g.top_p = f.number("top_p", 1.0);
  if (f.has("top_k")) g.top_k = f.integer("top_k", 0);
  if (f.has("min_p")) g.min_p = f.number("min_p", 0.0);
  if (f.has("repetition_penalty")) g.repetition_penalty = f.number("repetition_penalty", 1.0);
  if (f.has("max_new_tokens")) g.max_new_tokens = f.integer("max_new_tokens", 0);
  if (g.temperature && *g.temperature < 0) f.fail("temperature", "non-negative");
  if (g.top_p && !(*g.top_p > 0 && *g.top_p <= 1)) f.fail("top_p", "in (0, 1]");
  if (g.min_p && !(*g.min_p >= 0 && *g.min_p <= 1)) f.fail("min_p", "in [0, 1]");
  if (g.repetition_penalty && !(*g.repetition_penalty > 0))
    f.fail("repetition_penalty", "positive");
  if (g.max_new_tokens && *g.max_new_tokens < 1) f.fail("max_new_tokens", "positive");
  return g;
}

namespace {

// Reads a small JSON file completely; the size cap keeps a hostile "config" from eating memory.
std::string read_text_file(const std::filesystem::path& path) {
  constexpr uintmax_t kMaxConfigBytes = 64u << 20;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec)
    throw_error(ErrorKind::kNotFound, path.string() + ": cannot read file (" + ec.message() + ")");
  if (size > kMaxConfigBytes)
    invalid_argument(path.string() + ": file is too large for a config (" + std::to_string(size) +
                     " bytes)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::kNotFound, path.string() + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "config.json";
  if (!std::filesystem::is_directory(model_dir))
    throw_error(ErrorKind::kNotFound, model_dir.string() + ": model folder not found");
  if (!std::filesystem::exists(path))
    throw_error(ErrorKind::kNotFound, path.string() + ": file not found");
  return parse_model_config(read_text_file(path), path.string());
}

GenerationConfig load_generation_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return {};
  return parse_generation_config(read_text_file(path), path.string());
}

}  // namespace pagellm::io
