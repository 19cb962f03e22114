// Greedy sampling on the GPU with the CPU sampler's semantics (engine/sampler.cpp) for rows that
// have no bans, penalties or top-N logprobs: NaN counts as -inf and +inf as the largest float; the
// token is the lowest id among the maximal logits; its logprob is x - (max + log Σ exp(x - max)),
// with float exponentials summed in double. Only (token, logprob) per row leaves the GPU.
#include <cfloat>
#include <climits>

#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kSampleThreads = 1024;

__device__ __forceinline__ float clean(float x) {
  if (x != x) return -INFINITY;
  return x > FLT_MAX ? FLT_MAX : x;
}

// (value, id) maximum with the lower id winning ties.
__device__ __forceinline__ void better(float& v, int& id, float v2, int id2) {
  if (v2 > v || (v2 == v && id2 < id)) {
    v = v2;
    id = id2;
  }
}

// One block per row: [vocab] logits of T.
template <typename T>
__global__ void __launch_bounds__(kSampleThreads)
    greedy_kernel(const __grid_constant__ GreedySampleParams p) {
  __shared__ float s_v[32];
  __shared__ int s_id[32];
  __shared__ double s_sum[32];
  const T* x =
      static_cast<const T*>(p.logits) + static_cast<int64_t>(blockIdx.x) * p.vocab;  // [vocab]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float best = -INFINITY;
  int best_id = INT_MAX;
  for (int i = threadIdx.x; i < p.vocab; i += blockDim.x)
    better(best, best_id, clean(to_float(x[i])), i);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    better(best, best_id, __shfl_xor_sync(0xffffffffu, best, o),
           __shfl_xor_sync(0xffffffffu, best_id, o));
  if (lane == 0) {
    s_v[warp] = best;
    s_id[warp] = best_id;
  }
  __syncthreads();
  best = s_v[0];
  best_id = s_id[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) better(best, best_id, s_v[w], s_id[w]);
  if (best == -INFINITY) {  // every logit -inf: the host sampler's fallback decides
    if (threadIdx.x == 0) {
      p.tokens[blockIdx.x] = -1;
      p.logprobs[blockIdx.x] = -INFINITY;
    }
    return;
  }
  double sum = 0.0;
  for (int i = threadIdx.x; i < p.vocab; i += blockDim.x)
    sum += double(expf(clean(to_float(x[i])) - best));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) s_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += s_sum[w];
    p.tokens[blockIdx.x] = best_id;
    // clean(x[best]) == best, so the logprob is -log(total).
    p.logprobs[blockIdx.x] = static_cast<float>(double(best) - (double(best) + log(total)));
  }
}

}  // namespace

cudaError_t greedy_sample(const GreedySampleParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.vocab <= 0) return cudaErrorInvalidValue;
  if (p.num_rows == 0) return cudaSuccess;
  if (!p.logits || !p.tokens || !p.logprobs) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    greedy_kernel<scalar_t><<<p.num_rows, kSampleThreads, 0, stream>>>(p);
    return launch_status();
  });
}

}  // namespace pagellm::cuda
