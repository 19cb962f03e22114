// End-to-end checks and first performance numbers of the CUDA runner, run on the GPU machine:
//   cuda_runner_check MODELS_DIR [--skip-perf] [--fp8] [--int4] [--int8] [--kv-fp8]
//   (--fp8: also decode with FP8 weights; --kv-fp8: 64 x 4k decode with bf16 vs FP8 KV caches)
// 1. stories260K in fp32 on the GPU: 256 greedy tokens equal the CPU runner's (which reproduces
//    llama2.c), with CUDA graphs and without; seeded sampling of 8 seqs x 64 steps through
//    execute() (the GPU sampler) gives the CPU runner's tokens and logprobs.
// 2. A random tiny model with every optional path (bias, q/k norm, GQA, untied head, llama3 RoPE),
//    head_dim 16 and 64: fp32 GPU logits match the CPU runner's over chunked prefill + batched
//    decode; bf16/f16 obey the top-5 logprob-closeness rule, also with FP8 KV caches on both.
//    The same for tiny Qwen3-MoE, Mixtral, Phi-3, Gemma 2 and Gemma 3 models in fp32 and bf16.
// 3. Llama-3.1-8B shapes with dummy bf16 weights: decode tokens/s at batch 1/16/64, next to the
//    device-to-device copy bandwidth measured in the same process (the HBM roofline).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "../unit/cpu_test_util.h"
#include "../unit/model_files_util.h"
#include "backends/cuda/kernels.h"
#include "engine/sampler.h"
#include "io/safetensors.h"
#include "models/llama.h"
#include "quant/quant_config.h"
#include "runner/cuda_runner.h"
#include "runner/model_loader.h"
#include "runner_check.h"

