// GPU sampler (cuda::sample) against the CPU sampler (engine::sample_token / compute_logprobs) on
// the same fp32 rows: random batches mixing row shapes (peaked, flat, quantized ties, NaN/inf,
// all-NaN, all-banned) and sampling parameters (greedy, temperatures, top-k / top-p / min-p and
// their combinations, penalties over long id lists with duplicates and out-of-vocab ids, top-N
// logprobs, prompt-logprob score rows, logit_bias, allowed-token masks). Every row must give the
// CPU's token (the suite reports any mismatch with its u), logprobs within 1e-4 and the same top-N
// ids. Plus a timing of the sampler.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels.h"
#include "device_test_util.h"
#include "engine/sampler.h"

namespace pagellm::cuda::test {
namespace {

template <typename T>
struct Dev {
  T* ptr = nullptr;
  explicit Dev(size_t n) { CK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  ~Dev() { cudaFree(ptr); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

enum RowKind { kPeaked, kFlat, kTies, kNanInf, kAllNan, kAllBanned, kRealistic, kNumKinds };
const char* kKindNames[] = {"peaked", "flat", "ties", "nan_inf", "all_nan", "all_banned", "real"};

struct Case {
  const char* name;
  SamplingParams params;
  bool score = false;      // a prompt-logprob row
  bool penalties = false;  // long prompt/output lists
};

std::vector<Case> cases(int vocab) {
  auto p = [](float t) {
    SamplingParams s;
    s.temperature = t;
    return s;
  };
  std::vector<Case> c;
  c.push_back({"greedy", p(0.0f)});
  {
    Case g{"greedy+pen+lp5", p(0.0f), false, true};
    g.params.repetition_penalty = 1.3f;
    g.params.logprobs = 5;
    c.push_back(g);
  }
  c.push_back({"T0.7", p(0.7f)});
  {
    Case k{"T1+lp20", p(1.0f)};
    k.params.logprobs = 20;
    c.push_back(k);
  }
  for (int k : {1, 5, 50, vocab + 1}) {
    Case x{"", p(1.5f)};
    x.name = k == 1 ? "T1.5 k1" : k == 5 ? "T1.5 k5" : k == 50 ? "T1.5 k50" : "T1.5 kV+1";
    x.params.top_k = k;
    c.push_back(x);
  }
  for (float tp : {0.1f, 0.9f, 1.0f}) {
    Case x{tp == 0.1f ? "p0.1" : tp == 0.9f ? "p0.9" : "p1", p(1.0f)};
    x.params.top_p = tp;
    c.push_back(x);
  }
  {
    Case x{"minp0.05", p(1.0f)};
    x.params.min_p = 0.05f;
    c.push_back(x);
  }
  {
    Case x{"T0.8 k50 p0.9 lp5", p(0.8f)};
    x.params.top_k = 50;
    x.params.top_p = 0.9f;
    x.params.logprobs = 5;
    c.push_back(x);
  }
  {
    Case x{"T0.9 k40 p0.95 minp", p(0.9f)};
    x.params.top_k = 40;
    x.params.top_p = 0.95f;
    x.params.min_p = 0.05f;
    c.push_back(x);
  }
  {
    Case x{"pen rep1.2 f0.5 pr0.3 p0.9", p(1.0f), false, true};
    x.params.repetition_penalty = 1.2f;
    x.params.frequency_penalty = 0.5f;
    x.params.presence_penalty = 0.3f;
    x.params.top_p = 0.9f;
    c.push_back(x);
  }
  {
    Case x{"pen rep0.8 f-0.5 pr-0.2 lp3", p(1.2f), false, true};
    x.params.repetition_penalty = 0.8f;
    x.params.frequency_penalty = -0.5f;
    x.params.presence_penalty = -0.2f;
    x.params.logprobs = 3;
    c.push_back(x);
  }
  {
    Case x{"T0.5 p0.5", p(0.5f)};
    x.params.top_p = 0.5f;
    c.push_back(x);
  }
  {
    Case x{"k3000 p0.99", p(1.0f)};
    x.params.top_k = 3000;
    x.params.top_p = 0.99f;
    c.push_back(x);
  }
  {
    Case x{"freq only k20", p(1.0f), false, true};
    x.params.frequency_penalty = 1.0f;
    x.params.top_k = 20;
    c.push_back(x);
  }
  // The fast path's branches (sampler_fast.cuh): top-k with min-p, min-p alone at a high
  // temperature, top-k of the whole vocabulary with top-p, wide and narrow top-p prefixes.
  {
    Case x{"k5 minp0.2", p(1.0f)};
    x.params.top_k = 5;
    x.params.min_p = 0.2f;
    c.push_back(x);
  }
  {
    Case x{"T2 minp0.5", p(2.0f)};
    x.params.min_p = 0.5f;
    c.push_back(x);
  }
  {
    Case x{"kV p0.8", p(1.0f)};
    x.params.top_k = vocab;
    x.params.top_p = 0.8f;
    c.push_back(x);
  }
  {
    Case x{"T3 p0.999", p(3.0f)};
    x.params.top_p = 0.999f;
    c.push_back(x);
  }
  {
    Case x{"T0.05 p0.9 minp0.1", p(0.05f)};
    x.params.top_p = 0.9f;
    x.params.min_p = 0.1f;
    c.push_back(x);
  }
  {
    Case x{"k2000 T1", p(1.0f)};
    x.params.top_k = 2000;
    c.push_back(x);
  }
  c.push_back({"score lp5", p(1.0f), true});
  c.push_back({"score lp20", p(1.0f), true});
  return c;
}

// One test row: its fp32 logits (already rounded to the dtype) and its sampling context.
struct Row {
  int kind = 0;
  int case_index = 0;
  std::vector<int32_t> prompt, output, banned;
  std::vector<uint32_t> mask;  // a structured-output / allowed_token_ids mask on some rows
  SamplingParams params;  // the case's, plus a random logit_bias on some rows
  uint64_t seed = 0;
  int32_t score_token = 0;
  int score_n = 0;
};

void fill_row(std::mt19937_64& rng, DType t, int kind, bool allow_inf, int vocab, float* x) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> col(0, vocab - 1);
  for (int i = 0; i < vocab; ++i) {
    float v = 0.0f;
    switch (kind) {
      case kFlat:
        v = (unit(rng) - 0.5f) * 0.1f;
        break;
      case kTies:
        v = float(int(unit(rng) * 4.0f));
        break;
      case kAllNan:
        v = NAN;
        break;
      case kRealistic:
        v = normal(rng) * 3.0f - 2.0f;
        break;
      default:
        v = normal(rng) * 2.0f;
        break;
    }
    x[i] = round_to(t, v);
  }
  if (kind == kPeaked || kind == kNanInf || kind == kAllBanned || kind == kRealistic)
    for (int s = 0; s < 5; ++s) x[col(rng)] = round_to(t, 15.0f + 5.0f * unit(rng));
  if (kind == kNanInf) {
    for (int s = 0; s < 8; ++s) x[col(rng)] = NAN;
    for (int s = 0; s < 8; ++s) x[col(rng)] = -INFINITY;
    if (allow_inf && unit(rng) < 0.5f) x[col(rng)] = INFINITY;
  }
}

std::vector<int32_t> random_ids(std::mt19937_64& rng, int n, int vocab) {
  std::uniform_int_distribution<int> col(0, vocab - 1), hot(0, 30);
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    const int r = hot(rng);
    ids.push_back(r == 0 ? -1 : r == 1 ? vocab + r : r < 12 ? r : col(rng));  // dups, out of vocab
  }
  return ids;
}

// An allowed-token mask as the engine packs it: a few allowed ids (one of them often among the
// row's peaks), a denser random half, or a mask that stops short of the vocabulary (ids past its
// end are disallowed).
std::vector<uint32_t> random_mask(std::mt19937_64& rng, int vocab) {
  const int words = (vocab + 31) / 32;
  std::vector<uint32_t> mask(static_cast<size_t>(words), 0u);
  switch (rng() % 3) {
    case 0:
      for (int k = 0; k < 3; ++k) {
        const uint64_t id = rng() % uint64_t(vocab);
        mask[id / 32] |= 1u << (id % 32);
      }
      break;
    case 1:
      for (uint32_t& w : mask) w = uint32_t(rng()) & uint32_t(rng());  // about a quarter allowed
      break;
    default:
      for (uint32_t& w : mask) w = uint32_t(rng());
      mask.resize(size_t(std::max(1, words / 3)));
      break;
  }
  return mask;
}

struct SuiteResult {
  int passed = 0, failed = 0;
};

// One mixed batch of `num_rows` rows for (vocab, dtype); returns whether every row matched.
// host_rows: the sampler is told the rows (as the runner does), so plain greedy rows of large
// vocabularies take the chunked pass (sampler_greedy.cuh).
bool run_batch(DType t, int vocab, int num_rows, uint64_t seed, bool host_rows, SuiteResult& res) {
  std::mt19937_64 rng(seed);
  const std::vector<Case> cs = cases(vocab);
  std::vector<float> logits(size_t(num_rows) * vocab);  // [num_rows, vocab]
  std::vector<Row> rows(static_cast<size_t>(num_rows));
  std::vector<SampleRow> srows(static_cast<size_t>(num_rows));
  std::vector<int32_t> ids;
  std::uniform_int_distribution<int> len(0, 600);
  for (int r = 0; r < num_rows; ++r) {
    Row& row = rows[size_t(r)];
    row.case_index = int(rng() % cs.size());
    row.kind = int(rng() % kNumKinds);
    const Case& c = cs[size_t(row.case_index)];
    const bool allow_inf = c.params.repetition_penalty >= 1.0f;
    fill_row(rng, t, row.kind, allow_inf, vocab, &logits[size_t(r) * vocab]);
    row.seed = rng();
    row.output = random_ids(rng, c.penalties ? len(rng) : int(rng() % 40), vocab);
    row.prompt = random_ids(rng, c.penalties ? 3 * len(rng) : 10, vocab);
    if (row.kind == kAllBanned) {
      // Every id banned (small vocabularies), or the first 4096 banned and every other logit NaN
      // (the CPU's fallback search is quadratic in the number of banned ids).
      const int num_banned = std::min(vocab, 4096);
      for (int i = 0; i < num_banned; ++i) row.banned.push_back(i);
      row.banned.push_back(3);
      for (int i = num_banned; i < vocab; ++i) logits[size_t(r) * vocab + size_t(i)] = NAN;
    } else if (rng() % 3 == 0) {
      row.banned = {int32_t(rng() % vocab), 0, 1, int32_t(vocab + 7)};
    }
    row.score_token = int32_t(rng() % vocab);
    row.score_n = std::string(c.name) == "score lp20" ? 20 : 5;
    row.params = c.params;
    if (rng() % 3 == 0) {
      // Distinct ids (some banned or penalized too, one out of the vocabulary), biases in [-100, 100].
      std::vector<int32_t> bias_ids = {0, 2, int32_t(rng() % vocab), int32_t(vocab + 3)};
      if (!row.banned.empty()) bias_ids.push_back(row.banned[0]);
      if (!row.output.empty() && row.output[0] >= 0) bias_ids.push_back(row.output[0]);
      std::sort(bias_ids.begin(), bias_ids.end());
      bias_ids.erase(std::unique(bias_ids.begin(), bias_ids.end()), bias_ids.end());
      for (int32_t id : bias_ids)
        row.params.logit_bias.emplace_back(id, float(int(rng() % 2001) - 1000) / 10.0f);
    }
    if (!c.score && rng() % 4 == 0) row.mask = random_mask(rng, vocab);
    SampleRow& s = srows[size_t(r)];
    if (c.score) {
      s.score_token = row.score_token;
      s.num_top = row.score_n;
      continue;
    }
    // The runner's packing (runner/sample_pack.cpp), restated: this binary links no pagellm_core.
    const SamplingParams& p = row.params;
    s.u = p.greedy() ? 0.0 : engine::sample_uniform(row.seed, row.output.size());
    s.temperature = p.temperature;
    s.top_p = p.top_p;
    s.min_p = p.min_p;
    s.repetition_penalty = p.repetition_penalty;
    s.frequency_penalty = p.frequency_penalty;
    s.presence_penalty = p.presence_penalty;
    s.top_k = p.top_k;
    s.num_top = p.logprobs.value_or(0);
    s.ids_begin = int32_t(ids.size());
    s.num_banned = int32_t(row.banned.size());
    ids.insert(ids.end(), row.banned.begin(), row.banned.end());
    const bool rep = p.repetition_penalty != 1.0f;
    if (rep) {
      s.num_prompt = int32_t(row.prompt.size());
      ids.insert(ids.end(), row.prompt.begin(), row.prompt.end());
    }
    if (rep || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
      s.num_output = int32_t(row.output.size());
      ids.insert(ids.end(), row.output.begin(), row.output.end());
    }
    if (!row.mask.empty()) {
      s.mask_begin = int32_t(ids.size());
      s.num_mask_words = int32_t(row.mask.size());
      for (uint32_t word : row.mask) ids.push_back(std::bit_cast<int32_t>(word));
    }
    if (!p.logit_bias.empty()) {
      s.bias_begin = int32_t(ids.size());
      s.num_bias = int32_t(p.logit_bias.size());
      for (const auto& [id, bias] : p.logit_bias) {
        ids.push_back(id);
        ids.push_back(std::bit_cast<int32_t>(bias));
      }
    }
  }
  const std::vector<uint8_t> raw = encode(t, logits);
  Dev<uint8_t> d_logits(raw.size());
  Dev<SampleRow> d_rows(srows.size());
  Dev<int32_t> d_ids(ids.size());
  Dev<float> d_work(logits.size()), d_weights(logits.size());
  Dev<SampleOutput> d_out(static_cast<size_t>(num_rows));
  CK(cudaMemcpy(d_logits.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_rows.ptr, srows.data(), srows.size() * sizeof(SampleRow),
                 cudaMemcpyHostToDevice));
  if (!ids.empty()) CK(cudaMemcpy(d_ids.ptr, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  SampleParams sp;
  sp.dtype = t;
  sp.logits = d_logits.ptr;
  sp.num_rows = num_rows;
  sp.vocab = vocab;
  sp.rows = d_rows.ptr;
  sp.ids = d_ids.ptr;
  sp.work = d_work.ptr;
  sp.weights = d_weights.ptr;
  sp.out = d_out.ptr;
  sp.host_rows = host_rows ? srows.data() : nullptr;
  if (std::getenv("PAGELLM_SAMPLER_ONE_ROW")) {
    // Diagnostics: one launch per row (rules out interference between the rows of a launch).
    for (int r = 0; r < num_rows; ++r) {
      SampleParams one = sp;
      one.logits = d_logits.ptr + raw.size() / size_t(num_rows) * size_t(r);
      one.num_rows = 1;
      one.rows = d_rows.ptr + r;
      one.host_rows = host_rows ? srows.data() + r : nullptr;
      one.work = d_work.ptr + size_t(r) * size_t(vocab);
      one.weights = d_weights.ptr + size_t(r) * size_t(vocab);
      one.out = d_out.ptr + r;
      CK(sample(one, nullptr));
      CK(cudaDeviceSynchronize());
    }
  } else {
    CK(sample(sp, nullptr));
  }
  CK(cudaDeviceSynchronize());
  std::vector<SampleOutput> out(static_cast<size_t>(num_rows));
  CK(cudaMemcpy(out.data(), d_out.ptr, out.size() * sizeof(SampleOutput), cudaMemcpyDeviceToHost));
  int dumped = 0;
  // Diagnostics for the first mismatching rows: the kernel's fp32 working row and scratch.
  auto dump = [&](int r, int cpu_token) {
    if (!std::getenv("PAGELLM_SAMPLER_DEBUG") || dumped++ >= 4) return;
    std::vector<float> xr(static_cast<size_t>(vocab)), wr(static_cast<size_t>(vocab));
    CK(cudaMemcpy(xr.data(), d_work.ptr + size_t(r) * vocab, xr.size() * 4,
                   cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(wr.data(), d_weights.ptr + size_t(r) * vocab, wr.size() * 4,
                   cudaMemcpyDeviceToHost));
    const size_t esz = raw.size() / (size_t(num_rows) * size_t(vocab));
    std::vector<uint8_t> lr(size_t(vocab) * esz);
    CK(cudaMemcpy(lr.data(), d_logits.ptr + size_t(r) * vocab * esz, lr.size(),
                   cudaMemcpyDeviceToHost));
    const bool same_input =
        std::memcmp(lr.data(), raw.data() + size_t(r) * vocab * esz, lr.size()) == 0;
    int finite = 0, best = 0;
    for (int i = 0; i < vocab; ++i) {
      finite += std::isfinite(xr[size_t(i)]);
      if (xr[size_t(i)] > xr[size_t(best)]) best = i;
    }
    uint32_t w0, w1, w2;
    std::memcpy(&w0, &wr[0], 4);
    std::memcpy(&w1, &wr[1], 4);
    std::memcpy(&w2, &wr[2], 4);
    const SampleOutput& o = out[size_t(r)];
    std::printf(
        "    debug row %d: x finite %d, x argmax %d (%g), x[0..2] %g %g %g, x[cpu %d] %g, "
        "x[gpu %d] %g, w bits[0..2] %08x %08x %08x, out token %d logprob %g (bits %08x), "
        "device logits row %s the host's\n",
        r, finite, best, xr[size_t(best)], xr[0], xr[1], xr[2], cpu_token, xr[size_t(cpu_token)],
        o.token, o.token >= 0 && o.token < vocab ? xr[size_t(o.token)] : 0.f, w0, w1, w2, o.token,
        o.logprob, std::bit_cast<uint32_t>(o.logprob), same_input ? "equals" : "DIFFERS FROM");
  };

  int bad_tokens = 0, bad_lp = 0;
  double max_lp_err = 0.0;
  auto lp_close = [&](float a, float b) {
    if (std::isinf(a) || std::isinf(b)) return a == b;
    max_lp_err = std::max(max_lp_err, double(std::fabs(a - b)));
    return std::fabs(a - b) <= 1e-4f;
  };
  for (int r = 0; r < num_rows; ++r) {
    const Row& row = rows[size_t(r)];
    const Case& c = cs[size_t(row.case_index)];
    std::vector<float> x(logits.begin() + ptrdiff_t(size_t(r) * vocab),
                         logits.begin() + ptrdiff_t(size_t(r + 1) * vocab));
    TokenLogprobs ref;
    if (c.score) {
      ref = engine::compute_logprobs(x, row.score_token, row.score_n);
    } else {
      engine::ScheduledSeq seq;
      seq.params = &row.params;
      seq.seed = row.seed;
      seq.prompt_token_ids = row.prompt;
      seq.output_token_ids = row.output;
      seq.banned_token_ids = row.banned;
      seq.allowed_token_mask = row.mask;
      ref = engine::sample_token(x, seq).logprobs;
    }
    const SampleOutput& o = out[size_t(r)];
    bool ok = o.token == ref.token_id && lp_close(o.logprob, ref.logprob) &&
              size_t(o.num_top) == ref.top.size();
    if (!ok) dump(r, ref.token_id);
    if (o.token != ref.token_id) {
      ++bad_tokens;
      std::printf("    row %d (%s, %s): cpu token %d, gpu token %d, u=%.17g\n", r,
                  kKindNames[row.kind], c.name, ref.token_id, o.token,
                  c.score ? 0.0 : engine::sample_uniform(row.seed, row.output.size()));
    }
    for (size_t i = 0; ok && i < ref.top.size(); ++i)
      ok = o.top_ids[i] == ref.top[i].first && lp_close(o.top_logprobs[i], ref.top[i].second);
    if (!ok && o.token == ref.token_id) {
      ++bad_lp;
      std::printf("    row %d (%s, %s): logprobs differ (gpu %g cpu %g, top %d vs %zu)\n", r,
                  kKindNames[row.kind], c.name, o.logprob, ref.logprob, o.num_top, ref.top.size());
    }
  }
  const bool ok = bad_tokens == 0 && bad_lp == 0;
  (ok ? res.passed : res.failed) += 1;
  std::printf(
      "  %s sampler %-5s vocab=%-6d rows=%-4d%s token mismatches %d, logprob mismatches %d, "
      "max logprob error %.2e\n",
      ok ? "ok  " : "FAIL", dname(t), vocab, num_rows, host_rows ? " host rows" : "", bad_tokens,
      bad_lp, max_lp_err);
  return ok;
}

}  // namespace

void sampler_suite(const std::string& filter, int& passed, int& failed) {
  if (!filter.empty() && std::string("sampler").find(filter) == std::string::npos &&
      filter.find("sampler") == std::string::npos)
    return;
  SuiteResult res;
  uint64_t seed = 77;
  // Each batch twice from 32k ids: one block per row, then with the rows known on the host (the
  // chunked greedy pass); 50,257 (odd) takes its scalar loads.
  for (int vocab : {512, 32000, 50257, 128256, 151936})
    for (DType t : {DType::kBF16, DType::kF16, DType::kF32}) {
      const int rows = vocab <= 512 ? 1024 : vocab <= 32000 ? 256 : 96;
      for (bool host_rows : {false, true}) {
        if (host_rows && vocab <= 512) continue;
        run_batch(t, vocab, rows, seed, host_rows, res);
      }
      ++seed;
    }
  passed += res.passed;
  failed += res.failed;
}

// Sampler time per step for the common production setting (bf16 logits, T 0.8, top-k 50, top-p
// 0.9) on realistic rows, and the CPU sampler's time per row for comparison.
void sampler_bench() {
  const int vocab = 128256;
  std::mt19937_64 rng(5);
  const int max_rows = 256;
  std::vector<float> logits(size_t(max_rows) * vocab);
  for (int r = 0; r < max_rows; ++r)
    fill_row(rng, DType::kBF16, kRealistic, false, vocab, &logits[size_t(r) * vocab]);
  const std::vector<uint8_t> raw = encode(DType::kBF16, logits);
  Dev<uint8_t> d_logits(raw.size());
  CK(cudaMemcpy(d_logits.ptr, raw.data(), raw.size(), cudaMemcpyHostToDevice));
  Dev<SampleRow> d_rows(static_cast<size_t>(max_rows));
  Dev<float> d_work(logits.size()), d_weights(logits.size());
  Dev<SampleOutput> d_out(static_cast<size_t>(max_rows));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  struct Setting {
    const char* name;
    float temperature, top_p;
    int top_k;
  };
  // The production setting first; greedy and plain temperature show the floor of the passes.
  // Rows are given on the host, as the runner does, except "greedy, one block" (the chunked
  // greedy pass beside the one-block one).
  for (const Setting& set :
       {Setting{"T0.8 top-k 50 top-p 0.9", 0.8f, 0.9f, 50}, Setting{"greedy", 0.0f, 1.0f, -1},
        Setting{"greedy, one block", 0.0f, 1.0f, -1}, Setting{"T0.8", 0.8f, 1.0f, -1},
        Setting{"T0.8 top-p 0.9", 0.8f, 0.9f, -1}, Setting{"T0.8 top-k 50", 0.8f, 1.0f, 50}}) {
    std::vector<SampleRow> srows(static_cast<size_t>(max_rows));
    for (int r = 0; r < max_rows; ++r) {
      srows[size_t(r)].temperature = set.temperature;
      srows[size_t(r)].top_k = set.top_k;
      srows[size_t(r)].top_p = set.top_p;
      srows[size_t(r)].u = engine::sample_uniform(uint64_t(r), 0);
    }
    CK(cudaMemcpy(d_rows.ptr, srows.data(), srows.size() * sizeof(SampleRow),
                   cudaMemcpyHostToDevice));
    for (int batch : {1, 64, 256}) {
      SampleParams sp;
      sp.dtype = DType::kBF16;
      sp.logits = d_logits.ptr;
      sp.num_rows = batch;
      sp.vocab = vocab;
      sp.rows = d_rows.ptr;
      sp.work = d_work.ptr;
      sp.weights = d_weights.ptr;
      sp.out = d_out.ptr;
      sp.host_rows = std::strcmp(set.name, "greedy, one block") == 0 ? nullptr : srows.data();
      CK(sample(sp, nullptr));
      CK(cudaDeviceSynchronize());
      const int iters = 20;
      CK(cudaEventRecord(e0));
      for (int i = 0; i < iters; ++i) CK(sample(sp, nullptr));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      std::printf("sampler bench: vocab %d bf16 %-24s batch %3d: %8.1f us/step\n", vocab, set.name,
                  batch, 1000.0 * ms / iters);
    }
  }
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 50;
  p.top_p = 0.9f;
  engine::ScheduledSeq seq;
  seq.params = &p;
  const int cpu_rows = 64;
  std::vector<float> row(static_cast<size_t>(vocab));
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < cpu_rows; ++r) {
    std::copy_n(&logits[size_t(r) * vocab], vocab, row.data());
    seq.seed = uint64_t(r);
    engine::sample_token(row, seq);
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  std::printf("sampler bench: CPU engine::sample_token, same rows: %.1f us/row (one thread)\n",
              us / cpu_rows);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace pagellm::cuda::test
