// INT4 / INT8 weight-only linear for decode batches (gemm/int_gemm.h, int_weight_stream): the
// weights and activations of each step of k go through a multi-stage cp.async pipeline into
// shared memory, so that HBM keeps streaming while the tensor cores work, and every weight is
// dequantized once per block for all m activation rows (up to 64).
//
// A block owns 128 weight rows (16 per warp: the warps own rows, not k) and one slice of k, in the
// pipeline of gemm/int_stream_pipeline.cuh. Two blocks share an SM (the issue-bound inner loop
// needs their 16 warps). A pipeline step is one 64-byte piece of every row (128 columns at 4 bits,
// 64 at 8). Shared memory per stage:
//   weights      [128 rows][64 bytes]: lane (g, t) reads 16 bytes of rows g and g + 8 at offset
//                16 t, 32 lanes reading 512 contiguous bytes;
//   activations  [8 NT rows][step columns + 8 pad], 16-byte units; at 4 bits the units of each row
//                are swizzled (unit u at u ^ 2 * bit 3 of u) so that a quarter-warp's 16-byte reads
//                hit distinct banks;
// and, once per block, the scales and zero points of its rows over its slice of k.
// The lanes' column order and the dequantization are those of gemm/int_weight_only.cu
// (int_dequant.cuh); the one-tile kernel scales the sums late (exact integers in the mma), the
// others scale each weight once (their accumulators are the tiles' own).
#include "backends/cuda/gemm/int_dequant.cuh"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/gemm/int_stream_pipeline.cuh"
#include "backends/cuda/gemm/mma.cuh"

