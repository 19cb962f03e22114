// INT4 / INT8 weight-only linear for one activation row (batch-1 decode) on tensor cores, the
// weights streamed through shared memory: y[n] = x[k] · W[n, k]ᵀ (+ bias) for the packed weight W
// of gemm/int_gemm.h, optionally with the gated MLP's activation in the epilogue.
//
// Why not the register kernel (int_weight_only.cu) at m = 1: it loads each lane's weight bytes
// straight into registers, 64 bytes of eight rows per instruction, and its chain of load, then
// dequantization, then mma held it near half the copy rate (docs/PERF.md, "INT4 / INT8 batch-1
// kernels"). This kernel is the FP8 stream kernel's design (fp8_weight_only_stream.cu) with the
// integer dequantization of int_dequant.cuh:
//  - a block owns 16 weight rows (one m16 tile; gated: 8 gate rows and their 8 up rows) and its 4
//    warps split k in 128-byte chunks of every row, streamed as whole lines into shared stages of
//    each warp's own (gemm/gemv_line_stream.cuh);
//  - a chunk is two rounds of 64 bytes. In round u, lane (g, t) reads 16 bytes of rows g and g + 8
//    at piece 4u + t (32 columns at 4 bits, 16 at 8, all in one group). That is the register
//    kernel's lane layout, so its dequantization and mma order apply unchanged. Piece q of row r
//    sits at q ^ 4 (r % 2), which puts a quarter-warp's two rows in different banks;
//  - x is staged once per block. At 4 bits its 16-byte units are swizzled as in
//    int_weight_stream.cu (act_unit), so that the four t's reads hit distinct banks;
//  - the rows' scales and zero points over all of k are staged once per block too.
// Where a group spans a whole round (group sizes that are multiples of 128 at 4 bits, 64 at 8),
// the mmas take the exact q - z and each round's sums are scaled in fp32 (LATE). Otherwise each
// weight is scaled first, rounded once to the dtype (int_gemm.h's contract). LATE 8-bit weights
// multiply in f16 whatever the model's dtype: x staged as f16 (gemv_stage_x.cuh), q - z exact in
// f16 without a conversion to bf16 (+23 % at INT8 batch 1 on bf16 models, docs/PERF.md). At 4 bits
// the bf16 path measured faster than the f16 one, whose staging of x costs a block-wide maximum.
// Every B column holds x, so column 0 of the accumulator is the product. The warps' sums meet in
// shared memory.
#include <cstring>
#include <type_traits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/gemv_line_stream.cuh"
#include "backends/cuda/gemm/gemv_stage_x.cuh"
#include "backends/cuda/gemm/int_dequant.cuh"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/gemm/mma.cuh"

