// RMSNorm, optionally fused with the residual add that precedes it in every Llama-family layer.
#include <algorithm>
#include <iterator>

#include "backends/cuda/common.cuh"
#include "backends/cuda/fp8_act_quant.cuh"

namespace pagellm::cuda {
namespace {

// The normed value of one element: transformers computes weight * (x * inv).to(dtype), two
// roundings in bf16/f16.
// Gemma (unit_offset): x * inv * (1 + w) in fp32, one rounding.
template <typename T>
__device__ __forceinline__ float normed(float x, float w, float inv, bool unit_offset) {
  return unit_offset ? round_to<T>(x * inv * (1.f + w)) : round_to<T>(w * round_to<T>(x * inv));
}

// A row that kSlices rounds of the block cover (hidden <= kSlices * blockDim * VEC): x, the
// residual and the weight are loaded together and kept in registers, so the row costs one memory
// round trip instead of two (the same operations as the two-pass loop below). Prefill-sized rows
// take 256 threads and several slices each: more rows in flight per SM and smaller barriers.
template <typename T, int VEC, bool kFp8, int kSlices>
__device__ __forceinline__ void norm_row_in_registers(const RmsNormParams& p, const T* x, T* res,
                                                      T* out, const T* w, float* scratch) {
  float v[kSlices][VEC], wv[kSlices][VEC];
  float sumsq = 0.f;
#pragma unroll
  for (int k = 0; k < kSlices; ++k) {
    const int i = (threadIdx.x + k * blockDim.x) * VEC;
    if (i >= p.hidden) continue;
    load_vec<T, VEC>(x + i, v[k]);
    load_vec<T, VEC>(w + i, wv[k]);
    if (res) {
      float r[VEC];
      load_vec<T, VEC>(res + i, r);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[k][j] = round_to<T>(v[k][j] + r[j]);
      store_vec<T, VEC>(res + i, v[k]);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) sumsq += v[k][j] * v[k][j];
  }
  const float inv = rsqrtf(block_sum(sumsq, scratch) / p.hidden + p.eps);
  float o[kSlices][VEC];
  float amax = 0.f;
#pragma unroll
  for (int k = 0; k < kSlices; ++k) {
    const int i = (threadIdx.x + k * blockDim.x) * VEC;
    const bool active = i < p.hidden;
#pragma unroll
    for (int j = 0; j < VEC; ++j)
      o[k][j] = active ? normed<T>(v[k][j], wv[k][j], inv, p.unit_offset) : 0.f;
    if (active && out) store_vec<T, VEC>(out + i, o[k]);
    amax = abs_max(o[k], amax);
  }
  if constexpr (kFp8) {
    const float s = p.fp8.group ? 0.f : fp8_act_scale(block_max(amax, scratch));
    if (threadIdx.x == 0 && !p.fp8.group) p.fp8.scale[blockIdx.x] = s;
#pragma unroll
    for (int k = 0; k < kSlices; ++k) {  // every lane calls: group scales shuffle across lanes
      const int i = (threadIdx.x + k * blockDim.x) * VEC;
      quantize_to_fp8_out(p.fp8, blockIdx.x, p.num_rows, p.hidden, i, o[k], s, i < p.hidden);
    }
  }
}

// Rows of more than one round: the sum of squares, then the normed row (and, per-row FP8, its
// amax), then with a per-row FP8 copy a third pass that quantizes it. Each thread owns the same
// VEC-wide slices in every pass, so `out` may alias `x` and later passes re-read only this
// thread's own writes.
template <typename T, int VEC, bool kFp8>
__device__ __forceinline__ void norm_row_in_passes(const RmsNormParams& p, const T* x, T* res,
                                                   T* out, const T* w, float* scratch) {
  float sumsq = 0.f;
  for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
    float v[VEC];
    load_vec<T, VEC>(x + i, v);
    if (res) {
      // The residual stream is stored in the model dtype, so the sum is rounded before use.
      float r[VEC];
      load_vec<T, VEC>(res + i, r);
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[j] = round_to<T>(v[j] + r[j]);
      store_vec<T, VEC>(res + i, v);
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) sumsq += v[j] * v[j];
  }
  const float inv = rsqrtf(block_sum(sumsq, scratch) / p.hidden + p.eps);
  const T* src = res ? res : x;
  auto normed_slice = [&](int i, float(&o)[VEC]) {
    float v[VEC], wv[VEC];
    load_vec<T, VEC>(src + i, v);
    load_vec<T, VEC>(w + i, wv);
#pragma unroll
    for (int j = 0; j < VEC; ++j) o[j] = normed<T>(v[j], wv[j], inv, p.unit_offset);
  };
  float amax = 0.f;
  // With 128-column groups, hidden % 128 == 0: a warp's 128 columns are all in or all out.
  for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
    float o[VEC];
    normed_slice(i, o);
    if (out) store_vec<T, VEC>(out + i, o);
    if constexpr (kFp8) {
      if (p.fp8.group)
        quantize_to_fp8_out(p.fp8, blockIdx.x, p.num_rows, p.hidden, i, o, 0.f, true);
      amax = abs_max(o, amax);
    }
  }
  if constexpr (kFp8) {
    if (p.fp8.group) return;
    const float s = fp8_act_scale(block_max(amax, scratch));
    if (threadIdx.x == 0) p.fp8.scale[blockIdx.x] = s;
    for (int i = threadIdx.x * VEC; i < p.hidden; i += blockDim.x * VEC) {
      float o[VEC];
      normed_slice(i, o);
      quantize_to_fp8_out(p.fp8, blockIdx.x, p.num_rows, p.hidden, i, o, s, true);
    }
  }
}