namespace pagellm::cuda {
namespace {

using namespace intq;
using namespace intstream;

template <int BITS>
constexpr int kActUnits = kStepCols<BITS> / 8;  // 16-byte units of an activation row per step
template <int BITS>
constexpr int kActStride = (kActUnits<BITS> + 1) * 16;  // bytes: the pad makes rows odd in units

template <int BITS, int NT>
constexpr int stage_bytes() {
  return kRows * kStepBytes + 8 * NT * kActStride<BITS>;
}

// Issues the cp.async of the weight rows' step `st` into `ws` (rows past n repeat row n - 1, bytes
// past the row are zeros).
template <int BITS>
__device__ __forceinline__ void load_weight_step(const IntLinearParams& p, int row0, int st,
                                                 unsigned char* ws) {
  const int kb = p.k * BITS / 8;
  for (int c = threadIdx.x; c < kRows * 4; c += kThreads) {
    const int r = c >> 2, q = c & 3;
    const int row = min(row0 + r, p.n - 1);
    const int off = st * kStepBytes + q * 16;
    const bool valid = off < kb;
    const unsigned char* src =
        static_cast<const unsigned char*>(p.wq) + int64_t{row} * kb + (valid ? off : 0);
    cp_async16(ws + r * 64 + q * 16, src, valid ? 16 : 0);
  }
}

// Issues the cp.async of activation rows [0, min(m, 8 NT)) at step `st` into `as` (zeros past k).
template <typename T, int BITS, int NT>
__device__ __forceinline__ void load_act_step(const IntLinearParams& p, int st, unsigned char* as) {
  constexpr int kU = kActUnits<BITS>;
  const int rows = min(p.m, 8 * NT);
  for (int c = threadIdx.x; c < rows * kU; c += kThreads) {
    const int r = c / kU, u = c % kU;
    const int col = st * kStepCols<BITS> + u * 8;
    const bool valid = col < p.k;
    const T* src = static_cast<const T*>(p.x) + int64_t{r} * p.k + (valid ? col : 0);
    cp_async16(as + r * kActStride<BITS> + act_unit<BITS>(u) * 16, src, valid ? 16 : 0);
  }
}

// One pipeline step of one warp: rows g and g + 8 of its 16 against up to 8 NT activation rows.
// The mmas go across the activation tiles first (independent accumulators). LATE (one tile only):
// two accumulators alternate, and their sum is scaled into c at the end.
template <typename T, int BITS, int NT, bool LATE>
__device__ __forceinline__ void multiply_step(const IntLinearParams& p, int st,
                                              const unsigned char* ws, const unsigned char* as,
                                              const unsigned char* sc, const unsigned char* zr,
                                              const int (&sc_at)[2], const int (&zr_at)[2], int ga,
                                              float (&c)[NT][4]) {
  static_assert(!LATE || NT == 1, "late scaling keeps one tile's partial sums apart");
  constexpr int kV = kVals<BITS>;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int col = st * kStepCols<BITS> + t * 16 * (8 / BITS);
  const int group = min(col, p.k - 1) / p.group_size - ga;
  uint32_t pairs[2][kV / 2];
  float s[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 w = *reinterpret_cast<const uint4*>(ws + (warp * 16 + 8 * h + g) * 64 + t * 16);
    RawGroup<T> raw;
    raw.scale = *reinterpret_cast<const T*>(sc + sc_at[h] + group * 2);
    raw.zero = zr ? int{zr[zr_at[h] + group]} : 1 << (BITS - 1);
    const GroupConst<T, BITS> gc = group_const<T, BITS>(raw);
    dequant_piece<T, BITS, LATE>(w, gc, pairs[h]);
    s[h] = gc.scale;
  }
  // The lane's columns in the step's activation rows: kV / 8 16-byte units from unit u0.
  const int u0 = t * 16 * (8 / BITS) / 8;
  float d[2][4] = {};
#pragma unroll
  for (int v = 0; v < kV / 8; ++v) {
    uint4 b[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      if (8 * nt < p.m)
        b[nt] = *reinterpret_cast<const uint4*>(as + (8 * nt + g) * kActStride<BITS> +
                                                act_unit<BITS>(u0 + v) * 16);
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * v + jj;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (8 * nt >= p.m) break;  // warp-uniform
        mma16816<T>(LATE ? d[jj] : c[nt], pairs[0][2 * j], pairs[1][2 * j], pairs[0][2 * j + 1],
                    pairs[1][2 * j + 1], jj == 0 ? b[nt].x : b[nt].z, jj == 0 ? b[nt].y : b[nt].w);
      }
    }
  }
  if constexpr (LATE)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[0][e] = fmaf(d[0][e] + d[1][e], s[e >> 1], c[0][e]);
}

// grid: (ceil(n / 128), splits). LATE as in int_weight_only.cu (group sizes that are multiples
// of 128 at 4 bits, 64 at 8).
template <typename T, int BITS, int NT, bool LATE>
__global__ void __launch_bounds__(kThreads, 2)
    int_stream_kernel(const __grid_constant__ IntLinearParams p, const StreamGeometry geo) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kStage = stage_bytes<BITS, NT>();
  unsigned char* sc = smem + geo.stages * kStage;
  unsigned char* zr = p.zero ? sc + kRows * geo.sc_row : nullptr;
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
  const int row0 = blockIdx.x * kRows;
  const int total_steps = (p.k * BITS / 8 + kStepBytes - 1) / kStepBytes;
  const int st0 = blockIdx.y * geo.steps;
  const int st1 = min(total_steps, st0 + geo.steps);
  const int ga = st0 * kStepCols<BITS> / p.group_size;
  const int gb = (min(p.k, st1 * kStepCols<BITS>) - 1) / p.group_size;
  const int groups = p.k / p.group_size;
  auto weights_of = [&](int stage) { return smem + stage * kStage; };
  auto acts_of = [&](int stage) { return smem + stage * kStage + kRows * kStepBytes; };

