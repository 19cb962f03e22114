// Greedy rows over several blocks, included only by sampler.cu. A plain greedy row (temperature 0;
// no bans, penalties, biases, top logprobs or scoring; a structured-output mask allowed) needs only
// the clean row's argmax and its log-sum-exp (the chosen token's logprob). The row's one block of
// sample_kernel spent ~30 us of a batch-1 step on those two passes at a 128k vocabulary (H100 and
// H200, docs/PERF.md): one SM streaming the row. When sample() knows the rows
// (SampleParams::host_rows), greedy_chunk_kernel first splits each plain greedy row into chunks of
// kGreedyChunk ids, a block each, which leave their best (value, id) and their sum of exp(x - the
// chunk's max) in the row's weight scratch; the row's block of sample_kernel then merges the chunks
// (greedy_merge_chunks). The token is the same; the log-sum-exp differs from the one-block sum only
// in rounding (each chunk's sum rescaled to the row's max in double).
#pragma once

#include "backends/cuda/sampler_block.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kGreedyChunk = 8192;                 // ids per block of greedy_chunk_kernel
constexpr int kGreedyMinVocab = 2 * kGreedyChunk;  // below, the one-block pass is as quick
constexpr int kGreedyMaxRows = 65535;              // the chunk kernel's grid.y

__host__ __device__ inline bool plain_greedy(const SampleRow& r) {
  return r.temperature == 0.0f && r.num_top <= 0 && r.score_token < 0 &&
         r.num_banned + r.num_prompt + r.num_output + r.num_bias == 0;
}

__host__ __device__ inline int greedy_chunks(int vocab) {
  return (vocab + kGreedyChunk - 1) / kGreedyChunk;
}

// One chunk's partial result, as four 32-bit words per chunk at the start of the row's weight
// scratch (4 * chunks <= vocab words from kGreedyMinVocab up; word-aligned whatever the vocab).
struct GreedyPartial {
  float m;     // the chunk's best clean value (-inf: every id masked or NaN)
  int id;      // its lowest id
  double sum;  // sum over the chunk of exp(x - m) (0 when m is -inf)

  __device__ void store(float* scratch, int chunk) const {
    uint32_t* wd = reinterpret_cast<uint32_t*>(scratch) + 4 * chunk;
    const unsigned long long bits = __double_as_longlong(sum);
    wd[0] = __float_as_uint(m);
    wd[1] = uint32_t(id);
    wd[2] = uint32_t(bits);
    wd[3] = uint32_t(bits >> 32);
  }
  __device__ static GreedyPartial load(const float* scratch, int chunk) {
    const uint32_t* wd = reinterpret_cast<const uint32_t*>(scratch) + 4 * chunk;
    const unsigned long long bits = (static_cast<unsigned long long>(wd[3]) << 32) | wd[2];
    return {__uint_as_float(wd[0]), int(wd[1]), __longlong_as_double(bits)};
  }
};

struct GreedySmem {  // what block_argmax / block_sum use
  double red_d[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
};

// grid: (greedy_chunks(vocab), num_rows). Blocks of rows that are not plain greedy exit at once.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    greedy_chunk_kernel(const __grid_constant__ SampleParams p) {
  __shared__ GreedySmem s;
  const SampleRow r = p.rows[blockIdx.y];
  if (!plain_greedy(r)) return;
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kPerThread = kGreedyChunk / kThreads;
  static_assert(kPerThread % kVec == 0, "whole vectors per thread");
  const int vocab = p.vocab;
  const T* logits = static_cast<const T*>(p.logits) + int64_t(blockIdx.y) * vocab;
  const uint32_t* mask = row_mask(p, r);
  const int begin = blockIdx.x * kGreedyChunk, end = min(vocab, begin + kGreedyChunk);
  // With 16-byte rows a thread's ids come as whole vectors inside [begin, end) (vocab % 8 == 0).
  const bool vec = vector_row(logits, logits, vocab);
  float v[kPerThread];
  float m = -INFINITY;
  int m_id = INT_MAX;
#pragma unroll
  for (int j = 0; j < kPerThread / kVec; ++j) {
    const int t0 = begin + (j * kThreads + int(threadIdx.x)) * kVec;
    float f[kVec];
    if (vec && t0 < end) load16(logits + t0, f);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const int id = t0 + e;
      float x = -INFINITY;
      if (id < end) {  // the clean logit, -inf where the mask disallows it (load_clean_row)
        x = clean(vec ? f[e] : to_float(logits[id]));
        if (!mask_allows(mask, r.num_mask_words, id)) x = -INFINITY;
        if (better(x, id, m, m_id)) m = x, m_id = id;
      }
      v[j * kVec + e] = x;
    }
  }
  block_argmax(m, m_id, s);
  double sum = 0.0;
  if (m > -INFINITY)
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) sum += double(expf(v[i] - m));
  sum = block_sum(sum, s);
  if (threadIdx.x == 0)
    GreedyPartial{m, m_id, sum}.store(p.weights + int64_t(blockIdx.y) * vocab, blockIdx.x);
}

// The row's best (value, id) and log-sum-exp from its chunks (every thread gets them).
__device__ void greedy_merge_chunks(Smem& s, const float* scratch, int vocab, float& m, int& m_id,
                                    double& lse) {
  const int chunks = greedy_chunks(vocab);
  m = -INFINITY;
  m_id = INT_MAX;
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    const GreedyPartial g = GreedyPartial::load(scratch, c);
    if (better(g.m, g.id, m, m_id)) m = g.m, m_id = g.id;
  }
  block_argmax(m, m_id, s);
  double sum = 0.0;
  if (m > -INFINITY)
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      const GreedyPartial g = GreedyPartial::load(scratch, c);
      if (g.m > -INFINITY) sum += g.sum * exp(double(g.m) - double(m));
    }
  sum = block_sum(sum, s);  // its barriers follow every thread's reads: the scratch is free again
  lse = m > -INFINITY ? double(m) + log(sum) : -INFINITY;
}

}  // namespace
}  // namespace pagellm::cuda