namespace pagellm {

io::ModelConfig llama31_8b() {
  io::ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = io::RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.torch_dtype = DType::kBF16;
  return c;
}

namespace {

template <typename Runner>
std::vector<int32_t> greedy(Runner& r, std::vector<int32_t> prompt, int n, int blocks_per_seq) {
  testing::TestSeq seq(0, blocks_per_seq, std::move(prompt));
  std::vector<int32_t> out;
  while (int(out.size()) < n) {
    const auto logits = r.execute_logits(testing::make_batch({seq.schedule()}));
    seq.num_computed = int32_t(seq.tokens.size());
    const int32_t next = testing::argmax(logits[0]);
    out.push_back(next);
    seq.tokens.push_back(next);
  }
  return out;
}

std::string readme_sample(const std::filesystem::path& dir) {
  std::ifstream in(dir / "README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  const auto b = s.find("```\nOnce upon a time");
  const auto e = s.find("\n```", b + 4);
  return b == std::string::npos || e == std::string::npos ? "" : s.substr(b + 4, e - b - 4);
}

// Seeded sampling through execute(): 8 seqs decoded together for 64 steps with T 0.8, top-p 0.9,
// top-k 40 and 5 logprobs (odd seqs also with repetition and presence penalties, seq 0 with prompt
// logprobs). Returns every step's output per seq.
struct SampledRun {
  std::vector<std::vector<int32_t>> tokens;          // [seq][step]
  std::vector<std::vector<TokenLogprobs>> logprobs;  // [seq][step]
  std::vector<TokenLogprobs> prompt_logprobs;        // seq 0
};

template <typename Runner>
SampledRun sample_batch(Runner& r) {
  constexpr int kSeqs = 8, kSteps = 64;
  std::vector<SamplingParams> params(kSeqs);
  std::vector<testing::TestSeq> seqs;
  std::vector<std::vector<int32_t>> prompts;
  SampledRun run;
  run.tokens.resize(kSeqs);
  run.logprobs.resize(kSeqs);
  for (int s = 0; s < kSeqs; ++s) {
    params[size_t(s)].temperature = 0.8f;
    params[size_t(s)].top_p = 0.9f;
    params[size_t(s)].top_k = 40;
    params[size_t(s)].logprobs = 5;
    if (s % 2) {
      params[size_t(s)].repetition_penalty = 1.1f;
      params[size_t(s)].presence_penalty = 0.2f;
    }
    seqs.emplace_back(s, 6, std::vector<int32_t>{1, int32_t(50 + 7 * s), int32_t(300 + s)});
    prompts.push_back(seqs.back().tokens);
  }
  for (int step = 0; step < kSteps; ++step) {
    std::vector<engine::ScheduledSeq> sch;
    for (int s = 0; s < kSeqs; ++s) {
      engine::ScheduledSeq x = seqs[size_t(s)].schedule();
      x.params = &params[size_t(s)];
      x.seed = 1000 + uint64_t(s);
      x.prompt_token_ids = prompts[size_t(s)];
      x.output_token_ids = run.tokens[size_t(s)];
      x.prompt_logprobs = s == 0 ? 3 : 0;
      sch.push_back(x);
    }
    engine::ModelRunnerOutput out = r.execute(testing::make_batch(sch));
    for (int s = 0; s < kSeqs; ++s) {
      testing::TestSeq& seq = seqs[size_t(s)];
      seq.num_computed = int32_t(seq.tokens.size());
      const int32_t tok = out.sampled_token_ids[size_t(s)];
      run.tokens[size_t(s)].push_back(tok);
      run.logprobs[size_t(s)].push_back(out.sampled_logprobs[size_t(s)].value_or(TokenLogprobs{}));
      seq.tokens.push_back(tok);
    }
    for (TokenLogprobs& lp : out.prompt_logprobs[0]) run.prompt_logprobs.push_back(std::move(lp));
  }
  return run;
}

// Same tokens everywhere, logprobs within 1e-4, same top-N ids.
bool same_run(const SampledRun& a, const SampledRun& b, std::string& detail) {
  size_t equal = 0, total = 0, bad_lp = 0;
  auto close = [](const TokenLogprobs& x, const TokenLogprobs& y) {
    if (x.token_id != y.token_id || x.top.size() != y.top.size()) return false;
    if (std::fabs(x.logprob - y.logprob) > 1e-4f) return false;
    for (size_t i = 0; i < x.top.size(); ++i)
      if (x.top[i].first != y.top[i].first || std::fabs(x.top[i].second - y.top[i].second) > 1e-4f)
        return false;
    return true;
  };
  for (size_t s = 0; s < a.tokens.size(); ++s)
    for (size_t i = 0; i < a.tokens[s].size(); ++i) {
      ++total;
      equal += a.tokens[s][i] == b.tokens[s][i];
      bad_lp += !close(a.logprobs[s][i], b.logprobs[s][i]);
    }
  size_t bad_prompt = a.prompt_logprobs.size() != b.prompt_logprobs.size();
  for (size_t i = 0; !bad_prompt && i < a.prompt_logprobs.size(); ++i)
    bad_prompt += !close(a.prompt_logprobs[i], b.prompt_logprobs[i]);
  detail = std::to_string(equal) + "/" + std::to_string(total) + " sampled tokens equal, " +
           std::to_string(bad_lp) + " logprob mismatches, " +
           std::to_string(a.prompt_logprobs.size()) + " prompt logprobs " +
           (bad_prompt ? "DIFFER" : "equal");
  return equal == total && bad_lp == 0 && !bad_prompt;
}

void check_stories(const std::filesystem::path& dir) {
  std::printf("== stories260K fp32 (GPU vs CPU runner vs llama2.c)\n");
  EngineArgs args;
  args.model = dir.string();
  args.device = "cpu";  // the oracle
  args.num_kv_blocks = 64;
  auto cpu = runner::load_model(args);
  auto& cpu_runner = dynamic_cast<runner::CpuRunner&>(*cpu.runner);
  const auto cpu_ids = greedy(cpu_runner, {1}, 256, 17);
  const SampledRun cpu_sampled = sample_batch(cpu_runner);
  const io::WeightStore store = io::WeightStore::open(dir);
  for (bool eager : {false, true}) {
    runner::CudaRunnerOptions o;
    o.dtype = DType::kF32;
    o.num_kv_blocks = 64;
    o.max_num_seqs = 8;
    o.max_num_batched_tokens = 512;
    o.enforce_eager = eager;
    runner::CudaRunner gpu(cpu.config, &store, o);
    const auto ids = greedy(gpu, {1}, 256, 17);
    size_t same = 0;
    while (same < ids.size() && ids[same] == cpu_ids[same]) ++same;
    report(same == ids.size(), std::string(eager ? "eager" : "graphs") + ": " +
                                   std::to_string(same) +
                                   "/256 greedy tokens equal the CPU runner's");
    {
      // execute() with greedy params samples on the GPU: same tokens, and logprobs equal to the
      // CPU sampler's on the downloaded logits.
      SamplingParams sp;
      sp.temperature = 0.f;
      testing::TestSeq seq(1, 17, {1});
      std::vector<int32_t> gpu_ids;
      double max_lp_err = 0;
      for (int i = 0; i < 64; ++i) {
        auto sch = seq.schedule();
        sch.params = &sp;
        sch.block_tables[0] =
            std::span<const int32_t>(seq.block_table.data(), seq.block_table.size());
        const auto batch = testing::make_batch({sch});
        const auto out = gpu.execute(batch);
        const std::vector<float> row =
            gpu.execute_logits(batch)[0];  // recompute: same inputs, same KV
        const TokenLogprobs ref = engine::compute_logprobs(row, out.sampled_token_ids[0], 0);
        max_lp_err =
            std::max(max_lp_err, double(std::fabs(ref.logprob - out.sampled_logprobs[0]->logprob)));
        seq.num_computed = int32_t(seq.tokens.size());
        gpu_ids.push_back(out.sampled_token_ids[0]);
        seq.tokens.push_back(out.sampled_token_ids[0]);
      }
      const bool same = std::equal(gpu_ids.begin(), gpu_ids.end(), ids.begin());
      report(same && max_lp_err < 1e-4,
             std::string(eager ? "eager" : "graphs") + ": GPU greedy sampling: 64 tokens " +
                 (same ? "equal" : "DIFFER") + ", max logprob error " + std::to_string(max_lp_err));
    }
    for (bool uniform : {false, true}) {
      auto spec_cpu = runner::load_model(args);
      runner::CudaRunnerOptions so = o;
      so.max_num_seqs = 64;  // 8 padded seqs x 4 tokens of logits rows
      runner::CudaRunner spec_gpu(cpu.config, &store, so);
      check_spec_verify(*spec_cpu.runner, spec_gpu, uniform, eager ? "eager" : "graphs");
      // 5 seqs x 2 catch-up tokens take the graph shape (8, 2): 16 logits rows.
      if (uniform) check_greedy_chains(*spec_cpu.runner, spec_gpu, eager ? "eager" : "graphs");
    }
    {
      std::string detail;
      const bool ok = same_run(cpu_sampled, sample_batch(gpu), detail);
      report(ok, std::string(eager ? "eager" : "graphs") +
                     ": seeded sampling (T 0.8, top-p 0.9, top-k 40, 5 logprobs), 8 seqs x 64 "
                     "steps vs the CPU runner: " +
                     detail);
    }
    const std::string text = testing::decode_with_vocab(dir / "tokenizer.json", ids);
    report(text == readme_sample(dir),
           std::string(eager ? "eager" : "graphs") + ": text equals llama2.c's published sample");
  }
}

// Writes dir's checkpoint converted on the host (common/dtype.h) to `dtype` as
// out/model.safetensors, with the data section at an odd file offset so that every tensor is
// misaligned in the mapping.
void write_converted_copy(const std::filesystem::path& dir, DType dtype,
                          const std::filesystem::path& out) {
  const io::WeightStore store = io::WeightStore::open(dir);
  testing::SafetensorsBuilder b;
  for (const std::string& name : store.names()) {
    const io::TensorView& t = store.get(name);
    std::vector<float> v(size_t(t.num_elements()));
    std::vector<uint8_t> aligned(t.data, t.data + t.num_bytes);
    convert_to_f32(t.dtype, aligned.data(), v.data(), v.size());
    if (dtype == DType::kBF16)
      b.add_bf16(name, t.shape, v);
    else
      b.add_f16(name, t.shape, v);
  }
  std::string header = b.header.dump();
  if ((8 + header.size()) % 2 == 0) header += ' ';  // JSON allows trailing blanks
  testing::write_file(out / "model.safetensors", testing::safetensors_bytes(header, b.data));
}

// The fp32 stories260K loaded with --dtype bf16 / f16 (raw f32 uploaded, converted on the GPU) must
// give bit for bit the logits of the same checkpoint converted on the host first (raw bf16 / f16
// copied, from misaligned offsets).
void check_device_conversion(const std::filesystem::path& dir) {
  std::printf("== stories260K: GPU dtype conversion vs host-converted checkpoint\n");
  const io::ModelConfig config = io::load_model_config(dir);
  const io::WeightStore f32 = io::WeightStore::open(dir);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    testing::TempDir tmp;
    write_converted_copy(dir, dtype, tmp.path());
    const io::WeightStore converted = io::WeightStore::open(tmp.path());
    runner::CudaRunnerOptions o;
    o.dtype = dtype;
    o.num_kv_blocks = 64;
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = 256;
    o.enforce_eager = true;
    runner::CudaRunner a(config, &f32, o);
    runner::CudaRunner b(config, &converted, o);
    std::vector<int32_t> prompt(100);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 1) % 512);
    testing::TestSeq sa(0, 16, prompt), sb(0, 16, prompt);
    const auto la = a.execute_logits(testing::make_batch({sa.schedule()}));
    const auto lb = b.execute_logits(testing::make_batch({sb.schedule()}));
    const bool same = !la[0].empty() && la[0].size() == lb[0].size() &&
                      std::memcmp(la[0].data(), lb[0].data(), la[0].size() * 4) == 0;
    report(same && a.startup_stats().checkpoint_bytes == 2 * b.startup_stats().checkpoint_bytes,
           std::string(dtype_name(dtype)) +
               ": prefill logits of f32->device conversion equal the host-converted checkpoint's "
               "bit for bit");
  }
}

