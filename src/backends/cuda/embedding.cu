// Embedding lookup: out[t, :] = table[token_ids[t], :] (times p.scale: Gemma).
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

// One block per token. VEC elements per access (16 bytes when the row allows it, else 1).
template <typename T, int VEC>
__global__ void embedding_kernel(const __grid_constant__ EmbeddingParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int t = blockIdx.x;
  const int id = p.token_ids[t] - p.id_offset;
  T* out = static_cast<T*>(p.out) + static_cast<int64_t>(t) * p.hidden;  // [hidden]
  const bool valid = id >= 0 && id < p.vocab_size;
  const T* row = static_cast<const T*>(p.table) + static_cast<int64_t>(valid ? id : 0) * p.hidden;
  for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
    if constexpr (VEC > 1) {
      Vec16<T> v{};
      if (valid) v = *reinterpret_cast<const Vec16<T>*>(row + i);
      if (p.scale != 1.f)
#pragma unroll
        for (int e = 0; e < VEC; ++e) v.v[e] = from_float<T>(to_float(v.v[e]) * p.scale);
      *reinterpret_cast<Vec16<T>*>(out + i) = v;
    } else {
      out[i] = valid ? from_float<T>(to_float(row[i]) * p.scale) : from_float<T>(0.f);
    }
  }
}

}  // namespace

cudaError_t embedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden <= 0 || p.vocab_size <= 0) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.token_ids || !p.table || !p.out) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    constexpr int kVec = Vec16<scalar_t>::kSize;
    const bool vec = p.hidden % kVec == 0 && aligned16(p.table) && aligned16(p.out);
    return launch_kernel(vec ? embedding_kernel<scalar_t, kVec> : embedding_kernel<scalar_t, 1>,
                         p.num_tokens, 256, 0, stream, p);
  });
}

}  // namespace pagellm::cuda
