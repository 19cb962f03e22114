// W8A8-INT8 GEMM on Hopper's integer warpgroup MMA (wgmma m64n256k32 s8 · s8 → s32), with the
// per-token × per-channel scaling and the bias in its epilogue, so the int32 sums never leave the
// registers (cuBLASLt's int8 GEMM writes them to memory, and a second kernel read them back: at
// prefill sizes that round trip cost about a third of the GEMM itself, docs/PERF.md).
//
// y[i, j] = float(Σ_c xq[i, c] · wq[j, c]) · x_scale[i] · w_scale[j] (+ bias[j]), the float
// operations in the order (and rounding) of the cuBLASLt path's epilogue, so both paths give the
// same bits.
//
// A block computes 128 rows (tokens) × 256 columns (output features): a producer warpgroup whose
// one thread brings 128-byte slices of k of both operands by TMA (128-byte swizzle, zeros past the
// edges) into a ring of four stages, and two consumer warpgroups of 64 rows each, which multiply
// each stage with four MMAs reading both operands from shared memory, then release it through an
// mbarrier. Persistent: a block per SM walks the tiles, its producer loading the next tile while
// the consumers store the last one.
#include <cuda.h>

#include <algorithm>
#include <climits>

#include "backends/cuda/attention/mma_softmax.cuh"  // smem_addr, pack2
#include "backends/cuda/attention/wgmma.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/gemm/int_gemm.h"
#include "backends/cuda/tma.cuh"
#include "backends/cuda/tma.h"