io::ModelConfig tiny_config(int head_dim) {
  io::ModelConfig c = runner::demo_model_config();
  c.attention_bias = true;
  c.qk_norm = true;
  c.tie_word_embeddings = false;
  c.rope_scaling.type = io::RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.head_dim = head_dim;
  c.hidden_size = head_dim * 4;
  return c;
}

bool in_top5(const std::vector<float>& row, int32_t token) {
  int better = 0;
  for (float v : row) better += v > row[size_t(token)];
  return better < 5;
}

// The other families on tiny shapes (head_dim 16): Qwen3-MoE with a dense layer between two
// sparse ones (8 experts, top-3, weights not renormalised), Mixtral (top-2, renormalised) and
// Phi-3 (fused qkv / gate_up in the checkpoint layout, split by the weight plan).
io::ModelConfig tiny_family_config(const std::string& family) {
  io::ModelConfig c = tiny_config(16);
  c.attention_bias = false;
  c.qk_norm = family == "qwen3_moe";
  c.rope_scaling = {};
  c.model_type = family;
  c.architecture = family == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                   : family == "mixtral" ? "MixtralForCausalLM"
                                         : "Phi3ForCausalLM";
  if (family == "phi3") return c;
  c.num_hidden_layers = 3;
  c.moe.num_experts = 8;
  c.moe.top_k = family == "mixtral" ? 2 : 3;
  c.moe.intermediate_size = 32;
  c.moe.norm_topk_prob = family == "mixtral";
  c.moe.dense_layer = {false, family == "qwen3_moe", false};
  return c;
}

