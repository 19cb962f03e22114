// SiLU-and-mul, the gated activation of Llama-family MLPs.
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

// grid: (num_tokens, column chunks). transformers computes silu(gate) in the model dtype and then
// multiplies, so both products are rounded to T.
template <typename T>
__global__ void silu_and_mul_kernel(const __grid_constant__ SiluAndMulParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* gate = static_cast<const T*>(p.x) + t * 2 * p.inner;  // [inner]
  const T* up = gate + p.inner;                                  // [inner]
  T* out = static_cast<T*>(p.out) + t * p.inner;                 // [inner]
  for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < p.inner; i += gridDim.y * blockDim.x) {
    const float g = to_float(gate[i]);
    const float s = round_to<T>(g / (1.f + expf(-g)));
    out[i] = from_float<T>(s * to_float(up[i]));
  }
}

}  // namespace

cudaError_t silu_and_mul(const SiluAndMulParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.inner <= 0) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.x || !p.out) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    const int threads = 256;
    int chunks = (p.inner + threads * 4 - 1) / (threads * 4);
    dim3 grid(p.num_tokens, chunks > 0 ? chunks : 1);
    return launch_kernel(silu_and_mul_kernel<scalar_t>, grid, threads, 0, stream, p);
  });
}

}  // namespace pagellm::cuda
