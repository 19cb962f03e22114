// Per-step CPU cost of structured-output masks: 64 sequences sharing one JSON schema, each step
// every sequence's allowed-token mask is built (the timed part, what the engine does before
// sampling), then each sequence takes a random allowed token (seeded, untimed) and advances (timed
// apart: the engine does it between steps, with the GPU idle). A
// sequence that finishes starts over as a new request on the same (cached) grammar. The random
// choices depend only on the masks, so the printed checksum of the chosen tokens is the same before
// and after a change that keeps the masks exact.
//   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGELLM_BENCH=ON
//   cmake --build build -j1 --target structured_mask_bench
//   ./build/structured_mask_bench --tokenizer DIR [--vocab 128256] [--eos 128001,128009]
//       [--seqs 64] [--steps 128] [--threads 0] [--forward-ms 0] [--reuse-far-masks 1]
//       [--schema NAME|JSON]...
// --threads 0: the serial loop (Matcher::fill_mask per sequence, one thread); N > 0: the engine's
// MaskBuilder with N threads. --forward-ms F (with N > 0): the step sleeps F ms between start()
// and wait(), as the engine thread does while the GPU runs the forward pass; "exposed" is then the
// time wait() still blocks, the mask time the step sees. --reuse-far-masks 0: every new mask walks
// the whole vocabulary trie (as before near-bound masks were built from their far class's).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/mask_builder.h"
#include "structured/compiler.h"
#include "tokenizer/tokenizer.h"

namespace pagellm {
namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the whole process (every mask thread), in ms: on a shared machine wall time also
// counts the time other work held the cores.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

struct Summary {
  double mean = 0, p50 = 0, p90 = 0, max = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  for (double x : v) s.mean += x / double(v.size());
  std::sort(v.begin(), v.end());
  s.p50 = v[v.size() / 2];
  s.p90 = v[v.size() * 9 / 10];
  s.max = v.back();
  return s;
}

struct Options {
  std::string tokenizer;
  size_t vocab = 128256;
  std::vector<int32_t> eos{128001, 128009};
  int seqs = 64;
  int steps = 128;
  int threads = 0;
  double forward_ms = 0;
  bool reuse_far_masks = true;
  std::vector<std::string> schemas;
};

std::string named_schema(const std::string& name) {
  if (name == "array") return R"({"type": "array", "items": {"type": "string"}})";
  if (name == "minlength") {
    return R"({"type": "object", "properties": {"text": {"type": "string", "minLength": 4096}},)"
           R"( "required": ["text"]})";
  }
  return name;  // a schema given as JSON text
}

// The k-th set bit of `words` for a uniform k (the model's choice, as a seeded random pick).
int32_t pick(const std::vector<uint32_t>& words, std::mt19937_64& rng) {
  size_t total = 0;
  for (uint32_t w : words) total += size_t(std::popcount(w));
  if (total == 0) return -1;
  size_t k = std::uniform_int_distribution<size_t>(0, total - 1)(rng);
  for (size_t i = 0; i < words.size(); ++i) {
    const size_t n = size_t(std::popcount(words[i]));
    if (k >= n) {
      k -= n;
      continue;
    }
    uint32_t w = words[i];
    for (; k > 0; --k) w &= w - 1;
    return int32_t(i * 32 + size_t(std::countr_zero(w)));
  }
  return -1;
}

void run_schema(const Options& opt, const std::shared_ptr<const structured::Vocab>& vocab,
                const std::string& schema) {
  structured::GrammarCompiler compiler(vocab);
  StructuredOutputs spec;
  spec.json = named_schema(schema);
  const auto t0 = Clock::now();
  std::shared_ptr<structured::CompiledGrammar> grammar =
      opt.reuse_far_masks
          ? compiler.compile(spec)
          : std::make_shared<structured::CompiledGrammar>(
                std::make_shared<const structured::Grammar>(structured::build_grammar(spec, {})),
                vocab, false);
  const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  const size_t n = size_t(opt.seqs);
  std::vector<std::unique_ptr<structured::Matcher>> matchers(n);
  std::vector<std::vector<uint32_t>> masks(n, std::vector<uint32_t>(vocab->num_words()));
  for (auto& m : matchers) m = std::make_unique<structured::Matcher>(grammar);
  engine::MaskBuilder builder(opt.threads);
  std::vector<engine::MaskJob> jobs(n);
  std::mt19937_64 rng(42);
  std::vector<double> step_ms, step_cpu_ms, exposed_ms, advance_ms;
  uint64_t checksum = 0, restarts = 0;
  for (int step = 0; step < opt.steps; ++step) {
    const auto s0 = Clock::now();
    const double c0 = process_cpu_ms();
    if (opt.threads == 0) {
      for (size_t i = 0; i < n; ++i) matchers[i]->fill_mask(masks[i]);
    } else {
      for (size_t i = 0; i < n; ++i) jobs[i] = {matchers[i].get(), masks[i], {}};
      builder.start(jobs);
      if (opt.forward_ms > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.forward_ms));
        const auto w0 = Clock::now();
        builder.wait();
        exposed_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - w0).count());
      } else {
        builder.wait();
      }
    }
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - s0).count());
    step_cpu_ms.push_back(process_cpu_ms() - c0);
    std::vector<int32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) {
      tokens[i] = pick(masks[i], rng);
      checksum = checksum * 1000003 + uint64_t(tokens[i] + 1);
    }
    const auto a0 = Clock::now();
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || !matchers[i]->advance(tokens[i]) || matchers[i]->finished()) {
        matchers[i] = std::make_unique<structured::Matcher>(grammar);
        ++restarts;
      }
    }
    advance_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a0).count());
  }
  const Summary wall = summarize(step_ms), cpu = summarize(step_cpu_ms);
  std::printf(
      "schema %-9s seqs %d steps %d threads %d: compile %.1f ms; per-step mask time, wall ms: "
      "mean %.3f p50 %.3f p90 %.3f max %.3f (first step %.3f); CPU ms: mean %.3f p50 %.3f p90 "
      "%.3f max %.3f; states %zu; masks cached %zu; restarts %llu; checksum %016llx\n",
      schema.size() < 12 ? schema.c_str() : "(json)", opt.seqs, opt.steps, opt.threads, compile_ms,
      wall.mean, wall.p50, wall.p90, wall.max, step_ms.front(), cpu.mean, cpu.p50, cpu.p90, cpu.max,
      grammar->num_states(), grammar->num_cached_masks(), (unsigned long long)restarts,
      (unsigned long long)checksum);
  const structured::CompiledGrammar::MaskStats ms = grammar->mask_stats();
  std::printf(
      "  new masks (CPU ms): %zu whole-trie walks, mean %.3f, total %.1f; %zu from a far class's "
      "mask, mean %.3f, total %.1f\n",
      ms.num_full_walks, ms.num_full_walks ? ms.full_walk_cpu_ms / double(ms.num_full_walks) : 0.0,
      ms.full_walk_cpu_ms, ms.num_partial_walks,
      ms.num_partial_walks ? ms.partial_walk_cpu_ms / double(ms.num_partial_walks) : 0.0,
      ms.partial_walk_cpu_ms);
  const Summary adv = summarize(advance_ms);
  std::printf(
      "  advancing every sequence by its token, wall ms per step: mean %.3f p50 %.3f p90 %.3f\n",
      adv.mean, adv.p50, adv.p90);
  if (!exposed_ms.empty()) {
    const Summary exposed = summarize(exposed_ms);
    std::printf(
        "  with a %.1f ms forward pass: exposed mask ms: mean %.3f p50 %.3f p90 %.3f max %.3f\n",
        opt.forward_ms, exposed.mean, exposed.p50, exposed.p90, exposed.max);
  }
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string::npos) end = s.size();
    ids.push_back(int32_t(std::stol(s.substr(pos, end - pos))));
    pos = end + 1;
  }
  return ids;
}

}  // namespace
}  // namespace pagellm