// Gemma 2 / 3 on tiny shapes: three layers with an 8-token window on two of them (the prompts and
// decodes run past it), Gemma 2's score and logit caps (the logit cap at Gemma 2's 30: a tighter
// one squeezes the logits into ties at bf16's resolution), Gemma 3's q/k norms, local rotary base
// and linear-scaled global one; head_dim 16 (CUDA-core kernels) or 64 (tensor-core decode and
// tiles).
io::ModelConfig tiny_gemma_config(int version, int head_dim) {
  io::ModelConfig c = tiny_config(head_dim);
  c.attention_bias = false;
  c.qk_norm = version == 3;
  c.rope_scaling = {};
  c.model_type = version == 2 ? "gemma2" : "gemma3_text";
  c.architecture = version == 2 ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM";
  c.tie_word_embeddings = true;
  c.num_hidden_layers = 3;
  c.sliding_window = 8;
  c.sliding_layer =
      version == 2 ? std::vector<bool>{true, false, true} : std::vector<bool>{true, true, false};
  c.gemma.enabled = true;
  c.gemma.query_pre_attn_scalar = 24;
  c.gemma.attn_logit_softcapping = version == 2 ? 10.0 : 0.0;
  c.gemma.final_logit_softcapping = version == 2 ? 30.0 : 0.0;
  if (version == 3) {
    c.rope_theta = 1e6;
    c.rope_scaling.type = io::RopeScaling::Type::kLinear;
    c.rope_scaling.factor = 2.0;
    c.gemma.local_rope_theta = 1e4;
  }
  return c;
}

}  // namespace

