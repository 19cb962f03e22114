// INT4 weight-only linear for decode batches on Hopper's warpgroup MMA (gemm/int_gemm.h,
// int_weight_wgmma): the pipeline of gemm/int_stream_pipeline.cuh (a block of 128 weight rows, two
// warpgroups of 64, one slice of k; 64 packed bytes of every row and 128 columns of every
// activation row per step, through a cp.async ring in shared memory), with each step's
// multiplication as one warpgroup MMA per 16 columns:
//  - A, the dequantized weights, in registers: each warp's 16 rows in mma.sync's m16n8k16 A layout;
//  - B, the activations, read by the tensor cores straight from shared memory: no warp loads
//    activation fragments, and all 8 NT activation rows cost one instruction per 16 columns.
// The activation tile of a step is the K-major, 128-byte-swizzled layout of attention/wgmma.cuh:
// [8 NT rows, 128 columns] as two column blocks of [8 NT, 64]. B's columns are in their natural
// order, so lane t's A registers of 16-column slice j must hold columns 16 j + 2t, + 1 (a0 / a1)
// and 16 j + 8 + 2t, + 1 (a2 / a3): nibbles t and t + 4 of packed words 2j and 2j + 1
// (gemm/int_gemm.h's nibble order). The four lanes of a quad read the same 16-byte pieces (one
// broadcast; piece q of row r sits at q ^ (bits 1-2 of r), so that a warp's eight rows hit distinct
// banks) and each takes its own nibble pair of every word: one shift, one mask-and-magic and one
// subtraction per pair, exact q - z. The groups are whole steps (multiples of 128 columns), so each
// step's sums are scaled into the fp32 accumulators once, as int_weight_stream's LATE kernels do.
//
// The main loop is kept lean (a step's instructions are the dequantization, the MMAs and the
// scaling): every thread's cp.async sources and destinations are computed once and advanced by a
// constant per step, the ring positions and the group index are counted rather than divided, and
// shared memory is addressed from the dynamic array so that the loads stay in the shared window.
#include "backends/cuda/attention/wgmma.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/int_dequant.cuh"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/gemm/int_stream_pipeline.cuh"

namespace pagellm::cuda {
namespace {

using namespace intq;
using namespace intstream;
namespace wgmma = attention::wgmma;

constexpr int kStepColumns = kStepCols<4>;       // 128
constexpr int kWeightTile = kRows * kStepBytes;  // 8 KB of packed weights per stage
constexpr int kMinSteps = 8;                     // per k slice: its pipeline start amortised

template <int NT>
constexpr int stage_bytes() {
  return kWeightTile + 8 * NT * kStepColumns * 2;
}

#if PAGELLM_WGMMA_AVAILABLE
constexpr int kActRowGroup = 16;  // activation rows between a thread's units

// A thread's share of every step's cp.async, fixed for the kernel: two 16-byte weight pieces, and
// activation unit u of rows r0, r0 + 16, ... below m.
struct StepLoads {
  const unsigned char* w_src[2];  // at step 0
  int w_dst[2];                   // offsets in a stage
  const unsigned char* a_src;     // row r0's unit at step 0
  int a_row_stride;               // bytes between rows r0 + 16 i and r0 + 16 (i + 1)
  int a_dst;                      // row r0's unit's offset in a stage's activation tile
  int a_count;                    // units per step
};

template <int NT>
__device__ __forceinline__ StepLoads plan_loads(const IntLinearParams& p, int row0) {
  StepLoads l;
  const int kb = p.k / 2;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int c = threadIdx.x + j * kThreads;
    const int r = c >> 2, q = c & 3;
    const int row = min(row0 + r, p.n - 1);  // rows past n repeat the last
    l.w_src[j] = static_cast<const unsigned char*>(p.wq) + int64_t{row} * kb + q * 16;
    l.w_dst[j] = r * kStepBytes + ((q ^ ((r >> 1) & 3)) << 4);
  }
  const int r0 = threadIdx.x >> 4, u = threadIdx.x & 15;
  l.a_src = static_cast<const unsigned char*>(p.x) + int64_t{r0} * p.k * 2 + u * 16;
  l.a_row_stride = kActRowGroup * p.k * 2;  // k < kIntMaxK (int_weight_wgmma)
  l.a_dst = (u >> 3) * (8 * NT * 128) + r0 * 128 + (((u & 7) ^ (r0 & 7)) << 4);
  const int rows = min(p.m, 8 * NT);
  l.a_count = r0 < rows ? (rows - r0 + kActRowGroup - 1) / kActRowGroup : 0;
  return l;
}

// Issue step st's cp.async into `stage`: the weights, the activations (rows r0 + 16 i of the tile
// are 2048 bytes apart: 16 rows of 128 bytes, the swizzle unchanged).
__device__ __forceinline__ void issue_weights(const StepLoads& l, int st, unsigned char* stage) {
#pragma unroll
  for (int j = 0; j < 2; ++j) cp_async16(stage + l.w_dst[j], l.w_src[j] + st * kStepBytes, 16);
}
template <int NT>
__device__ __forceinline__ void issue_acts(const StepLoads& l, int st, unsigned char* stage) {
  const unsigned char* a = l.a_src + st * (kStepColumns * 2);
#pragma unroll
  for (int i = 0; i < (8 * NT + kActRowGroup - 1) / kActRowGroup; ++i)
    if (i < l.a_count)
      cp_async16(stage + kWeightTile + l.a_dst + i * (kActRowGroup * 128),
                 a + int64_t{i} * l.a_row_stride, 16);
}

// The A registers of a step's 8 slices for one warpgroup: the exact q - z of each weight, from the
// lane's rows g and g + 8 of its warp in the weight tile (`w`: row g; row g + 8 is 512 bytes on;
// `swz` their pieces' swizzle; `shift` = 4t selects the lane's nibbles).
template <typename T>
__device__ __forceinline__ void dequantize_step(const unsigned char* w, int swz, int shift,
                                                const uint32_t (&zero2)[2], uint32_t (&a)[8][4]) {
  constexpr uint32_t kMagic = kZeroMagic<T, 4> * 0x00010001u;
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 v = *reinterpret_cast<const uint4*>(w + h * 8 * kStepBytes + ((q ^ swz) << 4));
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // word 4q + i: slice 2q + i / 2, its high 8 columns for odd i
        const uint32_t raw = mask_or(words[i] >> shift, 0x000f000fu, kMagic);
        a[2 * q + (i >> 1)][h + 2 * (i & 1)] =
            as_u32<T>(__hsub2(as_pair<T>(raw), as_pair<T>(zero2[h])));
      }
    }
}

