// cuda_runner_check's speculative-decoding checks: verification steps and greedy chains against the
// CPU runner, and the costs of verification steps and draft rounds (issue 13).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "../unit/cpu_test_util.h"
#include "io/hf_config.h"
#include "runner/cuda_runner.h"
#include "runner_check.h"

namespace pagellm {

namespace {

// Speculative verification through execute(): 6 seqs (even: greedy, seq 0 with 3 logprobs; odd:
// seeded T 0.8 / top-k 40 with 5 logprobs, seq 3 with penalties) verify drafts of 1 to 4 tokens
// over 6 rounds. Each round first verifies arbitrary drafts (mostly rejected), then, at the same
// position, the tokens that came back (so greedy seqs accept runs of drafts), and advances by the
// second answer. Returns every answer: the GPU runner (greedy on its sampler, sampled seqs' logits
// on the host) must give the CPU runner's (spec::verify_drafts on every row).
std::vector<std::vector<int32_t>> verify_rounds(runner::ModelRunner& r, bool uniform,
                                                std::vector<std::vector<TokenLogprobs>>* logprobs) {
  constexpr int kSeqs = 6, kRounds = 6;
  std::vector<SamplingParams> params(kSeqs);
  std::vector<testing::TestSeq> seqs;
  std::vector<std::vector<int32_t>> prompts, answers;
  for (int s = 0; s < kSeqs; ++s) {
    SamplingParams& p = params[size_t(s)];
    p.temperature = s % 2 ? 0.8f : 0.f;
    p.top_k = s % 2 ? 40 : 0;
    p.logprobs = s == 0 ? 3 : s % 2 ? 5 : 0;
    if (s == 3) p.repetition_penalty = 1.1f, p.presence_penalty = 0.2f;
    seqs.emplace_back(s, 6, std::vector<int32_t>{1, int32_t(50 + 7 * s), int32_t(300 + s)});
    prompts.push_back(seqs.back().tokens);
  }
  auto run = [&](const std::vector<std::vector<int32_t>>& drafts) {
    std::vector<engine::ScheduledSeq> sch;
    std::vector<std::vector<int32_t>> outputs(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      testing::TestSeq& q = seqs[size_t(s)];
      q.tokens.insert(q.tokens.end(), drafts[size_t(s)].begin(), drafts[size_t(s)].end());
      engine::ScheduledSeq x = q.schedule();
      x.num_spec_tokens = int32_t(drafts[size_t(s)].size());
      x.params = &params[size_t(s)];
      x.seed = 2000 + uint64_t(s);
      x.prompt_token_ids = prompts[size_t(s)];
      outputs[size_t(s)].assign(q.tokens.begin() + ptrdiff_t(prompts[size_t(s)].size()),
                                q.tokens.end() - ptrdiff_t(drafts[size_t(s)].size()));
      x.output_token_ids = outputs[size_t(s)];
      sch.push_back(x);
    }
    engine::ModelRunnerOutput out = r.execute(testing::make_batch(sch));
    for (int s = 0; s < kSeqs; ++s) {
      seqs[size_t(s)].tokens.resize(seqs[size_t(s)].tokens.size() - drafts[size_t(s)].size());
      answers.push_back(drafts[size_t(s)].empty() ? std::vector<int32_t>{out.sampled_token_ids[size_t(s)]}
                                                  : out.spec_token_ids.at(size_t(s)));
      if (logprobs)
        logprobs->push_back(drafts[size_t(s)].empty()
                                ? std::vector<TokenLogprobs>{*out.sampled_logprobs[size_t(s)]}
                                : out.spec_logprobs.at(size_t(s)));
    }
    return std::vector<std::vector<int32_t>>(answers.end() - kSeqs, answers.end());
  };
  run(std::vector<std::vector<int32_t>>(kSeqs));  // the prompts
  for (int s = 0; s < kSeqs; ++s) seqs[size_t(s)].num_computed = 3;
  for (int s = 0; s < kSeqs; ++s) seqs[size_t(s)].tokens.push_back(answers[size_t(s)][0]);
  for (int round = 0; round < kRounds; ++round) {
    std::vector<std::vector<int32_t>> drafts(kSeqs);
    // Uniform: 3 drafts for every seq (a graph shape); else 1 to 4.
    auto filler = [&](int s, int j) {
      return int32_t((seqs[size_t(s)].tokens.back() * 31 + 17 * j + s) % 500);
    };
    for (int s = 0; s < kSeqs; ++s)
      for (int j = 0; j < (uniform ? 3 : 1 + (round + s) % 4); ++j) drafts[size_t(s)].push_back(filler(s, j));
    auto answers_as_drafts = run(drafts);  // a greedy seq accepts them all
    for (int s = 0; uniform && s < kSeqs; ++s) {
      auto& d = answers_as_drafts[size_t(s)];
      d.resize(3, filler(s, 9));
    }
    const auto second = run(answers_as_drafts);
    for (int s = 0; s < kSeqs; ++s) {
      testing::TestSeq& q = seqs[size_t(s)];
      // KV is valid through the last verified token and the accepted drafts.
      q.num_computed = int32_t(q.tokens.size()) + int32_t(second[size_t(s)].size()) - 1;
      q.tokens.insert(q.tokens.end(), second[size_t(s)].begin(), second[size_t(s)].end());
    }
  }
  return answers;
}

// Greedy chains (the draft model's rounds) of 5 seqs: seq 2's first step catches up 2 tokens
// (the others' prompts are new), or with catch_up every seq's does (a graph shape).
std::vector<std::vector<int32_t>> greedy_chain(runner::ModelRunner& r, const std::vector<int>& steps,
                                               bool stepwise, bool catch_up = false) {
  SamplingParams sp;
  sp.temperature = 0.f;
  std::vector<testing::TestSeq> seqs;
  for (int s = 0; s < 5; ++s) {
    std::vector<int32_t> prompt{1};
    for (int t = 0; t < 2 + s; ++t) prompt.push_back(int32_t(40 + 37 * s + 11 * t));
    seqs.emplace_back(s, 4, prompt);
  }
  std::vector<engine::ScheduledSeq> cached;
  for (int s = 0; s < 5; ++s) {
    if (s != 2 && !catch_up) continue;
    cached.push_back(seqs[size_t(s)].schedule(int(seqs[size_t(s)].tokens.size()) - 2));
    seqs[size_t(s)].num_computed = int32_t(cached.back().token_ids.size());
  }
  r.execute_logits(testing::make_batch(cached));
  std::vector<engine::ScheduledSeq> first;
  for (const testing::TestSeq& q : seqs) {
    first.push_back(q.schedule());
    first.back().params = &sp;
  }
  const engine::SchedulerOutput batch = testing::make_batch(first);
  return stepwise ? r.runner::ModelRunner::execute_greedy_chain(batch, steps)
                  : r.execute_greedy_chain(batch, steps);
}

}  // namespace

void check_spec_verify(runner::ModelRunner& cpu, runner::ModelRunner& gpu, bool uniform,
                       const std::string& mode) {
  std::vector<std::vector<TokenLogprobs>> cpu_lp, gpu_lp;
  const auto want = verify_rounds(cpu, uniform, &cpu_lp);
  const auto got = verify_rounds(gpu, uniform, &gpu_lp);
  size_t same = 0, accepted = 0, lp_bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    same += i < got.size() && want[i] == got[i];
    accepted += want[i].size() - 1;
    for (size_t t = 0; i < got.size() && t < std::min(cpu_lp[i].size(), gpu_lp[i].size()); ++t) {
      const TokenLogprobs &a = cpu_lp[i][t], &b = gpu_lp[i][t];
      bool ok = a.token_id == b.token_id && std::fabs(a.logprob - b.logprob) < 1e-4f &&
                a.top.size() == b.top.size();
      for (size_t k = 0; ok && k < a.top.size(); ++k)
        ok = a.top[k].first == b.top[k].first && std::fabs(a.top[k].second - b.top[k].second) < 1e-4f;
      lp_bad += !ok;
    }
  }
  report(same == want.size() && got.size() == want.size() && lp_bad == 0 && accepted > 0,
         mode + ": speculative verification (6 seqs, greedy and seeded T 0.8, " +
             (uniform ? "3 drafts each: graph shapes" : "1-4 drafts") +
             ", 13 steps) vs the CPU runner: " + std::to_string(same) + "/" + std::to_string(want.size()) +
             " answers equal, " + std::to_string(accepted) + " drafts accepted, " +
             std::to_string(lp_bad) + " logprob mismatches");
}