void check_tiny_model(const io::ModelConfig& c, const std::string& label, DType dtype,
                      std::optional<DType> kv_fp8, bool calculate, const io::WeightStore* store,
                      int num_seqs) {
  models::KvCacheQuant kv;
  kv.fp8 = kv_fp8;
  kv.calculate_scales = calculate;
  runner::CpuRunner cpu(
      std::make_unique<models::LlamaModel>(
          c, store ? models::load_llama_weights(c, *store) : models::random_llama_weights(c, 7)),
      64, 4, 0, kv);
  runner::CudaRunnerOptions o;
  o.kv_cache_fp8 = kv_fp8;
  o.calculate_kv_scales = calculate;
  o.seed = 7;  // the GPU's own dummy weights must be the CPU's random_llama_weights(c, 7)
  o.dtype = dtype;
  o.block_size = 4;
  o.num_kv_blocks = 64;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 64;
  o.max_model_len = 64;
  runner::CudaRunner gpu(c, store, o);
  std::vector<testing::TestSeq> seqs;
  std::mt19937 rng(3);
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<int32_t> prompt(size_t(5 + 17 * i));
    for (auto& t : prompt) t = int32_t(rng() % 258);
    seqs.emplace_back(i, 16, prompt);
  }
  double max_err = 0, max_logit = 0;
  int rows = 0, agree = 0, close = 0;
  for (int step = 0; step < 24; ++step) {
    std::vector<engine::ScheduledSeq> sched;
    for (auto& s : seqs) sched.push_back(s.schedule(step < 3 ? 9 : 1));  // 9-token chunks first
    const auto batch = testing::make_batch(sched);
    const auto a = cpu.execute_logits(batch);
    const auto b = gpu.execute_logits(batch);
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].num_computed += int32_t(sched[i].token_ids.size());
      if (a[i].empty() != b[i].empty()) max_err = INFINITY;
      if (a[i].empty()) continue;
      ++rows;
      for (size_t v = 0; v < a[i].size(); ++v) {
        max_err = std::max(max_err, double(std::fabs(a[i][v] - b[i][v])));
        if (!std::isfinite(b[i][v])) max_err = INFINITY;
        max_logit = std::max(max_logit, double(std::fabs(a[i][v])));
      }
      const int32_t ta = testing::argmax(a[i]), tb = testing::argmax(b[i]);
      agree += ta == tb;
      close += ta == tb || (in_top5(a[i], tb) && in_top5(b[i], ta));
      seqs[i].tokens.push_back(ta);  // follow the CPU's choice so both see the same inputs
    }
  }
  char line[240];
  std::snprintf(line, sizeof line,
                "tiny %s %s%s%s: %d rows, max |dlogit| %.2e (max |logit| %.2f), argmax agree %d, "
                "top-5 close %d",
                label.c_str(), std::string(dtype_name(dtype)).c_str(),
                num_seqs == 3 ? "" : (" " + std::to_string(num_seqs) + " seqs").c_str(),
                !kv_fp8 ? ""
                : *kv_fp8 == DType::kF8E4M3
                    ? (calculate ? " kv=e4m3 (calculated scales)" : " kv=e4m3")
                    : " kv=e5m2",
                rows, max_err, max_logit, agree, close);
  const bool ok = dtype == DType::kF32 ? max_err <= 1e-4 * std::max(1.0, max_logit) : close == rows;
  report(ok && std::isfinite(max_err), line);
}

