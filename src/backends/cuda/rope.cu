// Rotary position embedding (rotate-half form) and the host-side inverse frequencies.
#include <algorithm>
#include <cmath>

#include "backends/cuda/common.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kRopeThreads = 128;

// grid: (num_tokens, ceil(pairs / kRopeThreads)); each thread rotates one (x[i], x[i + half]) pair
// of a q or k head (one memory round trip per thread: a loop over the token's pairs made this a
// latency chain of ~20 loads, the slowest small kernel of a decode step). Rounds like
// transformers' apply_rotary_pos_emb in the model dtype: cos/sin cast to T, each product rounded,
// then the sum.
template <typename T>
__global__ void rope_kernel(const __grid_constant__ RopeParams p) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int half = p.head_dim / 2;
  const int position = p.positions[t];
  const float pos = static_cast<float>(position);
  const T* cached = p.cos_sin && position >= 0 && position < p.cache_rows
                        ? static_cast<const T*>(p.cos_sin) + int64_t{position} * p.head_dim
                        : nullptr;
  const int num_pairs = (p.num_heads + p.num_kv_heads) * half;
  for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < num_pairs; j += gridDim.y * blockDim.x) {
    const int head = j / half;
    const int i = j % half;
    T* x =
        head < p.num_heads
            ? static_cast<T*>(p.q) + t * p.q_token_stride + static_cast<int64_t>(head) * p.head_dim
            : static_cast<T*>(p.k) + t * p.k_token_stride +
                  static_cast<int64_t>(head - p.num_heads) * p.head_dim;  // [head_dim]
    float c, s;
    if (cached) {
      c = to_float(cached[i]);
      s = to_float(cached[half + i]);
    } else {
      const float angle = pos * p.inv_freq[i];
      c = round_to<T>(cosf(angle));
      s = round_to<T>(sinf(angle));
    }
    const float x1 = to_float(x[i]);
    const float x2 = to_float(x[i + half]);
    x[i] = from_float<T>(round_to<T>(x1 * c) - round_to<T>(x2 * s));
    x[i + half] = from_float<T>(round_to<T>(x2 * c) + round_to<T>(x1 * s));
  }
}

template <typename T>
__global__ void rope_cache_kernel(const float* inv_freq, int half, int rows, T* out) {
  const int64_t total = int64_t{rows} * half;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < total;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t pos = j / half;
    const int i = static_cast<int>(j % half);
    const float angle = static_cast<float>(pos) * inv_freq[i];
    out[pos * 2 * half + i] = from_float<T>(cosf(angle));
    out[pos * 2 * half + half + i] = from_float<T>(sinf(angle));
  }
}

}  // namespace

cudaError_t rope_cos_sin_cache(DType dtype, const float* inv_freq, int head_dim, int rows, void* out,
                               cudaStream_t stream) {
  if (head_dim <= 0 || head_dim % 2 != 0 || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!inv_freq || !out) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    rope_cache_kernel<scalar_t>
        <<<1024, 256, 0, stream>>>(inv_freq, head_dim / 2, rows, static_cast<scalar_t*>(out));
    return launch_status();
  });
}

cudaError_t rope(const RopeParams& in, cudaStream_t stream) {
  RopeParams p = in;
  if (p.num_tokens < 0 || p.num_heads < 0 || p.num_kv_heads < 0 || p.head_dim <= 0 ||
      p.head_dim % 2 != 0)
    return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  if (!p.positions || !p.inv_freq || (p.num_heads > 0 && !p.q) || (p.num_kv_heads > 0 && !p.k))
    return cudaErrorInvalidValue;
  if (p.q_token_stride == 0) p.q_token_stride = static_cast<int64_t>(p.num_heads) * p.head_dim;
  if (p.k_token_stride == 0) p.k_token_stride = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    const int pairs = (p.num_heads + p.num_kv_heads) * (p.head_dim / 2);
    const dim3 grid(p.num_tokens, std::min((pairs + kRopeThreads - 1) / kRopeThreads, 65535));
    return launch_kernel(rope_kernel<scalar_t>, grid, kRopeThreads, 0, stream, p);
  });
}

// Follows transformers' rope initialisers, which compute in float32: exponent 2i/d in float, the
// power rounded to float, then scaling.
void rope_inv_freq(int head_dim, double theta, const RopeScalingSpec& scaling, float* inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    float f = 1.0f / power;
    if (scaling.type == RopeScalingType::kLinear) {
      f = static_cast<float>(f / scaling.factor);
    } else if (scaling.type == RopeScalingType::kLlama3) {
      const double old_len = scaling.original_max_position_embeddings;
      const double low_wavelen = old_len / scaling.low_freq_factor;
      const double high_wavelen = old_len / scaling.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / scaling.factor);  // long wavelengths: fully interpolated
      } else if (wavelen >= high_wavelen) {
        // Medium band: blend between interpolated and original frequency.
        const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = static_cast<float>((1.0 - smooth) * f / scaling.factor + smooth * f);
      }
    }
    inv_freq[i] = f;
  }
}

}  // namespace pagellm::cuda