  // Weights and group constants do not depend on the kernel before (PDL): issue them first.
  load_group_span(p.scale, int64_t{p.n} * groups * 2, 2, p, row0, ga, gb, geo.sc_row, sc);
  if (zr) load_group_span(p.zero, int64_t{p.n} * groups, 1, p, row0, ga, gb, geo.zr_row, zr);
  for (int s = 0; s < geo.stages - 1; ++s)
    if (st0 + s < st1) load_weight_step<BITS>(p, row0, st0 + s, weights_of(s));
  pdl_wait();
  for (int s = 0; s < geo.stages - 1; ++s) {
    if (st0 + s < st1) load_act_step<T, BITS, NT>(p, st0 + s, acts_of(s));
    cp_async_commit();
  }

  int sc_at[2], zr_at[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + 8 * h + g;
    const int row = min(row0 + r, p.n - 1);
    sc_at[h] = group_offset(p, r, row, ga, ga, 2, geo.sc_row);
    zr_at[h] = zr ? group_offset(p, r, row, ga, ga, 1, geo.zr_row) : 0;
  }
  float c[NT][4] = {};
  for (int st = st0; st < st1; ++st) {
    const int i = st - st0;
    wait_for_step(geo.stages);
    __syncthreads();
    const int ahead = st + geo.stages - 1;
    if (ahead < st1) {
      const int stage = (i + geo.stages - 1) % geo.stages;
      load_weight_step<BITS>(p, row0, ahead, weights_of(stage));
      load_act_step<T, BITS, NT>(p, ahead, acts_of(stage));
    }
    cp_async_commit();
    const int stage = i % geo.stages;
    multiply_step<T, BITS, NT, LATE>(p, st, weights_of(stage), acts_of(stage), sc, zr, sc_at, zr_at,
                                     ga, c);
  }
  pdl_launch_dependents();
  store_stream_outputs<T, NT>(p, geo, row0, c);
}

template <typename T, int BITS, int NT>
cudaError_t launch_stream(const IntLinearParams& p, cudaStream_t stream) {
  constexpr int kStage = stage_bytes<BITS, NT>();
  const StreamGeometry geo = choose_geometry(p, BITS, kStage, 2);
  if (geo.stages < 2) return cudaErrorNotSupported;  // group constants too large for the slice
  constexpr bool kLate = NT == 1;  // the one-tile kernel's late scaling, where groups allow it
  const bool late = kLate && p.group_size % (BITS == 4 ? 128 : 64) == 0;
  auto kernel =
      late ? int_stream_kernel<T, BITS, NT, kLate> : int_stream_kernel<T, BITS, NT, false>;
  cudaError_t err = late ? allow_dynamic_smem<int_stream_kernel<T, BITS, NT, kLate>>(kMaxSmem)
                         : allow_dynamic_smem<int_stream_kernel<T, BITS, NT, false>>(kMaxSmem);
  if (err != cudaSuccess) return err;
  return launch_with_splits<T>(kernel, p, geo, stream);
}

template <typename T, int BITS>
cudaError_t launch_for_m(const IntLinearParams& p, cudaStream_t stream) {
  if (p.m <= 8) return launch_stream<T, BITS, 1>(p, stream);
  if (p.m <= 16) return launch_stream<T, BITS, 2>(p, stream);
  if (p.m <= 32) return launch_stream<T, BITS, 4>(p, stream);
  return launch_stream<T, BITS, 8>(p, stream);
}

}  // namespace

cudaError_t int_weight_stream(const IntLinearParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.m > kIntWeightOnlyMaxRows) return cudaErrorInvalidValue;
  if (!aligned16(p.scale) || (p.zero && !aligned16(p.zero))) return cudaErrorNotSupported;
  if (p.m == 0) return cudaSuccess;
  if (p.dtype == DType::kBF16)
    return p.bits == 4 ? launch_for_m<__nv_bfloat16, 4>(p, stream)
                       : launch_for_m<__nv_bfloat16, 8>(p, stream);
  return p.bits == 4 ? launch_for_m<__half, 4>(p, stream) : launch_for_m<__half, 8>(p, stream);
}

}  // namespace pagellm::cuda
