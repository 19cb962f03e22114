// The engine's behaviours on the GPU, through the public API (LLM / LLMEngine with device cuda):
//   cuda_engine_check MODELS_DIR [--device cuda|cpu] [--model dummy|stories|all] [--cases 12345]
// For two models, a random-weight Llama (--load-format dummy, bf16, hidden 1024, GQA 4, head_dim
// 64) and stories260K (real weights, fp32):
// 1. batched vs solo: 24 prompts of 3..252 tokens (some sharing prefixes, most longer than the
//    64-token chunk so chunked prefill splits them), greedy, 64 tokens with top-5 logprobs,
//    generated together and each alone.
// 2. preemption: the same batch with a KV pool too small for it (num_kv_blocks), so requests are
//    preempted and recomputed; compared with the unpreempted batch.
// 3. prefix caching: a 100-token shared prefix (6 blocks) + distinct suffixes in two waves; the
//    second wave must be served from the cache, outputs compared with a caching-off engine.
// 4. CUDA graphs on vs off (enforce_eager): identical tokens for greedy (GPU greedy path and
//    logprobs path) and seeded sampling (T 0.8, top-p 0.9), with varied lengths so decode batches
//    shrink through every graph size.
// 5. preemption by swap: case 2's small KV pool plus --swap-space, so victims' KV blocks go to the
//    runner's pinned host pool and come back (swapped requests must be seen); compared with the
//    unpreempted batch.
// Comparisons 1-3 and 5 follow vLLM's check_logprobs_close for bf16 (per step the tokens agree or each
// is in the other's top-5; a sequence is compared up to its first difference) and require
// identical tokens in fp32. --device cpu runs the same checks on the CPU runner (CUDA graphs are
// then a no-op), for developing this program without a GPU.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "pagellm/llm.h"