// The GPU's chains (answers fed on the device) give the CPU runner's answers, with 1 to 4 steps
// per seq, from new prompts and from catch-up steps of 2 tokens (a graph shape); with 4 steps each
// (one graph shape every later step), exactly the GPU's step-by-step chain.
void check_greedy_chains(runner::ModelRunner& cpu, runner::ModelRunner& gpu, const std::string& mode) {
  const std::vector<int> mixed = {4, 1, 3, 4, 2}, uniform(5, 4);
  const bool mixed_ok = greedy_chain(gpu, mixed, false) == greedy_chain(cpu, mixed, false);
  const bool catch_up_ok =
      greedy_chain(gpu, mixed, false, true) == greedy_chain(cpu, mixed, false, true);
  const auto stepwise = greedy_chain(gpu, uniform, true), chained = greedy_chain(gpu, uniform, false);
  report(mixed_ok && catch_up_ok && chained == stepwise &&
             chained == greedy_chain(cpu, uniform, false),
         mode + ": greedy chains (5 seqs, 1-4 steps) equal the CPU runner's: from prompts " +
             (mixed_ok ? "yes" : "NO") + ", from catch-up steps " + (catch_up_ok ? "yes" : "NO") +
             "; 4 steps each equal the GPU's step-by-step chain: " +
             (chained == stepwise ? "yes" : "NO"));
}

