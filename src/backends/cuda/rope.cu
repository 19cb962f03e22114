// Rotary position embedding (rotate-half form) and the host-side inverse frequencies.
#include <algorithm>
#include <cmath>

#include "backends/cuda/kv_store.cuh"

namespace pagellm::cuda {
namespace {

constexpr int kRopeThreads = 128;

// The (cos, sin) of pair i at a token's position, rounded to T: from the table when the position
// is inside it, else computed.
template <typename T>
struct RopeAngle {
  const T* cached;  // the position's [head_dim] row of the table, or null
  float pos;
  __device__ RopeAngle(const RopeParams& p, int position)
      : cached(p.cos_sin && position >= 0 && position < p.cache_rows
                   ? static_cast<const T*>(p.cos_sin) + int64_t{position} * p.head_dim
                   : nullptr),
        pos(static_cast<float>(position)) {}
  __device__ void at(const RopeParams& p, int i, float* c, float* s) const {
    if (cached) {
      *c = to_float(cached[i]);
      *s = to_float(cached[p.head_dim / 2 + i]);
    } else {
      const float angle = pos * p.inv_freq[i];
      *c = round_to<T>(cosf(angle) * p.cos_sin_scale);
      *s = round_to<T>(sinf(angle) * p.cos_sin_scale);
    }
  }
  // Pairs i .. i + VEC - 1 (16 bytes of the table's row each for cos and sin).
  template <int VEC>
  __device__ void at_vec(const RopeParams& p, int i, float (&c)[VEC], float (&s)[VEC]) const {
    if (cached) {
      load_vec<T, VEC>(cached + i, c);
      load_vec<T, VEC>(cached + p.head_dim / 2 + i, s);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) at(p, i + e, &c[e], &s[e]);
    }
  }
};

// The rotated pair (x1, x2), each product rounded to T, then the sum; the products are never
// fused into the sum (fp32 rows then get the same bits from every kernel that rotates).
template <typename T>
__device__ __forceinline__ void rotated(float x1, float x2, float c, float s, float* r1,
                                        float* r2) {
  *r1 = round_to<T>(round_to<T>(__fmul_rn(x1, c)) - round_to<T>(__fmul_rn(x2, s)));
  *r2 = round_to<T>(round_to<T>(__fmul_rn(x2, c)) + round_to<T>(__fmul_rn(x1, s)));
}

// Rotates the pair (x[i], x[i + half]) in place; the rotated values are left in *r1, *r2.
template <typename T>
__device__ __forceinline__ void rotate_pair(T* x, int i, int half, float c, float s, T* r1, T* r2) {
  float a, b;
  rotated<T>(to_float(x[i]), to_float(x[i + half]), c, s, &a, &b);
  *r1 = from_float<T>(a);
  *r2 = from_float<T>(b);
  x[i] = *r1;
  x[i + half] = *r2;
}

// The head row of pair index j (q heads first, then k heads) of token t.
template <typename T>
__device__ __forceinline__ T* pair_row(const RopeParams& p, int64_t t, int head) {
  return head < p.num_heads
             ? static_cast<T*>(p.q) + t * p.q_token_stride + static_cast<int64_t>(head) * p.head_dim
             : static_cast<T*>(p.k) + t * p.k_token_stride +
                   static_cast<int64_t>(head - p.num_heads) * p.head_dim;  // [head_dim]
}

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
  const RopeAngle<T> angle(p, p.positions[t]);
  const int num_pairs = (p.num_heads + p.num_kv_heads) * half;
  for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < num_pairs; j += gridDim.y * blockDim.x) {
    float c, s;
    angle.at(p, j % half, &c, &s);
    T r1, r2;
    rotate_pair(pair_row<T>(p, t, j / half), j % half, half, c, s, &r1, &r2);
  }
}