namespace {

void check_tiny(int head_dim, DType dtype, std::optional<DType> kv_fp8 = std::nullopt,
                bool calculate = false) {
  check_tiny_model(tiny_config(head_dim), "D=" + std::to_string(head_dim), dtype, kv_fp8,
                   calculate);
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaMemset(a, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 2; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e0);
  for (int i = 0; i < 5; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * 5 / (ms * 1e6);
}

// Prefills `batch` prompts of prompt_len tokens, then times decode_steps greedy steps through
// execute() (forward + logits download + host sampling). Returns tokens/s.
double decode_tokens_per_s(runner::CudaRunner& r, int batch, int prompt_len, int decode_steps) {
  const int blocks_per_seq = (prompt_len + decode_steps + r.block_size()) / r.block_size() + 1;
  SamplingParams sp;
  sp.temperature = 0.f;
  std::vector<testing::TestSeq> seqs;
  for (int i = 0; i < batch; ++i) {
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int t = 0; t < prompt_len; ++t)
      prompt[size_t(t)] = int32_t((t * 7919 + i * 104729) % 128000);
    seqs.emplace_back(i, blocks_per_seq, prompt);
  }
  auto step = [&](int chunk) {
    std::vector<engine::ScheduledSeq> sched;
    for (auto& s : seqs) {
      auto x = s.schedule(chunk);
      x.params = &sp;
      sched.push_back(x);
    }
    const auto out = r.execute(testing::make_batch(sched));
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].num_computed += int32_t(sched[i].token_ids.size());
      if (out.sampled_token_ids[i] >= 0) seqs[i].tokens.push_back(out.sampled_token_ids[i]);
    }
  };
  const int chunk = std::max(1, 2048 / batch);
  while (seqs[0].num_computed < prompt_len) step(chunk);
  step(1);  // warm-up decode step
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < decode_steps; ++i) step(1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return batch * decode_steps / s;
}

// Decode throughput on Llama-3.1-8B shapes against the HBM roofline of the weights the runner
// holds (bf16, or FP8 with --quantization fp8: e4m3 projections, bf16 embedding and LM head).
// Decode batches perf() measures; --batch N (with --perf-only) measures one, e.g. under a profiler.
std::vector<int> g_perf_batches = {1, 16, 64};

// qname: "" (bf16), "fp8" (--quantization fp8), "int4" / "int8" (a GPTQ W4A16 / W8A16 g128
// symmetric config: dummy weights are random packed integers).
void perf(const std::string& qname, bool with_eager) {
  const bool fp8 = qname == "fp8";
  std::printf("== Llama-3.1-8B shapes, dummy %s weights\n", qname.empty() ? "bf16"
                                                            : fp8 ? "FP8 (--quantization fp8)"
                                                                  : qname.c_str());
  const double copy = copy_bandwidth_gbs();
  std::printf("d2d copy bandwidth (read+write): %.0f GB/s\n", copy);
  io::ModelConfig config = llama31_8b();
  if (fp8) config.quant = quant::resolve_quantization(config.quant, "fp8", "runner_check");
  if (qname == "int4" || qname == "int8")
    config.quant = quant::parse_quant_config_text(
        std::string(R"({"quantization_config": {"quant_method": "gptq", "group_size": 128, )"
                    R"("desc_act": false, "sym": true, "bits": )") +
            (qname == "int4" ? "4}}" : "8}}"),
        "runner_check");
  for (bool eager : with_eager ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    runner::CudaRunnerOptions o;
    o.dtype = DType::kBF16;
    o.max_model_len = 8192;
    o.max_num_seqs = 64;
    o.max_num_batched_tokens = 2048;
    o.enforce_eager = eager;
    runner::CudaRunner r(config, nullptr, o);
    const auto& st = r.startup_stats();
    std::printf(
        "%s: weights %.2f GB, KV %d blocks (%.1f GB), activations %.2f GB; load %.0f ms, profile "
        "%.0f ms, %d graphs in %.0f ms\n",
        eager ? "eager " : "graphs", st.weight_bytes / 1e9, r.num_kv_blocks(), st.kv_bytes / 1e9,
        st.activation_bytes / 1e9, st.load_ms, st.profile_ms, st.num_graphs, st.graph_ms);
    for (int batch : eager ? std::vector<int>{1} : g_perf_batches) {
      const int prompt = 1024;
      const double tps = decode_tokens_per_s(r, batch, prompt, 64);
      // Roofline: every step reads all weights plus each seq's KV once.
      const double kv = 2.0 * 32 * 8 * 128 * 2 * (prompt + 32) * batch;
      const double ceiling = batch / ((st.weight_bytes + kv) / (copy * 1e9));
      std::printf("  %s %s batch %3d, ctx ~%d: %8.1f tok/s  (HBM roofline %8.1f tok/s: %.0f%%)\n",
                  qname.empty() ? "bf16" : qname.c_str(), eager ? "eager " : "graphs", batch,
                  prompt + 32, tps, ceiling, 100.0 * tps / ceiling);
    }
  }
}