// d = A · B over the step's 8 slices, waited for.
template <typename T, int NT>
__device__ __forceinline__ void multiply_step(const uint32_t (&a)[8][4], uint64_t act_desc,
                                              float (&d)[NT][4]) {
  wgmma::fence();
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // slice j: column block j / 4, 32 bytes per slice within it
    const uint32_t offset = (j >> 2) * (8 * NT * 128) + (j & 3) * 32;
    wgmma::mma_m64k16<T, 0, NT>(d, a[j], act_desc + (offset >> 4), j > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operands(d);
}

// The state a thread carries from step to step.
struct StepState {
  int st, read, write;             // the step, its ring position, that of the step issued ahead
  int group, in_group, per_group;  // its group (from the slice's first), its step within the group
};

// One step: wait for its data (the barrier also keeps every warp's reads of the stage the loads
// ahead reuse behind them), issue the step stages - 1 on, multiply, and scale the sums into c by
// each weight row's group scale.
template <typename T, int NT>
__device__ __forceinline__ void run_step(const StreamGeometry& geo, const StepLoads& loads,
                                         unsigned char* smem, const int (&sc_row)[2],
                                         const int (&zr_row)[2], bool has_zero, int w_off, int swz,
                                         int shift, uint64_t desc0, int st1, StepState& ss,
                                         float (&c)[NT][4]) {
  constexpr int kStage = stage_bytes<NT>();
  const int ahead = geo.stages - 1;
  wait_for_step(geo.stages);
  wgmma::fence_proxy_async();  // the step's cp.async writes, visible to the MMAs' reads
  __syncthreads();
  if (ss.st + ahead < st1) {
    issue_weights(loads, ss.st + ahead, smem + ss.write * kStage);
    issue_acts<NT>(loads, ss.st + ahead, smem + ss.write * kStage);
  }
  cp_async_commit();
  uint32_t zero2[2];
  float s[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    s[h] = to_float(reinterpret_cast<const T*>(smem + sc_row[h])[ss.group]);
    zero2[h] =
        (kZeroMagic<T, 4> + uint32_t(has_zero ? smem[zr_row[h] + ss.group] : 8)) * 0x00010001u;
  }
  uint32_t a[8][4];
  dequantize_step<T>(smem + ss.read * kStage + w_off, swz, shift, zero2, a);
  float d[NT][4];
  multiply_step<T, NT>(a, desc0 + uint32_t((ss.read * kStage) >> 4), d);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[nt][e] = fmaf(d[nt][e], s[e >> 1], c[nt][e]);
  ss.st += 1;
  ss.read = ss.read + 1 == geo.stages ? 0 : ss.read + 1;
  ss.write = ss.write + 1 == geo.stages ? 0 : ss.write + 1;
  if (++ss.in_group == ss.per_group) ss.in_group = 0, ++ss.group;
}
#endif  // PAGELLM_WGMMA_AVAILABLE

// grid: (ceil(n / 128), splits); dynamic shared memory: up to 1 KB to align the stages to 1024
// bytes (the swizzle's period), the stages, the group constants.
template <typename T, int NT>
__global__ void __launch_bounds__(kThreads, 2)
    int_wgmma_kernel(const __grid_constant__ IntLinearParams p, const StreamGeometry geo) {
#if PAGELLM_WGMMA_AVAILABLE
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (attention::smem_addr(smem_raw) & 1023)) & 1023);
  constexpr int kStage = stage_bytes<NT>();
  unsigned char* sc = smem + geo.stages * kStage;
  unsigned char* zr = p.zero ? sc + kRows * geo.sc_row : nullptr;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int row0 = blockIdx.x * kRows;
  const int total_steps = p.k / kStepColumns;  // whole steps: k is a multiple of the group size
  const int st0 = blockIdx.y * geo.steps;
  const int st1 = min(total_steps, st0 + geo.steps);
  const int steps_per_group = p.group_size / kStepColumns;
  const int ga = st0 / steps_per_group;
  const int gb = (st1 - 1) / steps_per_group;
  const int groups = p.k / p.group_size;

  // Weights and group constants do not depend on the kernel before (PDL): issue them first.
  load_group_span(p.scale, int64_t{p.n} * groups * 2, 2, p, row0, ga, gb, geo.sc_row, sc);
  if (zr) load_group_span(p.zero, int64_t{p.n} * groups, 1, p, row0, ga, gb, geo.zr_row, zr);
  const StepLoads loads = plan_loads<NT>(p, row0);
  const int ahead = geo.stages - 1;
  for (int s = 0; s < ahead; ++s)
    if (st0 + s < st1) issue_weights(loads, st0 + s, smem + s * kStage);
  pdl_wait();
  for (int s = 0; s < ahead; ++s) {
    if (st0 + s < st1) issue_acts<NT>(loads, st0 + s, smem + s * kStage);
    cp_async_commit();
  }

  // The lane's group constants (rows g and g + 8 of its warp), as offsets from smem (32-bit: a
  // pointer pair each spilled at 8 activation tiles), and weight rows in a stage.
  int sc_row[2], zr_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * 16 + 8 * h + g;
    const int row = min(row0 + r, p.n - 1);
    sc_row[h] = int(sc - smem) + group_offset(p, r, row, ga, ga, 2, geo.sc_row);
    zr_row[h] = zr ? int(zr - smem) + group_offset(p, r, row, ga, ga, 1, geo.zr_row) : 0;
  }
  const int w_off = (warp * 16 + g) * kStepBytes, swz = (g >> 1) & 3, shift = 4 * (lane & 3);
  const uint64_t desc0 = wgmma::sw128_desc(attention::smem_addr(smem + kWeightTile), 16, 1024);
  float c[NT][4] = {};
  StepState ss{st0, 0, ahead, 0, st0 - ga * steps_per_group, steps_per_group};
  while (ss.st < st1)
    run_step<T, NT>(geo, loads, smem, sc_row, zr_row, zr != nullptr, w_off, swz, shift, desc0, st1,
                    ss, c);
  pdl_launch_dependents();
  store_stream_outputs<T, NT>(p, geo, row0, c);