namespace pagellm::cuda {
namespace {

constexpr int kRows = 128;    // activation rows (tokens) per block: two consumer warpgroups
constexpr int kCols = 256;    // output features per block: the MMA's n
constexpr int kSliceK = 128;  // bytes of k per stage: one 128-byte swizzle row
constexpr int kStages = 4;
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerWarps = 8;
constexpr int kXTile = kRows * kSliceK;
constexpr int kWTile = kCols * kSliceK;
constexpr int kStageBytes = kXTile + kWTile;
// The stages (1024-byte aligned: the swizzle atoms), then the full and empty barriers.
constexpr int kSmemBytes = kStages * kStageBytes + 1024 + 2 * kStages * 8;
// int8_linear's choice (int8_gemm_sm90_pays): from 64 rows, where the tiles number at least 70 %
// of the SMs; fewer leave cuBLASLt (split k) ahead (docs/PERF.md, "W8A8-INT8 on Hopper's integer
// warpgroup MMA").
constexpr int kMinRows = 64;
// Registers after the reallocation: 128 x 40 + 256 x 232 = the 384 x 168 of the launch.
[[maybe_unused]] constexpr int kProducerRegs = 40;
[[maybe_unused]] constexpr int kConsumerRegs = 232;

struct EpilogueArgs {
  const float* x_scale;  // [m]
  const float* w_scale;  // [n]
  const void* bias;      // [n] or null
  void* y;               // [m, n]
  int m, n, k;
};

#if PAGELLM_WGMMA_AVAILABLE
#define PAGELLM_S32_4(i) "+r"(d[i]), "+r"(d[i + 1]), "+r"(d[i + 2]), "+r"(d[i + 3])
#define PAGELLM_S32_16(i) \
  PAGELLM_S32_4(i), PAGELLM_S32_4(i + 4), PAGELLM_S32_4(i + 8), PAGELLM_S32_4(i + 12)
// d += a · b over one m64n256k32 step: a [64, 32] and b [256, 32] int8, both K-major in
// 128-byte-swizzled shared memory; d in the m16n8 accumulator layout per 8 columns.
__device__ __forceinline__ void mma_s8_m64n256k32(int32_t (&d)[128], uint64_t desc_a,
                                                  uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,"
      "%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,"
      "%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,"
      "%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,"
      "%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,"
      "%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,"
      "%121,%122,%123,%124,%125,%126,%127}, %128, %129, p;\n"
      "}\n"
      : PAGELLM_S32_16(0), PAGELLM_S32_16(16), PAGELLM_S32_16(32), PAGELLM_S32_16(48),
        PAGELLM_S32_16(64), PAGELLM_S32_16(80), PAGELLM_S32_16(96), PAGELLM_S32_16(112)
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
#undef PAGELLM_S32_16
#undef PAGELLM_S32_4

// Pins the accumulators here: no read of them moves above an earlier wgmma wait.
__device__ __forceinline__ void fence_accumulators(int32_t (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// The ring's position of a block's slice: its stage and the phase (parity) of that stage's use.
struct RingSlot {
  int stage;
  uint32_t parity;
};
__device__ __forceinline__ RingSlot ring_slot(int slice) {
  return {slice % kStages, static_cast<uint32_t>((slice / kStages) & 1)};
}

// The producer's slices of one tile (one thread). `slice` counts the block's slices over all its
// tiles: a stage is refilled once the consumers released its previous use.
__device__ __forceinline__ void produce_tile(const CUtensorMap& xmap, const CUtensorMap& wmap,
                                             unsigned char* smem, uint64_t* full, uint64_t* empty,
                                             int row0, int col0, int k_slices, int& slice) {
  for (int kt = 0; kt < k_slices; ++kt, ++slice) {
    const RingSlot r = ring_slot(slice);
    if (slice >= kStages) tma::wait(empty + r.stage, r.parity ^ 1);
    tma::arrive_expect_tx(full + r.stage, kStageBytes);
    unsigned char* stage = smem + r.stage * kStageBytes;
    tma::load_2d(stage, xmap, full + r.stage, kt * kSliceK, row0);
    tma::load_2d(stage + kXTile, wmap, full + r.stage, kt * kSliceK, col0);
  }
}

// One consumer warpgroup's sums of one tile over all of k: rows [64 wg, 64 wg + 64) of it. Each
// stage goes back to the producer once its MMAs are done (the tile's last one after the last
// wait), so the producer loads the next tile while this warpgroup stores.
__device__ __forceinline__ void consume_tile(int32_t (&acc)[128], unsigned char* smem,
                                             uint64_t* full, uint64_t* empty, int wg, int lane,
                                             int k_slices, int& slice) {
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0;
  const uint32_t base = attention::smem_addr(smem);
  const auto release = [&](int stage) {
    __syncwarp();
    tma::arrive_if(empty + stage, lane == 0);
  };
  for (int kt = 0; kt < k_slices; ++kt, ++slice) {
    const RingSlot r = ring_slot(slice);
    tma::wait(full + r.stage, r.parity);
    const uint32_t stage = base + r.stage * kStageBytes;
    const uint64_t desc_x = attention::wgmma::sw128_desc(stage + wg * 64 * kSliceK, 16, 1024);
    const uint64_t desc_w = attention::wgmma::sw128_desc(stage + kXTile, 16, 1024);
    attention::wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kSliceK / 32; ++kk)  // 32 bytes of each row per MMA
      mma_s8_m64n256k32(acc, desc_x + kk * (32 >> 4), desc_w + kk * (32 >> 4));
    attention::wgmma::commit();
    // The slice before this one is multiplied: its stage goes back to the producer.
    attention::wgmma::wait<1>();
    if (kt > 0) release(ring_slot(slice - 1).stage);
  }
  attention::wgmma::wait<0>();
  fence_accumulators(acc);
  release(ring_slot(slice - 1).stage);
}

// y of the thread's two rows (r and r + 8 of its warp's 16) and 64 columns (two of every 8). The
// scales and bias of 16 columns are loaded together before their stores: loaded one column pair
// at a time, each load waited behind the stores before it, and the epilogue took as long as a
// quarter of the tile's MMAs.
template <typename T>
__device__ __forceinline__ void store_scaled(const EpilogueArgs& a, const int32_t (&acc)[128],
                                             int row_a, int col0, int lane) {
  constexpr int kChunk = 8;  // column groups of 8 per round of loads
  const int row_b = row_a + 8;
  const float xs_a = row_a < a.m ? a.x_scale[row_a] : 0.f;
  const float xs_b = row_b < a.m ? a.x_scale[row_b] : 0.f;
  T* y = static_cast<T*>(a.y);
  const T* bias = static_cast<const T*>(a.bias);
  const auto scaled = [&](int32_t v, float xs, float ws, float b) {
    const float s = __fmul_rn(__fmul_rn(static_cast<float>(v), xs), ws);
    return bias ? __fadd_rn(s, b) : s;
  };
#pragma unroll
  for (int j0 = 0; j0 < kCols / 8; j0 += kChunk) {
    float ws[kChunk][2], b[kChunk][2];
#pragma unroll
    for (int jj = 0; jj < kChunk; ++jj) {
      const int col = col0 + 8 * (j0 + jj) + 2 * (lane & 3);
      const bool in = col < a.n;  // n is even: col + 1 is in range with col
      ws[jj][0] = in ? a.w_scale[col] : 0.f;
      ws[jj][1] = in ? a.w_scale[col + 1] : 0.f;
      b[jj][0] = in && bias ? to_float(bias[col]) : 0.f;
      b[jj][1] = in && bias ? to_float(bias[col + 1]) : 0.f;
    }
#pragma unroll
    for (int jj = 0; jj < kChunk; ++jj) {
      const int j = j0 + jj;
      const int col = col0 + 8 * j + 2 * (lane & 3);
      if (col >= a.n) continue;
      if (row_a < a.m)
        *reinterpret_cast<uint32_t*>(y + int64_t{row_a} * a.n + col) =
            attention::pack2<T>(scaled(acc[4 * j], xs_a, ws[jj][0], b[jj][0]),
                                scaled(acc[4 * j + 1], xs_a, ws[jj][1], b[jj][1]));
      if (row_b < a.m)
        *reinterpret_cast<uint32_t*>(y + int64_t{row_b} * a.n + col) =
            attention::pack2<T>(scaled(acc[4 * j + 2], xs_b, ws[jj][0], b[jj][0]),
                                scaled(acc[4 * j + 3], xs_b, ws[jj][1], b[jj][1]));
    }
  }
}
#endif  // PAGELLM_WGMMA_AVAILABLE

// Persistent: a block per SM takes tiles blockIdx.x, + gridDim.x, ... (row tiles fastest, so the
// blocks at work share their weight tiles and read the activations from L2).
template <typename T>
__global__ void __launch_bounds__(kThreads, 1)
    int8_gemm_sm90_kernel(const __grid_constant__ CUtensorMap xmap,
                          const __grid_constant__ CUtensorMap wmap,
                          const __grid_constant__ EpilogueArgs a) {
#if PAGELLM_WGMMA_AVAILABLE
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int row_tiles = (a.m + kRows - 1) / kRows;
  const int tiles = row_tiles * ((a.n + kCols - 1) / kCols);
  const int k_slices = (a.k + kSliceK - 1) / kSliceK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      tma::init(full + s, 1);
      tma::init(empty + s, kConsumerWarps);
    }
    tma::fence_init();
  }
  __syncthreads();
  pdl_wait();  // the activations and their scales come from the kernel before
  int slice = 0;
  if (warp < 4) {  // the producer warpgroup
    tma::release_registers<kProducerRegs>();
    if (warp == 0 && lane == 0)
      for (int t = blockIdx.x; t < tiles; t += gridDim.x)
        produce_tile(xmap, wmap, smem, full, empty, (t % row_tiles) * kRows,
                     (t / row_tiles) * kCols, k_slices, slice);
    pdl_launch_dependents();
    return;
  }
  tma::claim_registers<kConsumerRegs>();
  const int cwarp = warp - 4;
  const int wg = cwarp >> 2;
  int32_t acc[128];
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    consume_tile(acc, smem, full, empty, wg, lane, k_slices, slice);
    if (t + int(gridDim.x) >= tiles) pdl_launch_dependents();
    store_scaled<T>(a, acc, (t % row_tiles) * kRows + wg * 64 + (cwarp & 3) * 16 + (lane >> 2),
                    (t / row_tiles) * kCols, lane);
  }
#endif  // PAGELLM_WGMMA_AVAILABLE
}

template <typename T>
cudaError_t launch(const Int8LinearParams& p, cudaStream_t stream) {
  CUtensorMap xmap, wmap;
  if (!encode_tma_2d_u8(&xmap, p.xq_work, uint64_t(p.k), uint64_t(p.m), uint64_t(p.k), kSliceK,
                        kRows) ||
      !encode_tma_2d_u8(&wmap, p.wq, uint64_t(p.k), uint64_t(p.n), uint64_t(p.k), kSliceK, kCols))
    return cudaErrorNotSupported;
  const cudaError_t attr = allow_dynamic_smem<int8_gemm_sm90_kernel<T>>(kSmemBytes);
  if (attr != cudaSuccess) return attr;
  const int64_t tiles = int64_t{(p.m + kRows - 1) / kRows} * ((p.n + kCols - 1) / kCols);
  if (tiles > INT_MAX) return cudaErrorInvalidValue;
  const EpilogueArgs args{p.x_scale_work, p.w_scale, p.bias, p.y, p.m, p.n, p.k};
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(tiles, sm_count()));
  return launch_kernel(int8_gemm_sm90_kernel<T>, dim3(grid), kThreads, kSmemBytes, stream, xmap,
                       wmap, args);
}

}  // namespace

bool int8_gemm_sm90_fits(const Int8LinearParams& p) {
  return (p.dtype == DType::kBF16 || p.dtype == DType::kF16) && p.k % 16 == 0 && p.n % 2 == 0 &&
         aligned16(p.xq_work) && aligned16(p.wq) && (reinterpret_cast<uintptr_t>(p.y) & 3) == 0 &&
         device_is_sm90() && tma_available();
}

bool int8_gemm_sm90_pays(const Int8LinearParams& p) {
  const int64_t blocks = int64_t{(p.m + kRows - 1) / kRows} * ((p.n + kCols - 1) / kCols);
  return p.m >= kMinRows && blocks * 10 >= int64_t{sm_count()} * 7;
}

cudaError_t int8_gemm_sm90(const Int8LinearParams& p, cudaStream_t stream) {
  if (!int8_gemm_sm90_fits(p)) return cudaErrorInvalidValue;
  if (p.dtype == DType::kBF16) return launch<__nv_bfloat16>(p, stream);
  return launch<__half>(p, stream);
}

}  // namespace pagellm::cuda