namespace pagellm {
namespace {

namespace fs = std::filesystem;

int g_failed = 0;
int g_passed = 0;

void report(bool ok, const std::string& what) {
  std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  std::fflush(stdout);
  (ok ? g_passed : g_failed)++;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

constexpr int kMaxTokens = 64;
constexpr int kTopLogprobs = 5;

// One model under test: its engine arguments and prompts.
struct Subject {
  std::string label;                 // "dummy-llama bf16"
  EngineArgs args;                   // the reference engine: graphs on, caching off, ample KV pool
  bool exact = false;                // fp32: outputs must be token-identical
  std::vector<PromptInput> prompts;  // case 1, 2, 4
  std::vector<PromptInput> prefix_prompts;  // case 3: shared prefix + distinct suffixes
};

// ---- comparison --------------------------------------------------------------------------------

bool in_top(const TokenLogprobs& lp, int32_t token) {
  for (const auto& [id, logprob] : lp.top)
    if (id == token) return true;
  return false;
}

std::string describe_step(const CompletionOutput& a, const CompletionOutput& b, size_t i) {
  char buf[256];
  auto lp = [](const CompletionOutput& o, size_t k) {
    return k < o.logprobs.size() ? o.logprobs[k].logprob : 0.f;
  };
  auto second = [](const CompletionOutput& o, size_t k) -> std::pair<int, float> {
    if (k >= o.logprobs.size() || o.logprobs[k].top.size() < 2) return {-1, 0.f};
    return o.logprobs[k].top[1];
  };
  const auto a2 = second(a, i), b2 = second(b, i);
  std::snprintf(buf, sizeof buf,
                "step %zu: token %d (logprob %.5f, runner-up %d %.5f) vs %d (logprob %.5f, "
                "runner-up %d %.5f)",
                i, a.token_ids[i], double(lp(a, i)), a2.first, double(a2.second), b.token_ids[i],
                double(lp(b, i)), b2.first, double(b2.second));
  return buf;
}

// Compares two runs of the same prompts. exact: tokens must be identical; otherwise the logprob
// closeness rule applies (needs logprobs in both runs). Prints one ok/FAIL line.
void compare(const std::string& what, const std::vector<RequestOutput>& a,
             const std::vector<RequestOutput>& b, bool exact) {
  if (a.size() != b.size()) {
    report(false,
           what + ": " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " outputs");
    return;
  }
  int identical = 0, diverged = 0, failed = 0;
  int first_divergence = -1;
  std::string detail;
  for (size_t r = 0; r < a.size(); ++r) {
    const CompletionOutput& x = a[r].outputs.at(0);
    const CompletionOutput& y = b[r].outputs.at(0);
    if (x.token_ids == y.token_ids) {
      ++identical;
      continue;
    }
    size_t i = 0;
    while (i < x.token_ids.size() && i < y.token_ids.size() && x.token_ids[i] == y.token_ids[i])
      ++i;
    const bool at_end = i == x.token_ids.size() || i == y.token_ids.size();
    const bool close = !exact && !at_end && i < x.logprobs.size() && i < y.logprobs.size() &&
                       in_top(x.logprobs[i], y.token_ids[i]) &&
                       in_top(y.logprobs[i], x.token_ids[i]);
    if (close) {
      ++diverged;
      if (first_divergence < 0 || int(i) < first_divergence) first_divergence = int(i);
      continue;
    }
    ++failed;
    if (detail.empty())
      detail = "; request " + std::to_string(r) + " (" +
               std::to_string(a[r].prompt_token_ids.size()) + "-token prompt) " +
               (at_end ? "lengths " + std::to_string(x.token_ids.size()) + " vs " +
                             std::to_string(y.token_ids.size())
                       : describe_step(x, y, i));
  }
  std::string line =
      what + ": " + std::to_string(identical) + "/" + std::to_string(a.size()) + " identical";
  if (diverged > 0)
    line += ", " + std::to_string(diverged) + " diverge within the top-" +
            std::to_string(kTopLogprobs) + " (earliest at step " +
            std::to_string(first_divergence) + ")";
  if (failed > 0) line += ", " + std::to_string(failed) + (exact ? " differ" : " not close");
  report(failed == 0, line + detail);
}

// ---- running -----------------------------------------------------------------------------------

SamplingParams greedy_params(bool logprobs, int max_tokens = kMaxTokens) {
  SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.detokenize = false;  // the dummy model's ids exceed the borrowed tokenizer's vocabulary
  if (logprobs) p.logprobs = kTopLogprobs;
  return p;
}

// A fresh engine for `args`; checks that the KV pool is the one asked for (num_kv_blocks reaches
// the runner) and reports its startup time.
std::unique_ptr<LLM> make_llm(const Subject& s, const EngineArgs& args, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  auto llm = std::make_unique<LLM>(args);
  const EngineStats st = llm->engine().take_stats();
  std::printf("  [%s] engine '%s' up in %.2f s, %d KV blocks\n", s.label.c_str(), what.c_str(),
              seconds_since(t0), st.num_kv_blocks);
  if (args.num_kv_blocks > 0 && st.num_kv_blocks != args.num_kv_blocks)
    report(false, "[" + s.label + "] engine '" + what + "': asked for " +
                      std::to_string(args.num_kv_blocks) + " KV blocks, got " +
                      std::to_string(st.num_kv_blocks));
  return llm;
}

std::vector<RequestOutput> solo(LLM& llm, const std::vector<PromptInput>& prompts,
                                const SamplingParams& p) {
  std::vector<RequestOutput> out;
  for (const PromptInput& prompt : prompts) out.push_back(llm.generate({prompt}, p).at(0));
  return out;
}

// Greedy plain, greedy with logprobs and seeded sampling, with per-prompt lengths that make the
// decode batch shrink one request at a time.
std::vector<std::vector<RequestOutput>> graph_runs(LLM& llm,
                                                   const std::vector<PromptInput>& prompts) {
  std::vector<SamplingParams> plain, with_lp, seeded;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int n = 8 + int(i * 37 % prompts.size()) * 3;
    plain.push_back(greedy_params(false, n));
    with_lp.push_back(greedy_params(true, n));
    SamplingParams s = greedy_params(false, n);
    s.temperature = 0.8f;
    s.top_p = 0.9f;
    s.seed = 1000 + i;
    seeded.push_back(s);
  }
  return {llm.generate(prompts, plain), llm.generate(prompts, with_lp),
          llm.generate(prompts, seeded)};
}

void case_batched_vs_solo(const Subject& s, LLM& ref, std::vector<RequestOutput>& batched) {
  const SamplingParams p = greedy_params(true);
  auto t0 = std::chrono::steady_clock::now();
  batched = ref.generate(s.prompts, p);
  const double t_batched = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::vector<RequestOutput> alone = solo(ref, s.prompts, p);
  size_t shortest = SIZE_MAX, longest = 0, chunked = 0;
  for (const RequestOutput& o : batched) {
    shortest = std::min(shortest, o.prompt_token_ids.size());
    longest = std::max(longest, o.prompt_token_ids.size());
    chunked += o.prompt_token_ids.size() > size_t(s.args.max_num_batched_tokens);
  }
  std::printf(
      "  [%s] prompts of %zu..%zu tokens (%zu over the chunk); batched %.2f s, solo %.2f s\n",
      s.label.c_str(), shortest, longest, chunked, t_batched, seconds_since(t0));
  bool full = true;
  for (const RequestOutput& o : batched)
    full = full && o.outputs.at(0).token_ids.size() == kMaxTokens;
  report(full, "[" + s.label + "] every batched request generated " + std::to_string(kMaxTokens) +
                   " tokens");
  compare("[" + s.label + "] 1. batched vs solo", batched, alone, s.exact);
}

void case_preemption(const Subject& s, const std::vector<RequestOutput>& batched) {
  EngineArgs args = s.args;
  // One request at its longest fits with a few blocks to spare; the batch does not.
  size_t max_prompt_len = 0;
  for (const RequestOutput& o : batched)
    max_prompt_len = std::max(max_prompt_len, o.prompt_token_ids.size());
  args.num_kv_blocks =
      (int(max_prompt_len) + kMaxTokens + args.block_size - 1) / args.block_size + 4;
  auto llm = make_llm(s, args, "small KV pool");
  const int pool = llm->engine().take_stats().num_kv_blocks;
  report(pool == args.num_kv_blocks,
         "[" + s.label + "] 2. num_kv_blocks " + std::to_string(args.num_kv_blocks) +
             " reaches the runner (pool of " + std::to_string(pool) + ")");
  const std::vector<RequestOutput> out = llm->generate(s.prompts, greedy_params(true));
  const EngineStats st = llm->engine().take_stats();
  report(st.num_preemptions > 0, "[" + s.label + "] 2. " + std::to_string(st.num_preemptions) +
                                     " preemptions with " + std::to_string(args.num_kv_blocks) +
                                     " KV blocks");
  compare("[" + s.label + "] 2. preempted vs unpreempted", out, batched, s.exact);
}

// Runs prompts to completion through llm's step loop, recording the most requests swapped out at
// once; outputs in prompt order.
std::vector<RequestOutput> generate_watching_swaps(LLM& llm, const std::vector<PromptInput>& prompts,
                                                   const SamplingParams& p, int& max_swapped) {
  LLMEngine& engine = llm.engine();
  for (size_t i = 0; i < prompts.size(); ++i) engine.add_request(std::to_string(i), prompts[i], p);
  std::vector<RequestOutput> out(prompts.size());
  max_swapped = 0;
  while (engine.has_unfinished_requests()) {
    for (RequestOutput& o : engine.step())
      if (o.finished) out[std::stoul(o.request_id)] = std::move(o);
    max_swapped = std::max(max_swapped, engine.take_stats().num_swapped);
  }
  return out;
}

void case_swap(const Subject& s, const std::vector<RequestOutput>& batched) {
  EngineArgs args = s.args;
  size_t max_prompt_len = 0;
  for (const RequestOutput& o : batched)
    max_prompt_len = std::max(max_prompt_len, o.prompt_token_ids.size());
  args.num_kv_blocks =
      (int(max_prompt_len) + kMaxTokens + args.block_size - 1) / args.block_size + 4;
  args.swap_space_gib = 0.25;  // thousands of blocks: every victim can be swapped
  auto llm = make_llm(s, args, "small KV pool + swap space");
  int max_swapped = 0;
  const std::vector<RequestOutput> out =
      generate_watching_swaps(*llm, s.prompts, greedy_params(true), max_swapped);
  const EngineStats st = llm->engine().take_stats();
  report(st.num_preemptions > 0 && max_swapped > 0,
         "[" + s.label + "] 5. " + std::to_string(st.num_preemptions) + " preemptions with " +
             std::to_string(args.num_kv_blocks) + " KV blocks, up to " +
             std::to_string(max_swapped) + " requests swapped out at once");
  compare("[" + s.label + "] 5. preempted by swap vs unpreempted", out, batched, s.exact);
}

// Two waves of prefix prompts through one engine.
std::vector<RequestOutput> two_waves(LLM& llm, const std::vector<PromptInput>& prompts,
                                     std::vector<RequestOutput>* second_wave) {
  const size_t half = prompts.size() / 2;
  const std::vector<PromptInput> first(prompts.begin(), prompts.begin() + ptrdiff_t(half));
  const std::vector<PromptInput> second(prompts.begin() + ptrdiff_t(half), prompts.end());
  std::vector<RequestOutput> out = llm.generate(first, greedy_params(true));
  std::vector<RequestOutput> more = llm.generate(second, greedy_params(true));
  if (second_wave) *second_wave = more;
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

void case_prefix_caching(const Subject& s, LLM& ref) {
  EngineArgs args = s.args;
  args.enable_prefix_caching = true;
  auto llm = make_llm(s, args, "prefix caching");
  std::vector<RequestOutput> second;
  const std::vector<RequestOutput> cached = two_waves(*llm, s.prefix_prompts, &second);
  const EngineStats st = llm->engine().take_stats();
  int min_cached = 1 << 30;
  for (const RequestOutput& o : second) min_cached = std::min(min_cached, o.num_cached_tokens);
  const int want = 3 * args.block_size;
  report(min_cached >= want && st.prefix_cache_hits > 0,
         "[" + s.label + "] 3. second wave: every request has >= " + std::to_string(want) +
             " cached tokens (min " + std::to_string(min_cached) + "), prefix cache hits " +
             std::to_string(st.prefix_cache_hits) + " of " +
             std::to_string(st.prefix_cache_queries) + " tokens");
  const std::vector<RequestOutput> uncached = two_waves(ref, s.prefix_prompts, nullptr);
  compare("[" + s.label + "] 3. prefix caching on vs off", cached, uncached, s.exact);
}

void case_graphs(const Subject& s, LLM& ref) {
  EngineArgs args = s.args;
  args.enforce_eager = true;
  auto eager = make_llm(s, args, "enforce_eager");
  const auto with_graphs = graph_runs(ref, s.prompts);
  const auto without = graph_runs(*eager, s.prompts);
  const char* names[] = {"greedy", "greedy + logprobs", "seeded T=0.8 top-p 0.9"};
  for (size_t k = 0; k < 3; ++k)
    compare("[" + s.label + "] 4. CUDA graphs vs eager, " + names[k], with_graphs[k], without[k],
            /*exact=*/true);
}

void run_subject(const Subject& s, const std::string& cases) {
  std::printf("%s (%zu prompts, %zu prefix prompts, max_num_batched_tokens %d)\n", s.label.c_str(),
              s.prompts.size(), s.prefix_prompts.size(), s.args.max_num_batched_tokens);
  try {
    auto ref = make_llm(s, s.args, "reference");
    auto wanted = [&](char c) { return cases.find(c) != std::string::npos; };
    std::vector<RequestOutput> batched;
    if (wanted('1') || wanted('2') || wanted('5')) case_batched_vs_solo(s, *ref, batched);
    if (wanted('2')) case_preemption(s, batched);
    if (wanted('3')) case_prefix_caching(s, *ref);
    if (wanted('4')) case_graphs(s, *ref);
    if (wanted('5')) case_swap(s, batched);
  } catch (const std::exception& e) {
    report(false, "[" + s.label + "] threw: " + e.what());
  }
}

// ---- subjects ----------------------------------------------------------------------------------

EngineArgs base_args(const std::string& device) {
  EngineArgs a;
  a.device = device;
  a.seed = 0;
  a.max_num_seqs = 32;
  a.max_num_batched_tokens = 64;  // prompts above 64 tokens are prefilled in chunks
  a.num_kv_blocks = 1024;         // ample for the batch; small startup
  a.block_size = 16;
  a.enable_prefix_caching = false;  // case 3 turns it on
  a.enforce_eager = false;          // case 4 turns it off
  a.kv_cache_memory_gib = 1.0;
  return a;
}

// Prompt lengths 3..252: short, one chunk, just over a chunk, several chunks.
int prompt_len(size_t i) {
  static const int kLens[] = {3, 12, 31, 64, 65, 97, 150, 230};
  return kLens[i % 8] + int(i / 8) * 11;
}

Subject dummy_subject(const fs::path& models, const std::string& device, const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4,
  "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
  "vocab_size": 32000, "max_position_embeddings": 1024, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "hidden_act": "silu", "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"
})";
  Subject s;
  s.label = "dummy-llama bf16";
  s.args = base_args(device);
  s.args.model = dir.string();
  s.args.tokenizer = (models / "stories260K").string();  // any tokenizer; prompts are ids
  s.args.load_format = "dummy";
  s.args.dtype = "bfloat16";
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(3, 31999);
  auto random_ids = [&](int n) {
    std::vector<int32_t> ids;
    for (int k = 0; k < n; ++k) ids.push_back(token(rng));
    return ids;
  };
  const std::vector<int32_t> shared = random_ids(100);
  for (size_t i = 0; i < 24; ++i) {
    std::vector<int32_t> ids;
    if (i % 4 == 1) ids.assign(shared.begin(), shared.begin() + 60);  // shares 60 tokens
    if (i % 4 == 3) ids = shared;                                     // shares 100 tokens
    const std::vector<int32_t> tail =
        random_ids(i % 4 == 3 ? prompt_len(i) % 23 + 1 : prompt_len(i));
    ids.insert(ids.end(), tail.begin(), tail.end());
    s.prompts.push_back(PromptInput::from_ids(std::move(ids)));
  }
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> ids = shared;
    const std::vector<int32_t> tail = random_ids(3 + 5 * i);
    ids.insert(ids.end(), tail.begin(), tail.end());
    s.prefix_prompts.push_back(PromptInput::from_ids(std::move(ids)));
  }
  return s;
}