// Rotates PAIRS consecutive pairs (i .. i + PAIRS) of one q or k head of token t in place and,
// for a k head with a cache row (k_row), stores them into the cache too. PAIRS == 1: 2-byte
// accesses, any head_dim; PAIRS == 16 bytes of T: one 16-byte access per half, table rows included.
template <typename T, typename S, int PAIRS>
__device__ __forceinline__ void rotate_and_store(const RopeParams& p, const RopeAngle<T>& angle,
                                                 int64_t t, int head, int i, S* k_row,
                                                 float inv_k) {
  const int half = p.head_dim / 2;
  T* x = pair_row<T>(p, t, head);
  S* kc = head >= p.num_heads && k_row ? k_row + (head - p.num_heads) * p.head_dim : nullptr;
  if constexpr (PAIRS == 1) {
    float c, s;
    angle.at(p, i, &c, &s);
    T r[2];
    rotate_pair(x, i, half, c, s, &r[0], &r[1]);
    if (!kc) return;
    store_elems<T, S, 1>(&r[0], kc + i, inv_k);
    store_elems<T, S, 1>(&r[1], kc + i + half, inv_k);
  } else {
    static_assert(PAIRS == Vec16<T>::kSize, "one 16-byte access per half");
    float c[PAIRS], s[PAIRS], x1[PAIRS], x2[PAIRS], r1[PAIRS], r2[PAIRS];
    angle.at_vec(p, i, c, s);
    load16(x + i, x1);
    load16(x + i + half, x2);
#pragma unroll
    for (int e = 0; e < PAIRS; ++e) rotated<T>(x1[e], x2[e], c[e], s[e], &r1[e], &r2[e]);
    store16(x + i, r1);
    store16(x + i + half, r2);
    if (!kc) return;
    store_vec16_elems<T, S>(r1, kc + i, inv_k);
    store_vec16_elems<T, S>(r2, kc + i + half, inv_k);
  }
}

// rope_kernel and write_kv_cache in one launch: each thread rotates PAIRS pairs of a q or k head
// (the rotated k also stored in the cache: the bits write_kv_cache would store from it); threads
// past the heads copy the token's V row into the cache VEC elements at a time. PAIRS > 1 needs
// half % PAIRS == 0 and 16-byte aligned rows of q, k and the table (rope_rows_vectorizable); the
// arithmetic per pair is the same, so the same bits.
template <typename T, typename S, int VEC, int PAIRS>
__global__ void rope_write_kv_kernel(const __grid_constant__ RopeParams p,
                                     const __grid_constant__ KvCacheWriteParams kv) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t slot = kv.slot_mapping[t];
  const bool store = slot >= 0 && slot < kv.num_slots;
  const int row = p.num_kv_heads * p.head_dim;
  const int per_head = p.head_dim / 2 / PAIRS;
  const int num_chunks = (p.num_heads + p.num_kv_heads) * per_head;
  const int work = num_chunks + (store ? row / VEC : 0);
  // x / scale as x * (1 / scale), as write_kv_cache stores it.
  const float inv_k = kIsFp8<S> && kv.k_scale ? 1.f / *kv.k_scale : 1.f;
  const float inv_v = kIsFp8<S> && kv.v_scale ? 1.f / *kv.v_scale : 1.f;
  const RopeAngle<T> angle(p, p.positions[t]);
  S* k_row = store ? static_cast<S*>(kv.k_cache) + slot * row : nullptr;
  for (int j = blockIdx.y * blockDim.x + threadIdx.x; j < work; j += gridDim.y * blockDim.x) {
    if (j >= num_chunks) {  // a piece of the V row
      const int i = (j - num_chunks) * VEC;
      store_elems<T, S, VEC>(static_cast<const T*>(kv.value) + t * kv.value_token_stride + i,
                             static_cast<S*>(kv.v_cache) + slot * row + i, inv_v);
      continue;
    }
    rotate_and_store<T, S, PAIRS>(p, angle, t, j / per_head, (j % per_head) * PAIRS, k_row, inv_k);
  }
}

template <typename T>
__global__ void rope_cache_kernel(const float* inv_freq, int half, int rows, float scale, T* out) {
  const int64_t total = int64_t{rows} * half;
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < total;
       j += int64_t{gridDim.x} * blockDim.x) {
    const int64_t pos = j / half;
    const int i = static_cast<int>(j % half);
    const float angle = static_cast<float>(pos) * inv_freq[i];
    out[pos * 2 * half + i] = from_float<T>(cosf(angle) * scale);
    out[pos * 2 * half + half + i] = from_float<T>(sinf(angle) * scale);
  }
}

}  // namespace