namespace pagellm::cuda {
namespace {

using namespace intq;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = kLineRows;    // weight rows per block: one m16 tile
constexpr int kChunk = kLineChunk;  // bytes of a row per warp per stage: one line
constexpr int kStages = 4;          // a warp's chunks in flight or being read
constexpr int kTileBytes = WarpLineStream<kStages, kWarps>::kTileBytes;
constexpr int kMaxK = 32768;      // x staged in its dtype: at most 64 KB
constexpr int kMaxGroups = 1024;  // per row: a 4-byte constant each, at most 64 KB
constexpr int kMaxSmem = kTileBytes + kMaxK * 2 + kRows * kMaxGroups * 4;

template <int BITS>
constexpr int kChunkCols = kChunk * 8 / BITS;

// Dynamic shared memory of a launch: the weight stages, x up to the last chunk's columns, and the
// group constants.
struct GemvLayout {
  int k_pad, groups;
  int bytes() const { return kTileBytes + k_pad * 2 + kRows * groups * 4; }
};

template <int BITS>
GemvLayout layout_of(const IntLinearParams& p) {
  const int num_chunks = (p.k * BITS / 8 + kChunk - 1) / kChunk;
  return {num_chunks * kChunkCols<BITS>, p.k / p.group_size};
}

template <typename T>
__device__ __forceinline__ T from_bits(uint32_t bits16) {
  const uint16_t b = uint16_t(bits16);
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}

// Tile row r's group constants, as stored: the scale's 16 bits, then the zero point (rows past the
// end repeat the last row).
template <typename T, int BITS, bool kGated>
__device__ void stage_groups(const IntLinearParams& p, int out0, int groups, uint32_t* gs) {
  for (int i = threadIdx.x; i < kRows * groups; i += kThreads) {
    const int r = i / groups, grp = i - r * groups;
    const int64_t at = int64_t{weight_row<kRows, kGated>(p.n, out0, r)} * groups + grp;
    uint16_t s;
    memcpy(&s, static_cast<const T*>(p.scale) + at, sizeof s);
    const uint32_t z = p.zero ? p.zero[at] : 1u << (BITS - 1);
    gs[i] = s | z << 16;
  }
}

// x (k values) into xs in its own dtype as 16-byte units, unit u at act_unit(u), zeros up to
// k_pad; ends with a barrier.
template <typename T, int BITS>
__device__ void stage_x_as_is(const T* x, int k, int k_pad, T* xs) {
  for (int u = threadIdx.x; u < k_pad / 8; u += kThreads) {
    const uint4 v = u * 8 < k ? *reinterpret_cast<const uint4*>(x + u * 8) : make_uint4(0, 0, 0, 0);
    reinterpret_cast<uint4*>(xs)[act_unit<BITS>(u)] = v;
  }
  __syncthreads();
}

// The group constants of a table entry for the multiply in C: in f16 for a bf16 model (LATE), the
// zero point in f16 and the scale (of T) in fp32; otherwise C is T.
template <typename T, typename C, int BITS>
__device__ __forceinline__ GroupConst<C, BITS> constants_of(uint32_t entry) {
  if constexpr (std::is_same_v<C, T>) {
    return group_const<C, BITS>({from_bits<T>(entry), int(entry >> 16)});
  } else {
    GroupConst<C, BITS> gc = group_const<C, BITS>({C(0.f), int(entry >> 16)});
    gc.scale = to_float(from_bits<T>(entry));
    return gc;
  }
}

// The product of the lane's piece of rows g and g + 8 (w_lo, w_hi, their group constants) with x
// at the piece's columns, added into acc (LATE: the exact integers' sums, then scaled).
template <typename T, typename C, int BITS, bool LATE>
__device__ __forceinline__ void multiply_piece(const uint4& w_lo, const uint4& w_hi, uint32_t c_lo,
                                               uint32_t c_hi, const C* xs, int col,
                                               float (&acc)[4]) {
  constexpr int kV = kVals<BITS>;
  const GroupConst<C, BITS> gl = constants_of<T, C, BITS>(c_lo);
  const GroupConst<C, BITS> gh = constants_of<T, C, BITS>(c_hi);
  uint32_t lo[kV / 2], hi[kV / 2], b[kV / 2];
  dequant_piece<C, BITS, LATE>(w_lo, gl, lo);
  dequant_piece<C, BITS, LATE>(w_hi, gh, hi);
#pragma unroll
  for (int v = 0; v < kV / 8; ++v) {
    const uint4 q = reinterpret_cast<const uint4*>(xs)[act_unit<BITS>(col / 8 + v)];
    b[4 * v] = q.x, b[4 * v + 1] = q.y, b[4 * v + 2] = q.z, b[4 * v + 3] = q.w;
  }
  float d[2][4] = {};
#pragma unroll
  for (int j = 0; j < kV / 4; ++j)  // LATE: two accumulators, two dependency chains
    mma16816<C>(LATE ? d[j & 1] : acc, lo[2 * j], hi[2 * j], lo[2 * j + 1], hi[2 * j + 1], b[2 * j],
                b[2 * j + 1]);
  if constexpr (LATE) {
    acc[0] = fmaf(d[0][0] + d[1][0], gl.scale, acc[0]);
    acc[2] = fmaf(d[0][2] + d[1][2], gh.scale, acc[2]);
  }
}

// The block's finished sums (warps' partials in `partial`) as outputs: + bias, gated: silu(gate)
// times up with silu_and_mul's roundings.
template <typename T, bool kGated>
__device__ void store_outputs(const IntLinearParams& p, int out0,
                              const float (&partial)[kWarps][kRows]) {
  const int lane = threadIdx.x & 31;
  auto finished = [&](int r, int row) {
    float s = partial[0][r];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += partial[w][r];
    return p.bias ? s + to_float(static_cast<const T*>(p.bias)[row]) : s;
  };
  T* y = static_cast<T*>(p.y);
  const int out = out0 + lane;
  if constexpr (kGated) {
    const int inner = p.n / 2;
    if (lane >= kRows / 2 || out >= inner) return;
    const float gate = round_to<T>(finished(lane, out));
    const float up = round_to<T>(finished(lane + kRows / 2, inner + out));
    y[out] = from_float<T>(silu_mul<T>(gate, up));
  } else {
    if (lane >= kRows || out >= p.n) return;
    y[out] = from_float<T>(finished(lane, out));
  }
}

// grid: ceil(outputs / outputs per block); 16 (gated: 8) outputs a block. Dynamic shared memory as
// GemvLayout. C: the dtype of the multiply (f16 for LATE 8-bit weights, else T).
template <typename T, int BITS, bool kGated, bool LATE>
__global__ void __launch_bounds__(kThreads)
    int_gemv_kernel(const __grid_constant__ IntLinearParams p, const GemvLayout L) {
  using C = std::conditional_t<LATE && BITS == 8, __half, T>;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float partial[kWarps][kRows];
  __shared__ float scratch[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int out0 = blockIdx.x * (kGated ? kRows / 2 : kRows);
  const int kb = p.k * BITS / 8;  // bytes of a packed row
  C* xs = reinterpret_cast<C*>(smem + kTileBytes);
  uint32_t* gs = reinterpret_cast<uint32_t*>(smem + kTileBytes + L.k_pad * 2);

  // Piece q of row r sits at q ^ 4 (r % 2): a quarter-warp's two rows in different banks.
  const WarpLineStream<kStages, kWarps> lines(
      smem, kb,
      [&](int r) {
        return static_cast<const uint8_t*>(p.wq) +
               int64_t{weight_row<kRows, kGated>(p.n, out0, r)} * kb;
      },
      [](int r, int q) { return q ^ ((r & 1) << 2); });
  // The weights and their constants do not depend on the kernel before (common.cuh: programmatic
  // dependent launch).
  lines.start();
  stage_groups<T, BITS, kGated>(p, out0, L.groups, gs);
  pdl_wait();
  if (lines.all_started()) pdl_launch_dependents();
  const T* x = static_cast<const T*>(p.x);
  float x_unscale = 1.f;
  if constexpr (!std::is_same_v<C, T>)  // 8 bits: units in order (act_unit<8> is the identity)
    x_unscale = stage_x_f16<kThreads>(x, p.k, L.k_pad, xs, scratch);
  else
    stage_x_as_is<T, BITS>(x, p.k, L.k_pad, xs);

  const float inv_group = 1.f / float(p.group_size);
  const uint32_t* gs_lo = gs + g * L.groups;
  const uint32_t* gs_hi = gs + (g + 8) * L.groups;
  const int rd_lo = g * kChunk, rd_hi = (g + 8) * kChunk, swz = (g & 1) << 2;  // rows g, g + 8
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int i = 0; i < lines.chunks(); ++i) {
    const uint8_t* stage = lines.next(i);
    const int col0 = lines.offset(i) * (8 / BITS);  // the chunk's first column
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int at = ((4 * u + t) ^ swz) * 16;
      const uint4 w_lo = *reinterpret_cast<const uint4*>(stage + rd_lo + at);
      const uint4 w_hi = *reinterpret_cast<const uint4*>(stage + rd_hi + at);
      const int col = col0 + (4 * u + t) * kVals<BITS>;
      // Columns past k (a partial last chunk) read the last group; their x is zero.
      const int grp = min(int((float(col) + 0.5f) * inv_group), L.groups - 1);
      multiply_piece<T, C, BITS, LATE>(w_lo, w_hi, gs_lo[grp], gs_hi[grp], xs, col, acc);
    }
  }
  lines.drain();