// One block per row.
template <typename T, int VEC, bool kFp8, int kSlices = 1>
__global__ void __launch_bounds__(1024) rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t offset = p.rows_per_group > 0
                             ? (blockIdx.x / p.rows_per_group) * p.group_stride +
                                   int64_t(blockIdx.x % p.rows_per_group) * p.hidden
                             : int64_t(blockIdx.x) * p.hidden;
  const T* x = static_cast<const T*>(p.x) + offset;                      // [hidden]
  T* res = p.residual ? static_cast<T*>(p.residual) + offset : nullptr;  // [hidden]
  T* out = p.out ? static_cast<T*>(p.out) + offset : nullptr;            // [hidden]
  const bool second = p.second_weight && p.rows_per_group > 0 &&
                      int(blockIdx.x % p.rows_per_group) >= p.second_rows_from;
  const T* w = static_cast<const T*>(second ? p.second_weight : p.weight);  // [hidden]
  if (p.hidden <= kSlices * int(blockDim.x) * VEC)  // block-uniform: the row fits the registers
    norm_row_in_registers<T, VEC, kFp8, kSlices>(p, x, res, out, w, scratch);
  else
    norm_row_in_passes<T, VEC, kFp8>(p, x, res, out, w, scratch);
}

bool fp8_out_valid(const RmsNormParams& p) {
  const Fp8Out& q = p.fp8;
  return p.dtype != DType::kF32 && p.rows_per_group == 0 && p.hidden % 16 == 0 && q.scale &&
         aligned16(q.q) && (q.group == 0 || (q.group == kFp8Block && p.hidden % kFp8Block == 0));
}

// Whether every row, the residual, the output and the weights start on 16 bytes and the hidden
// size is a multiple of vec (16 bytes of the dtype).
bool rows_take_vec(const RmsNormParams& p, int vec) {
  if (p.hidden % vec != 0 || (p.rows_per_group > 0 && p.group_stride % vec != 0)) return false;
  const void* ptrs[] = {p.x, p.residual, p.out, p.weight, p.second_weight};
  return std::all_of(std::begin(ptrs), std::end(ptrs),
                     [](const void* ptr) { return !ptr || aligned16(ptr); });
}

// Rows of 16-byte slices: one per thread, except in prefill-sized steps (more than 256 rows) with
// rows of more than 384 slices (hidden 4096 in 16-bit is 512): there 256 threads with 2 or 4 slices
// each (add + norm at 2,048 x 4,096: 27.6 -> 23.8 us on an H200), but at a few rows the longer
// chain per thread costs (1 row: 3.1 -> 3.8 us); past 4 x 256 slices the two-pass loop.
template <typename T, int VEC, bool kFp8>
cudaError_t launch_norm(const RmsNormParams& p, int threads, cudaStream_t stream) {
  if constexpr (VEC * sizeof(T) == 16) {
    const int slices = p.num_rows > 256 ? p.hidden / VEC : 0;
    if (slices > 384 && slices <= 2 * 256)
      return launch_kernel(rms_norm_kernel<T, VEC, kFp8, 2>, p.num_rows, 256, 0, stream, p);
    if (slices > 384 && slices <= 4 * 256)
      return launch_kernel(rms_norm_kernel<T, VEC, kFp8, 4>, p.num_rows, 256, 0, stream, p);
  }
  return launch_kernel(rms_norm_kernel<T, VEC, kFp8>, p.num_rows, threads, 0, stream, p);
}

}  // namespace

cudaError_t rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.hidden <= 0) return cudaErrorInvalidValue;
  if (p.num_rows == 0) return cudaSuccess;
  if (!p.x || !p.weight || (!p.out && !p.fp8.on())) return cudaErrorInvalidValue;
  if (p.second_weight && (p.rows_per_group <= 0 || p.second_rows_from < 0))
    return cudaErrorInvalidValue;
  if (p.fp8.on() && !fp8_out_valid(p)) return cudaErrorInvalidValue;
  // 16 bytes per access where every row and the weights allow it, else 4 or 1 elements; small
  // rows (per-head norms) get small blocks.
  const int vec16 = int(16 / dtype_size(p.dtype));
  const int vec = rows_take_vec(p, vec16) ? vec16 : p.hidden % 4 == 0 ? 4 : 1;
  const int threads = std::clamp((p.hidden / vec + 31) / 32 * 32, 32, 1024);
  if (p.fp8.on()) {  // 16-bit rows (fp8_out_valid)
    if (p.dtype == DType::kBF16)
      return vec == 8 ? launch_norm<__nv_bfloat16, 8, true>(p, threads, stream)
                      : launch_norm<__nv_bfloat16, 4, true>(p, threads, stream);
    return vec == 8 ? launch_norm<__half, 8, true>(p, threads, stream)
                    : launch_norm<__half, 4, true>(p, threads, stream);
  }
  return PAGELLM_DISPATCH_DTYPE(p.dtype, [&] {
    constexpr int kVec16 = int(16 / sizeof(scalar_t));
    if (vec == kVec16) return launch_norm<scalar_t, kVec16, false>(p, threads, stream);
    return vec == 4 ? launch_norm<scalar_t, 4, false>(p, threads, stream)
                    : launch_norm<scalar_t, 1, false>(p, threads, stream);
  });
}

}  // namespace pagellm::cuda