Subject stories_subject(const fs::path& models, const std::string& device) {
  Subject s;
  s.label = "stories260K fp32";
  s.exact = true;
  s.args = base_args(device);
  s.args.model = (models / "stories260K").string();
  s.args.dtype = "float32";
  static const char* kSentences[] = {
      "Once upon a time, there was a little girl named Lily.",
      "She loved to play outside in the park with her friends.",
      "One day, she saw a big red ball under a tree.",
      "Tom was a happy boy who liked to build towers with his blocks.",
      "The sun was shining and the birds were singing in the sky.",
      "Her mom said it was time to go home and eat dinner.",
      "The little dog ran to the door and barked at the cat.",
      "They played together all day and had lots of fun.",
      "Ben wanted to help his dad fix the old blue car.",
      "At night, the moon was bright and the stars were pretty.",
      "The bird flew high over the hill and found a nest.",
      "Sue was sad because she lost her favorite toy bear.",
  };
  const std::string shared = std::string(kSentences[0]) + " " + kSentences[1] + " " +
                             kSentences[2] + " " + kSentences[4] + " " + kSentences[9];
  // Text lengths from one sentence to the whole list; every third prompt shares the opening.
  for (size_t i = 0; i < 24; ++i) {
    std::string text = i % 3 == 2 ? shared + " " : "";
    const size_t count = 1 + (i * 5) % 12;
    for (size_t k = 0; k < count; ++k) text += std::string(kSentences[(i + k) % 12]) + " ";
    text.pop_back();
    s.prompts.push_back(PromptInput::from_text(text));
  }
  for (size_t i = 0; i < 8; ++i)
    s.prefix_prompts.push_back(PromptInput::from_text(shared + " " + kSentences[(3 + i) % 12]));
  return s;
}

}  // namespace
}  // namespace pagellm

int main(int argc, char** argv) {
  using namespace pagellm;
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: %s MODELS_DIR [--device cuda|cpu] [--model dummy|stories|all] [--cases 12345]\n",
        argv[0]);
    return 2;
  }
  const fs::path models = argv[1];
  std::string device = "cuda", which = "all", cases = "12345";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--device") {
      device = argv[i + 1];
    } else if (flag == "--model") {
      which = argv[i + 1];
    } else if (flag == "--cases") {
      cases = argv[i + 1];
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (which == "all" || which == "dummy") {
    const fs::path dir = fs::temp_directory_path() / "pagellm_engine_check_dummy";
    run_subject(dummy_subject(models, device, dir), cases);
    fs::remove_all(dir);
  }
  if (which == "all" || which == "stories") run_subject(stories_subject(models, device), cases);
  std::printf("engine check on %s: %d passed, %d failed (%.1f s)\n", device.c_str(), g_passed,
              g_failed, seconds_since(t0));
  return g_failed == 0 ? 0 : 1;
}