// The cost of a speculative verification step (issue 13): Llama-3.1-8B shapes (dummy bf16) at
// batch 1 and context ~1,056, a plain decode step against a step verifying 1 + k drafts (greedy:
// the GPU sampler answers every row; graphs), both repeated at the same position (the KV slots are
// rewritten) so that the context stays fixed. Prints ms per step and the ratio.
void perf_spec_cost() {
  std::printf("== speculative verification cost, Llama-3.1-8B shapes, dummy bf16, batch 1\n");
  runner::CudaRunnerOptions o;
  o.dtype = DType::kBF16;
  o.max_model_len = 8192;
  o.max_num_seqs = 64;
  o.max_num_batched_tokens = 2048;
  runner::CudaRunner r(llama31_8b(), nullptr, o);
  SamplingParams sp;
  sp.temperature = 0.f;
  std::vector<int32_t> prompt(1024);
  for (size_t t = 0; t < prompt.size(); ++t) prompt[t] = int32_t((t * 7919) % 128000);
  testing::TestSeq seq(0, 80, prompt);
  auto run = [&](int k) {
    auto x = seq.schedule();
    x.params = &sp;
    x.num_spec_tokens = k;
    return r.execute(testing::make_batch({x}));
  };
  const auto first = run(0);  // the prompt
  seq.num_computed = int32_t(seq.tokens.size());
  seq.tokens.push_back(first.sampled_token_ids[0]);
  for (int t = 0; t < 32; ++t) {  // context ~1,056
    const auto out = run(0);
    seq.num_computed = int32_t(seq.tokens.size());
    seq.tokens.push_back(out.sampled_token_ids[0]);
  }
  auto ms_per_step = [&](int k) {
    for (int j = 0; j < k; ++j) seq.tokens.push_back(int32_t(1000 + 37 * j));  // drafts
    for (int i = 0; i < 5; ++i) run(k);  // warm-up (captures the verification graph)
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kSteps = 100;
    for (int i = 0; i < kSteps; ++i) run(k);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        kSteps;
    seq.tokens.resize(seq.tokens.size() - size_t(k));
    return ms;
  };
  const double plain = ms_per_step(0);
  for (int k : {1, 2, 4, 7}) {
    const double spec = ms_per_step(k);
    std::printf("verify 1 + %d tokens: %.3f ms per step, plain decode %.3f ms: %.3fx\n", k, spec,
                plain, spec / plain);
  }
}