int main(int argc, char** argv) {
  pagellm::Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--tokenizer")
      opt.tokenizer = value;
    else if (key == "--vocab")
      opt.vocab = size_t(std::stoul(value));
    else if (key == "--eos")
      opt.eos = pagellm::parse_ids(value);
    else if (key == "--seqs")
      opt.seqs = std::stoi(value);
    else if (key == "--steps")
      opt.steps = std::stoi(value);
    else if (key == "--threads")
      opt.threads = std::stoi(value);
    else if (key == "--forward-ms")
      opt.forward_ms = std::stod(value);
    else if (key == "--reuse-far-masks")
      opt.reuse_far_masks = value != "0";
    else if (key == "--schema")
      opt.schemas.push_back(value);
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (opt.tokenizer.empty()) {
    std::fprintf(stderr, "usage: %s --tokenizer DIR [options] (see the file's header)\n", argv[0]);
    return 2;
  }
  if (opt.schemas.empty()) opt.schemas = {"array", "minlength"};
  const auto t0 = pagellm::Clock::now();
  auto tokenizer = pagellm::tok::Tokenizer::from_dir(opt.tokenizer);
  auto vocab = pagellm::structured::Vocab::from_tokenizer(*tokenizer, opt.eos, opt.vocab);
  std::printf("vocab %zu (trie %zu nodes, longest token %u bytes), built in %.0f ms\n",
              vocab->size(), vocab->nodes().size(), vocab->max_depth(),
              std::chrono::duration<double, std::milli>(pagellm::Clock::now() - t0).count());
  for (const std::string& schema : opt.schemas) pagellm::run_schema(opt, vocab, schema);
  return 0;
}