#endif  // PAGELLM_WGMMA_AVAILABLE
}

template <typename T, int NT>
cudaError_t launch_wgmma(const IntLinearParams& p, cudaStream_t stream) {
  PipelineShape shape;
  shape.min_steps = kMinSteps, shape.slack = 1024;
  const StreamGeometry geo = choose_geometry(p, 4, stage_bytes<NT>(), 2, shape);
  if (geo.stages < 2) return cudaErrorNotSupported;  // group constants too large for the slice
  const cudaError_t err = allow_dynamic_smem<int_wgmma_kernel<T, NT>>(kMaxSmem);
  if (err != cudaSuccess) return err;
  return launch_with_splits<T>(int_wgmma_kernel<T, NT>, p, geo, stream);
}

template <typename T>
cudaError_t launch_for_m(const IntLinearParams& p, cudaStream_t stream) {
  if (p.m <= 8) return launch_wgmma<T, 1>(p, stream);
  if (p.m <= 16) return launch_wgmma<T, 2>(p, stream);
  if (p.m <= 32) return launch_wgmma<T, 4>(p, stream);
  return launch_wgmma<T, 8>(p, stream);
}

}  // namespace

cudaError_t int_weight_wgmma(const IntLinearParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.m > kIntWeightOnlyMaxRows || p.n <= 0 || p.group_size <= 0 || p.k <= 0 ||
      p.k >= kIntMaxK || p.k % p.group_size != 0 ||
      (p.dtype != DType::kBF16 && p.dtype != DType::kF16))
    return cudaErrorInvalidValue;
  if (p.bits != 4 || p.group_size % kStepColumns != 0 || !device_is_sm90())
    return cudaErrorNotSupported;
  if (!aligned16(p.scale) || (p.zero && !aligned16(p.zero))) return cudaErrorNotSupported;
  if (p.m == 0) return cudaSuccess;
  if (!aligned16(p.x) || !aligned16(p.wq) || !p.y) return cudaErrorInvalidValue;
  return p.dtype == DType::kBF16 ? launch_for_m<__nv_bfloat16>(p, stream)
                                 : launch_for_m<__half>(p, stream);
}

}  // namespace pagellm::cuda