// --kv-cache-dtype fp8 at long context: decode of 64 seqs at ~4k tokens, where reading the KV
// cache costs about twice the weights; bf16 KV beside FP8 KV (and FP8 weights + FP8 KV).
void perf_kv_cache() {
  std::printf("== Llama-3.1-8B shapes, 64 x 4k-token decode: bf16 KV cache vs FP8 KV cache\n");
  const double copy = copy_bandwidth_gbs();
  std::printf("d2d copy bandwidth (read+write): %.0f GB/s\n", copy);
  struct Variant {
    const char* name;
    bool fp8_weights;
    std::optional<DType> kv;
  };
  double base = 0;
  for (const Variant& v : {Variant{"bf16 weights, bf16 KV", false, std::nullopt},
                           Variant{"bf16 weights, fp8 KV", false, DType::kF8E4M3},
                           Variant{"fp8 weights, fp8 KV ", true, DType::kF8E4M3}}) {
    io::ModelConfig config = llama31_8b();
    if (v.fp8_weights) config.quant = quant::resolve_quantization(config.quant, "fp8", "check");
    runner::CudaRunnerOptions o;
    o.dtype = DType::kBF16;
    o.kv_cache_fp8 = v.kv;
    o.max_model_len = 8192;
    o.max_num_seqs = 64;
    o.max_num_batched_tokens = 2048;
    runner::CudaRunner r(config, nullptr, o);
    const auto& st = r.startup_stats();
    const int prompt = 4096, steps = 32;
    const double tps = decode_tokens_per_s(r, 64, prompt, steps);
    const double kv_elem = v.kv ? 1.0 : 2.0;
    const double kv = 2.0 * 32 * 8 * 128 * kv_elem * (prompt + steps / 2) * 64;
    const double ceiling = 64 / ((st.weight_bytes + kv) / (copy * 1e9));
    if (!v.kv && !v.fp8_weights) base = tps;
    std::printf(
        "  %s: KV pool %lld tokens (%.1f GB); %8.1f tok/s (%.2fx bf16 KV; HBM roofline "
        "%.1f tok/s: %.0f%%)\n",
        v.name, (long long)r.num_kv_blocks() * r.block_size(), st.kv_bytes / 1e9, tps,
        base > 0 ? tps / base : 0.0, ceiling, 100.0 * tps / ceiling);
  }
}

}  // namespace
}  // namespace pagellm

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: %s MODELS_DIR [--skip-perf] [--perf-only [--batch N] [--no-bf16]] [--spec-cost] "
        "[--draft-cost TARGET_DIR DRAFT_DIR] [--fp8] [--int4] [--int8] [--kv-fp8] [--pdl]\n",
        argv[0]);
    return 2;
  }
  bool skip_perf = false, perf_only = false, fp8_perf = false, kv_perf = false, bf16_perf = true;
  bool spec_cost = false;               // --spec-cost: only perf_spec_cost()
  std::vector<std::string> draft_cost;  // --draft-cost TARGET DRAFT: only perf_draft_cost()
  std::vector<std::string> int_perf;    // --int4 / --int8
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    skip_perf = skip_perf || a == "--skip-perf";
    perf_only = perf_only || a == "--perf-only";
    fp8_perf = fp8_perf || a == "--fp8";
    if (a == "--int4" || a == "--int8") int_perf.push_back(a.substr(2));
    kv_perf = kv_perf || a == "--kv-fp8";
    spec_cost = spec_cost || a == "--spec-cost";
    // Programmatic dependent launch against the ordinary launches (the default).
    if (a == "--pdl") pagellm::cuda::set_programmatic_launch(true);
    bf16_perf = bf16_perf && a != "--no-bf16";
    if (a == "--draft-cost" && i + 2 < argc) draft_cost = {argv[i + 1], argv[i + 2]}, i += 2;
    if (a == "--batch" && i + 1 < argc) pagellm::g_perf_batches = {std::atoi(argv[++i])};
  }
  std::printf("programmatic dependent launch: %s\n",
              pagellm::cuda::programmatic_launch() ? "on" : "off");
  try {
    if (spec_cost || !draft_cost.empty()) {
      if (spec_cost) pagellm::perf_spec_cost();
      if (!draft_cost.empty()) pagellm::perf_draft_cost(draft_cost[0], draft_cost[1]);
      return 0;
    }
    if (perf_only) {
      if (bf16_perf) pagellm::perf("", false);
      if (fp8_perf) pagellm::perf("fp8", false);
      for (const std::string& q : int_perf) pagellm::perf(q, false);
      std::printf("runner checks: %s\n", pagellm::g_failed ? "FAILED" : "all passed");
      return pagellm::g_failed ? 1 : 0;
    }
    pagellm::check_stories(std::filesystem::path(argv[1]) / "stories260K");
    pagellm::check_device_conversion(std::filesystem::path(argv[1]) / "stories260K");
    std::printf("== tiny random models (GPU vs CPU runner)\n");
    for (int d : {16, 64})
      for (pagellm::DType t : {pagellm::DType::kF32, pagellm::DType::kBF16, pagellm::DType::kF16})
        pagellm::check_tiny(d, t);
    for (const char* family : {"qwen3_moe", "mixtral", "phi3"})
      for (pagellm::DType t : {pagellm::DType::kF32, pagellm::DType::kBF16})
        pagellm::check_tiny_model(pagellm::tiny_family_config(family), family, t);
    pagellm::check_fp8_moe(std::filesystem::path(argv[1]));
    pagellm::check_quantized_families(std::filesystem::path(argv[1]));
    for (int version : {2, 3})
      for (int d : {16, 64})
        for (pagellm::DType t : {pagellm::DType::kF32, pagellm::DType::kBF16})
          pagellm::check_tiny_model(pagellm::tiny_gemma_config(version, d),
                                    "gemma" + std::to_string(version) + " D=" + std::to_string(d),
                                    t);
    for (int d : {16, 64}) {
      for (pagellm::DType t : {pagellm::DType::kBF16, pagellm::DType::kF16}) {
        pagellm::check_tiny(d, t, pagellm::DType::kF8E4M3);
        pagellm::check_tiny(d, t, pagellm::DType::kF8E5M2);
      }
      pagellm::check_tiny(d, pagellm::DType::kBF16, pagellm::DType::kF8E4M3, true);
    }
    if (!skip_perf) pagellm::perf("", true);
    if (!skip_perf && fp8_perf) pagellm::perf("fp8", false);
    for (const std::string& q : int_perf)
      if (!skip_perf) pagellm::perf(q, false);
    if (kv_perf) pagellm::perf_kv_cache();  // even with --skip-perf
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
  std::printf("runner checks: %s\n", pagellm::g_failed ? "FAILED" : "all passed");
  return pagellm::g_failed ? 1 : 0;
}