namespace {

// Milliseconds per call of f, over 50 calls after 5 warm-up calls.
template <typename F>
double ms_per_call(F&& f) {
  for (int i = 0; i < 5; ++i) f();
  const auto t0 = std::chrono::steady_clock::now();
  constexpr int kCalls = 50;
  for (int i = 0; i < kCalls; ++i) f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
         kCalls;
}

// A runner of dir's config with dummy bf16 weights, and one seq of 100 tokens prefilled in it.
struct CostRun {
  runner::CudaRunner r;
  testing::TestSeq seq{0, 16, std::vector<int32_t>(100, 7)};
  SamplingParams sp;
  explicit CostRun(const std::filesystem::path& dir)
      : r(io::load_model_config(dir), nullptr, options()) {
    sp.temperature = 0.f;
    for (size_t t = 0; t < seq.tokens.size(); ++t) seq.tokens[t] = int32_t((t * 7919) % 30000);
    step(0);
    seq.num_computed = int32_t(seq.tokens.size());
    seq.tokens.push_back(42);
  }
  static runner::CudaRunnerOptions options() {
    runner::CudaRunnerOptions o;
    o.dtype = DType::kBF16;
    o.max_model_len = 4096;
    o.max_num_seqs = 64;
    o.max_num_batched_tokens = 2048;
    o.num_kv_blocks = 64;
    return o;
  }
  engine::ScheduledSeq scheduled(int k) {
    engine::ScheduledSeq x = seq.schedule();
    x.params = &sp;
    x.num_spec_tokens = k;
    return x;
  }
  // A step at the same position each time (its KV slots are rewritten): decode (k = 0) or the
  // verification of k drafts.
  void step(int k) {
    for (int j = 0; j < k; ++j) seq.tokens.push_back(int32_t(1000 + 37 * j));
    r.execute(testing::make_batch({scheduled(k)}));
    seq.tokens.resize(seq.tokens.size() - size_t(k));
  }
  void chain(int steps, bool stepwise) {
    const engine::SchedulerOutput batch = testing::make_batch({scheduled(0)});
    const std::vector<int> n{steps};
    if (stepwise)
      r.runner::ModelRunner::execute_greedy_chain(batch, n);
    else
      r.execute_greedy_chain(batch, n);
  }
};

}  // namespace

void perf_draft_cost(const std::filesystem::path& target, const std::filesystem::path& draft) {
  std::printf("== draft-model round costs, batch 1, context 100, dummy bf16, graphs\n");
  double decode = 0, verify = 0;
  if (target != "-") {  // "-": the draft alone (e.g. under a profiler)
    CostRun t(target);
    decode = ms_per_call([&] { t.step(0); });
    verify = ms_per_call([&] { t.step(4); });
    std::printf("target %s: decode step %.3f ms, verify 1 + 4 tokens %.3f ms (%.2fx)\n",
                target.filename().c_str(), decode, verify, verify / decode);
  }
  CostRun d(draft);
  const double d_decode = ms_per_call([&] { d.step(0); });
  const double chained = ms_per_call([&] { d.chain(4, false); });
  const double stepwise = ms_per_call([&] { d.chain(4, true); });
  std::printf("draft %s: decode step %.3f ms; 4-step greedy chain %.3f ms on the GPU, %.3f ms "
              "step by step\n",
              draft.filename().c_str(), d_decode, chained, stepwise);
  if (decode > 0)
    std::printf("a round of 4 drafts: %.3f ms = %.2f plain target steps\n", chained + verify,
                (chained + verify) / decode);
}

}  // namespace pagellm