  // Column 0 of the accumulator: c[0] is row g, c[2] row g + 8 (lanes t == 0).
  if (t == 0) {
    partial[warp][g] = acc[0] * x_unscale;
    partial[warp][g + 8] = acc[2] * x_unscale;
  }
  __syncthreads();
  if (warp == 0) store_outputs<T, kGated>(p, out0, partial);
}

template <typename T, int BITS, bool kGated, bool LATE>
cudaError_t launch(const IntLinearParams& p, cudaStream_t stream) {
  constexpr auto kernel = int_gemv_kernel<T, BITS, kGated, LATE>;
  if (const cudaError_t e = allow_dynamic_smem<kernel>(kMaxSmem); e != cudaSuccess) return e;
  const int outs_per_block = kGated ? kRows / 2 : kRows, outs = kGated ? p.n / 2 : p.n;
  const GemvLayout L = layout_of<BITS>(p);
  const dim3 grid((outs + outs_per_block - 1) / outs_per_block);
  return launch_kernel(kernel, grid, kThreads, size_t(L.bytes()), stream, p, L);
}

template <typename T, int BITS>
cudaError_t launch_bits(const IntLinearParams& p, bool gated, cudaStream_t stream) {
  // LATE where each round's 64 bytes (128 columns at 4 bits, 64 at 8) lie in one group.
  if (p.group_size % (64 * 8 / BITS) == 0)
    return gated ? launch<T, BITS, true, true>(p, stream) : launch<T, BITS, false, true>(p, stream);
  return gated ? launch<T, BITS, true, false>(p, stream) : launch<T, BITS, false, false>(p, stream);
}

}  // namespace

cudaError_t int_weight_gemv(const IntLinearParams& p, bool gated, cudaStream_t stream) {
  if (p.m != 1 || p.k > kMaxK || p.group_size <= 0 || p.k / p.group_size > kMaxGroups)
    return cudaErrorNotSupported;
  if (gated && p.n % 2 != 0) return cudaErrorInvalidValue;
  if (p.dtype == DType::kBF16)
    return p.bits == 4 ? launch_bits<__nv_bfloat16, 4>(p, gated, stream)
                       : launch_bits<__nv_bfloat16, 8>(p, gated, stream);
  return p.bits == 4 ? launch_bits<__half, 4>(p, gated, stream)
                     : launch_bits<__half, 8>(p, gated, stream);
}

}  // namespace pagellm::cuda
