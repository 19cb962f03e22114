// Device-side dummy weights, bit-compatible with the CPU loader's RandomSource before rounding.
#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// out[r, c] (dense [rows, cols]) gets the number of element r * row_stride + c after key.
template <typename T>
__global__ void fill_uniform_kernel(T* out, int64_t rows, int64_t cols, int64_t row_stride,
                                    uint64_t key, double bound) {
  const int64_t count = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i - r * cols;
    const double u =
        static_cast<double>(splitmix64(key + uint64_t(r * row_stride + c)) >> 11) * 0x1.0p-53;
    out[i] = from_float<T>(static_cast<float>((2.0 * u - 1.0) * bound));
  }
}

template <typename T>
__global__ void fill_constant_kernel(T* out, int64_t count, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(value);
}

}  // namespace

cudaError_t fill_uniform(DType dtype, void* out, int64_t rows, int64_t cols, int64_t row_stride,
                         uint64_t key, double bound, cudaStream_t stream) {
  if (rows < 0 || cols < 0 || row_stride < cols || (rows * cols > 0 && !out))
    return cudaErrorInvalidValue;
  if (rows * cols == 0) return cudaSuccess;
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    fill_uniform_kernel<scalar_t><<<2048, 256, 0, stream>>>(static_cast<scalar_t*>(out), rows,
                                                           cols, row_stride, key, bound);
    return launch_status();
  });
}

cudaError_t fill_constant(DType dtype, void* out, int64_t count, float value, cudaStream_t stream) {
  if (count < 0 || (count > 0 && !out)) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    fill_constant_kernel<scalar_t>
        <<<1024, 256, 0, stream>>>(static_cast<scalar_t*>(out), count, value);
    return launch_status();
  });
}

}  // namespace pagellm::cuda