cudaError_t rope_cos_sin_cache(DType dtype, const float* inv_freq, int head_dim, int rows,
                               void* out, cudaStream_t stream, float scale) {
  if (head_dim <= 0 || head_dim % 2 != 0 || rows < 0) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (!inv_freq || !out) return cudaErrorInvalidValue;
  return PAGELLM_DISPATCH_DTYPE(dtype, [&] {
    rope_cache_kernel<scalar_t><<<1024, 256, 0, stream>>>(inv_freq, head_dim / 2, rows, scale,
                                                          static_cast<scalar_t*>(out));
    return launch_status();
  });
}

namespace {

// Fills the default token strides; false when the shapes or pointers are unusable.
bool prepare_rope(RopeParams& p) {
  if (p.num_tokens < 0 || p.num_heads < 0 || p.num_kv_heads < 0 || p.head_dim <= 0 ||
      p.head_dim % 2 != 0)
    return false;
  if (p.num_tokens > 0 && (!p.positions || !p.inv_freq || (p.num_heads > 0 && !p.q) ||
                           (p.num_kv_heads > 0 && !p.k)))
    return false;
  if (p.q_token_stride == 0) p.q_token_stride = static_cast<int64_t>(p.num_heads) * p.head_dim;
  if (p.k_token_stride == 0) p.k_token_stride = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  return true;
}

// Whether rope_write_kv_kernel can rotate vec pairs per access: the q and k rows and the table.
bool rope_rows_vectorizable(const RopeParams& p, int vec) {
  return (p.head_dim / 2) % vec == 0 && p.q_token_stride % vec == 0 &&
         p.k_token_stride % vec == 0 && aligned16(p.q) && aligned16(p.k) &&
         (!p.cos_sin || aligned16(p.cos_sin));
}

dim3 rope_grid(int num_tokens, int items) {
  return dim3(num_tokens, std::min((items + kRopeThreads - 1) / kRopeThreads, 65535));
}

template <typename T, typename S>
cudaError_t launch_rope_write(const RopeParams& p, const KvCacheWriteParams& kv,
                              cudaStream_t stream) {
  constexpr int kVec = Vec16<T>::kSize;
  const int pairs = (p.num_heads + p.num_kv_heads) * (p.head_dim / 2);
  const int row = p.num_kv_heads * p.head_dim;
  if constexpr (!kIsFp8<S> || kVec == 8) {
    if (kv_value_vectorizable<T, S>(kv)) {
      if (rope_rows_vectorizable(p, kVec))
        return launch_kernel(rope_write_kv_kernel<T, S, kVec, kVec>,
                             rope_grid(p.num_tokens, (pairs + row) / kVec), kRopeThreads, 0, stream,
                             p, kv);
      return launch_kernel(rope_write_kv_kernel<T, S, kVec, 1>,
                           rope_grid(p.num_tokens, pairs + row / kVec), kRopeThreads, 0, stream, p,
                           kv);
    }
  }
  return launch_kernel(rope_write_kv_kernel<T, S, 1, 1>, rope_grid(p.num_tokens, pairs + row),
                       kRopeThreads, 0, stream, p, kv);
}

}  // namespace

cudaError_t rope(const RopeParams& in, cudaStream_t stream) {
  RopeParams p = in;
  if (!prepare_rope(p)) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    const int pairs = (p.num_heads + p.num_kv_heads) * (p.head_dim / 2);
    return launch_kernel(rope_kernel<scalar_t>, rope_grid(p.num_tokens, pairs), kRopeThreads, 0,
                         stream, p);
  });
}

cudaError_t rope_and_write_kv_cache(const RopeParams& rope_in, const KvCacheWriteParams& kv_in,
                                    cudaStream_t stream) {
  RopeParams p = rope_in;
  KvCacheWriteParams kv = kv_in;
  if (!prepare_rope(p) || !prepare_kv_write(kv)) return cudaErrorInvalidValue;
  // The cache takes the rotated k: the write must describe the same rows.
  if (kv.key != p.k || kv.key_token_stride != p.k_token_stride || kv.dtype != p.dtype ||
      kv.num_tokens != p.num_tokens || kv.num_kv_heads != p.num_kv_heads ||
      kv.head_dim != p.head_dim)
    return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    return with_cache_type<scalar_t>(kv.cache_dtype, [&](auto* cache_elem) {
      return launch_rope_write<scalar_t, std::remove_pointer_t<decltype(cache_elem)>>(p, kv,
                                                                                      stream);
    });
  });
}

}  // namespace pagellm::cuda
