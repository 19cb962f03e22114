// Paged prefill attention on Hopper's warpgroup MMAs (wgmma, sm_90a), for 16-bit caches, built as
// FlashAttention-3 builds it: S = Q·Kᵀ and O += P·V as asynchronous warpgroup MMAs reading K and V
// straight from 128-byte-swizzled shared memory (P fed from the score registers as the A operand),
// K/V brought in by the tensor memory accelerator (TMA) under a producer warp, mbarriers between
// producer and consumers, and the registers moved to the consumers (setmaxnreg).
//
// A work item = 128 query rows of one sequence and one query head; a block (one per SM, taking
// work items in turn) = a producer warpgroup and two consumer warpgroups of 64 rows (16 per warp;
// each thread holds rows g and g + 8 of its warp's 16, as in mma.sync). K/V tiles of 128 keys,
// one TMA box per cache page and 64 columns (the page's rows of one KV head are block_size rows
// 2 x num_kv_heads x D bytes apart, a 3-D tensor map [slots, kv_heads, D]), rotate over three
// stages; both consumers read each tile, halving the K/V traffic per query row of a 64-row block.
//
// Included once per dtype by tile_sm90_*.cu. Code built for sm_80 gets an empty body; the planner
// picks this kernel only on compute capability 9.0 (attention.cu: sm90_tiles).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>

#include "backends/cuda/attention/attention_internal.h"
#include "backends/cuda/attention/mma_softmax.cuh"
#include "backends/cuda/attention/wgmma.cuh"
#include "backends/cuda/common.cuh"
#include "backends/cuda/tma.cuh"

namespace pagellm::cuda::attention {

constexpr int kSm90Keys = 128;     // keys per K/V tile
constexpr int kSm90Stages = 3;     // K/V tiles in shared memory at once
constexpr int kSm90Threads = 384;  // a producer warpgroup and two consumer warpgroups
constexpr int kSm90ConsumerWarps = 8;
// Registers per thread after the reallocation: 128 x 40 + 256 x 232 = the 384 x 168 of the launch.
constexpr int kSm90ProducerRegs = 40;
constexpr int kSm90ConsumerRegs = 232;
static_assert(kSm90TileRows == 2 * 64, "one consumer warpgroup per 64 query rows");

// Shared memory: Q [kSm90TileRows, D], then kSm90Stages K tiles [kSm90Keys, D] and as many V
// tiles, all 16-bit and 1024-byte aligned (the swizzle atoms), then the barriers; 1024 bytes of
// slack to align the base. 225 KB at D = 128, within the 227 KB a block may have.
constexpr int kSm90Barriers = 4 * kSm90Stages + 4;

// K/V tiles of a span: those holding its n_keys keys.
__device__ __forceinline__ int sm90_tiles_of(const TileSpan& t) {
  return (t.n_keys + kSm90Keys - 1) / kSm90Keys;
}
template <int D>
constexpr int sm90_smem_bytes() {
  return (kSm90TileRows + 2 * kSm90Stages * kSm90Keys) * D * 2 + 1024 + kSm90Barriers * 8;
}

// The block's shared memory. Barriers: full_* complete when a stage's tile has landed (the
// producer's arrival and the TMA bytes), empty_* when all consumer warps are done with it; q_full
// when Q has landed, q_empty when the consumers hold it in registers; v_fixed when an item's last
// V tile has its rows past the keys zeroed, v_done when every consumer warp has seen that.
struct Sm90Smem {
  unsigned char *q, *k, *v;
  uint64_t *full_k, *full_v, *empty_k, *empty_v, *q_full, *q_empty, *v_fixed, *v_done;
};

// What a block's producer and consumers count alike over its work items, and so agree on without
// talking: K/V tiles through the ring (a tile's stage and phase), items (Q's phase), and items
// with a partial last page (v_fixed's and v_done's phase).
struct Sm90Progress {
  int tiles = 0, items = 0, tails = 0;
};

template <int D>
__device__ __forceinline__ Sm90Smem sm90_smem(unsigned char* raw) {
  constexpr int kKvTileBytes = kSm90Keys * D * 2;
  Sm90Smem sm;
  sm.q = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(raw) + 1023) &
                                          ~uintptr_t{1023});
  sm.k = sm.q + kSm90TileRows * D * 2;
  sm.v = sm.k + kSm90Stages * kKvTileBytes;
  sm.full_k = reinterpret_cast<uint64_t*>(sm.v + kSm90Stages * kKvTileBytes);
  sm.full_v = sm.full_k + kSm90Stages;
  sm.empty_k = sm.full_v + kSm90Stages;
  sm.empty_v = sm.empty_k + kSm90Stages;
  sm.q_full = sm.empty_v + kSm90Stages;
  sm.q_empty = sm.q_full + 1;
  sm.v_fixed = sm.q_empty + 1;
  sm.v_done = sm.v_fixed + 1;
  return sm;
}

#if PAGELLM_WGMMA_AVAILABLE
// Pieces of the kernel below, per warpgroup: S = Q·Kᵀ over one K tile (K is the K-major B
// operand; step kk takes 16 of D, 32 bytes into a 128-byte row), issued and committed, not waited.
template <typename T, int D>
__device__ __forceinline__ void issue_scores(float (&s)[kSm90Keys / 8][4],
                                             const uint32_t (&qf)[D / 16][4], uint64_t k_desc) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {  // the first step overwrites s (no zeroing needed)
    const uint32_t offset = (kk >> 2) * (kSm90Keys * 128) + (kk & 3) * 32;
    wgmma::mma_m64k16<T, 0>(s, qf[kk], k_desc + (offset >> 4), kk > 0);
  }
  wgmma::commit();
}

// O += P·V over one V tile (V is the MN-major B operand, D contiguous; step kk takes 16 keys = 2
// groups of 8 rows, 2048 bytes), issued and committed, not waited: pf must stay untouched until a
// wait covers it.
template <typename T, int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 8][4],
                                         const uint32_t (&pf)[kSm90Keys / 16][4], uint64_t v_desc) {
  wgmma::fence_operands(o);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kSm90Keys / 16; ++kk)
    wgmma::mma_m64k16<T, 1>(o, pf[kk], v_desc + kk * (2048 >> 4), 1);
  wgmma::commit();
}

template <typename T>
__device__ __forceinline__ void pack_probabilities(const float (&s)[kSm90Keys / 8][4],
                                                   uint32_t (&pf)[kSm90Keys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kSm90Keys / 16; ++kk) {
    pf[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
    pf[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
    pf[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pf[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

// 2^x on the SFU alone: no denormal fix-up (a probability under 2^-126 of the row's largest is 0 in
// 16 bits anyway); exp2(-inf) = 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// One online-softmax step over a warpgroup's raw score tile (the thread's rows a and b): kMask
// applies the causal mask (key > the row's position; lim_* = position - key0 - 2 * t4, so that the
// test against the compile-time column is one compare). m_* are running maxima of the scaled
// (log2-domain) scores, l_* running sums; the scores become exp2(s * qscale - m), one FFMA and one
// SFU op each, and corr_* the factors the rows' O accumulators take.
template <bool kMask>
__device__ __forceinline__ void softmax_step(float (&s)[kSm90Keys / 8][4], float qscale, int lim_a,
                                             int lim_b, float& m_a, float& m_b, float& l_a,
                                             float& l_b, float& corr_a, float& corr_b) {
  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int n = 0; n < kSm90Keys / 8; ++n) {
    if constexpr (kMask) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (n * 8 + (e & 1) > (e < 2 ? lim_a : lim_b)) s[n][e] = -INFINITY;
    }
    mx_a = fmaxf(mx_a, fmaxf(s[n][0], s[n][1]));
    mx_b = fmaxf(mx_b, fmaxf(s[n][2], s[n][3]));
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
  }
  const float new_a = fmaxf(m_a, mx_a * qscale), new_b = fmaxf(m_b, mx_b * qscale);
  // A row whose keys are all masked so far keeps max -inf; 0 as its base avoids inf - inf.
  const float base_a = new_a == -INFINITY ? 0.f : new_a;
  const float base_b = new_b == -INFINITY ? 0.f : new_b;
  corr_a = exp2_ftz(m_a - base_a);
  corr_b = exp2_ftz(m_b - base_b);
  m_a = new_a;
  m_b = new_b;
  float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
  for (int n = 0; n < kSm90Keys / 8; ++n) {
    s[n][0] = exp2_ftz(fmaf(s[n][0], qscale, -base_a));
    s[n][1] = exp2_ftz(fmaf(s[n][1], qscale, -base_a));
    s[n][2] = exp2_ftz(fmaf(s[n][2], qscale, -base_b));
    s[n][3] = exp2_ftz(fmaf(s[n][3], qscale, -base_b));
    sum_a += s[n][0] + s[n][1];
    sum_b += s[n][2] + s[n][3];
  }
  l_a = l_a * corr_a + sum_a;
  l_b = l_b * corr_b + sum_b;
}

// The producer warp (warpgroup 0's first warp), per work item: Q once the consumers hold the last
// item's in registers, then K and V tile by tile into the ring of kSm90Stages stages, each page of
// the tile one TMA box per 64 columns (pages past the keys read at a negative slot, which TMA
// fills with zeros). A stage is refilled once all eight consumer warps released it. A last page
// holding fewer keys than block_size leaves cache rows past the keys (stale, possibly NaN) in V:
// once that tile has landed, the warp zeroes them and signals v_fixed, which the consumers wait on
// for that tile instead (their P is 0 there, but 0 · NaN is not); it signals the next such item
// only after v_done, so the two stay one phase apart. K needs no such care: the causal mask
// overwrites those keys' scores.
template <int D>
__device__ __forceinline__ void produce_sm90_item(const AttentionParams& p, const TileSpan& t,
                                                  const Sm90Maps& maps, const Sm90Smem& sm,
                                                  int lane, Sm90Progress& pr) {
  constexpr int kKvTileBytes = kSm90Keys * D * 2;
  const int n_tiles = sm90_tiles_of(t);
  constexpr int kColBlocks = D / 64;
  if (pr.items > 0) tma::wait(sm.q_empty, (pr.items - 1) & 1);
  if (lane == 0) {
    tma::arrive_expect_tx(sm.q_full, kSm90TileRows * D * 2);
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        tma::load_3d(sm.q + cb * (kSm90TileRows * 128) + half * 64 * 128, maps.q, sm.q_full,
                     cb * 64, t.head, t.q_begin + t.row0 + half * 64);
  }
  const int bs = p.block_size;
  const int pages = kSm90Keys / bs;
  const int32_t* table = p.block_tables + static_cast<int64_t>(t.seq) * p.max_blocks_per_seq;
  const auto load_tile = [&](unsigned char* dst, const CUtensorMap& map, uint64_t* full, int slot) {
    if (lane == 0) tma::arrive_expect_tx(full, kKvTileBytes);
    __syncwarp();
    if (lane < pages) {
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb)
        tma::load_3d(dst + cb * (kSm90Keys * 128) + lane * bs * 128, map, full, cb * 64, t.kv_head,
                     slot);
    }
  };
  for (int j = 0; j < n_tiles; ++j) {
    const int ring = pr.tiles + j;
    const int stage = ring % kSm90Stages, use = ring / kSm90Stages;
    const int key = j * kSm90Keys + lane * bs;  // this lane's page
    const int slot = lane < pages && key < t.n_keys ? table[key / bs] * bs : -bs;
    if (use > 0) tma::wait(sm.empty_k + stage, (use - 1) & 1);
    load_tile(sm.k + stage * kKvTileBytes, maps.k, sm.full_k + stage, slot);
    if (use > 0) tma::wait(sm.empty_v + stage, (use - 1) & 1);
    load_tile(sm.v + stage * kKvTileBytes, maps.v, sm.full_v + stage, slot);
  }
  pr.tiles += n_tiles;
  pr.items += 1;
  const int tail = t.n_keys % bs;
  if (tail == 0) return;
  const int last = pr.tiles - 1, stage = last % kSm90Stages;
  tma::wait(sm.full_v + stage, (last / kSm90Stages) & 1);
  if (pr.tails > 0) tma::wait(sm.v_done, (pr.tails - 1) & 1);
  const int first = t.n_keys - (n_tiles - 1) * kSm90Keys;  // the tile's first row past the keys
  const int rows = bs - tail;                              // up to the end of its page
  unsigned char* v = sm.v + stage * kKvTileBytes;
  for (int c = lane; c < rows * (D / 8); c += 32)
    *reinterpret_cast<uint4*>(v + wgmma::sw128_offset<kSm90Keys>(
                                      first + c / (D / 8), c % (D / 8))) = make_uint4(0, 0, 0, 0);
  wgmma::fence_proxy_async();  // the zeros, visible to the MMAs' reads
  __syncwarp();
  tma::arrive_if(sm.v_fixed, lane == 0);
  pr.tails += 1;
}
#endif  // PAGELLM_WGMMA_AVAILABLE

#if PAGELLM_WGMMA_AVAILABLE
// A consumer warpgroup (warp cwarp of 8, 64 query rows per warpgroup). The in-warpgroup overlap of
// FlashAttention-3: iteration j waits for K_j and V_{j-1}, issues S_j = Q·K_jᵀ and O +=
// P_{j-1}·V_{j-1} back to back, waits for S_j only, releases K_j's stage and runs S_j's softmax
// while the tensor cores finish P·V; O takes S_j's correction after that wait, and V_{j-1}'s stage
// is released. Tiles wholly past the warpgroup's last row (the causal diagonal) are skipped, but
// each still takes its turn (waited for, released), so that every stage's phases count all eight
// warps.
//
// ptxas serialises the asynchronous MMAs (a wait after each) when it finds, between an MMA and the
// wait covering it, a branch it cannot prove warp-uniform, a barrier, or an instruction touching
// the accumulators. Hence: the loop's steering values broadcast from lane 0, the mbarrier retry
// loop and the single-lane arrivals inside their asm, and nothing but MMAs between issue and wait.
//
// kPingPong: the two consumers also take turns at the tensor cores (FlashAttention-3's
// inter-warpgroup schedule): each issues its iteration's MMAs only once the other's scores are
// done, over two named barriers, so one warpgroup's softmax runs while the other's MMAs do.
template <typename T, int D, bool kPingPong>
__device__ __forceinline__ void consume_sm90_item(const AttentionParams& p, const TileSpan& t,
                                                  const Sm90Smem& sm, int cwarp, int lane,
                                                  Sm90Progress& pr) {
  constexpr int kKvTileBytes = kSm90Keys * D * 2;
  // The values that steer the loop, warp-uniform to the compiler (see above).
  const auto uniform = [](int v) { return __shfl_sync(0xffffffffu, v, 0); };
  const int g = lane >> 2;              // accumulator row within the warp's 16 (and g + 8)
  const int t4 = lane & 3;              // accumulator column pair
  const int wrow = cwarp * 16;          // this warp's first row in the block
  const int cwg = uniform(cwarp >> 2);  // this consumer warpgroup, 0 or 1
  const int n_tiles = uniform(sm90_tiles_of(t));
  const int wg_pos = uniform(t.pos0 + t.row0 + cwg * 64);  // the warpgroup's first row's position
  // Tiles this warpgroup multiplies: those holding keys up to its last row's position.
  const int wg_tiles = uniform(
      t.row0 + cwg * 64 < t.q_len
          ? min(n_tiles, (t.pos0 + min(t.row0 + cwg * 64 + 63, t.q_len - 1)) / kSm90Keys + 1)
          : 0);
  const int pos_a = t.pos0 + t.row0 + wrow + g;  // positions of this thread's two rows
  const int pos_b = pos_a + 8;
  const float qscale = p.scale * 1.4426950408889634f;  // softmax in the log2 domain
  const bool tail = uniform(t.n_keys % p.block_size != 0);
  // Descriptors of stage 0's tiles; a tile or step further on adds its byte offset / 16 to the
  // start-address field (shared addresses stay below 2^18, so the field never carries over).
  const uint64_t k_desc = wgmma::sw128_desc(smem_addr(sm.k), 16, 1024);
  const uint64_t v_desc = wgmma::sw128_desc(smem_addr(sm.v), kSm90Keys * 128, 1024);
  const int ring0 = pr.tiles;  // the ring position of this item's tile 0
  const auto stage_of = [&](int tile) {
    return static_cast<uint32_t>(((ring0 + tile) % kSm90Stages) * (kKvTileBytes >> 4));
  };
  const auto release = [&](uint64_t* bar) {
    __syncwarp();
    tma::arrive_if(bar, lane == 0);
  };
  // kPingPong's turns: barrier 1 + w is warpgroup w's (its 128 threads wait, the other's arrive).
  const auto take_turn = [&] {
    if constexpr (kPingPong) tma::named_barrier_sync(1 + cwg, 256);
  };
  const auto pass_turn = [&] {
    if constexpr (kPingPong) tma::named_barrier_arrive(2 - cwg, 256);
  };

  uint32_t qf[D / 16][4];
  tma::wait(sm.q_full, pr.items & 1);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], sm.q + wgmma::sw128_offset<kSm90TileRows>(wrow + (lane & 15),
                                                                  2 * kk + (lane >> 4)));
  release(sm.q_empty);
  uint32_t pf[kSm90Keys / 16][4];  // P of the previous tile, the A operand of its P·V
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;
  const auto wait_v = [&](int tile) {
    const int ring = ring0 + tile;
    if (tile == n_tiles - 1 && tail)
      tma::wait(sm.v_fixed, pr.tails & 1);
    else
      tma::wait(sm.full_v + ring % kSm90Stages, (ring / kSm90Stages) & 1);
  };

  for (int j = 0; j < n_tiles; ++j) {
    // Both waits come before any MMA is issued: nothing waits while an MMA is in flight.
    tma::wait(sm.full_k + (ring0 + j) % kSm90Stages, ((ring0 + j) / kSm90Stages) & 1);
    const bool pv = j > 0 && j <= wg_tiles;  // P·V of tile j - 1 this iteration
    if (j > 0) wait_v(j - 1);
    take_turn();
    if (j < wg_tiles) {
      float s[kSm90Keys / 8][4];
      issue_scores<T, D>(s, qf, k_desc + stage_of(j));
      if (pv) issue_pv<T, D>(o, pf, v_desc + stage_of(j - 1));
      if (pv)
        wgmma::wait<1>();
      else
        wgmma::wait<0>();
      pass_turn();
      wgmma::fence_operands(s);
      release(sm.empty_k + (ring0 + j) % kSm90Stages);
      // Causal mask only on tiles reaching past the warpgroup's first row.
      const int key0 = j * kSm90Keys;
      float corr_a, corr_b;
      if (key0 + kSm90Keys - 1 > wg_pos)
        softmax_step<true>(s, qscale, pos_a - key0 - 2 * t4, pos_b - key0 - 2 * t4, m_a, m_b, l_a,
                           l_b, corr_a, corr_b);
      else
        softmax_step<false>(s, qscale, 0, 0, m_a, m_b, l_a, l_b, corr_a, corr_b);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      rescale_rows(o, corr_a, corr_b);
      pack_probabilities<T>(s, pf);
    } else {
      if (pv) issue_pv<T, D>(o, pf, v_desc + stage_of(j - 1));  // the last P·V, past the diagonal
      pass_turn();
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      release(sm.empty_k + (ring0 + j) % kSm90Stages);
    }
    if (j > 0) release(sm.empty_v + (ring0 + j - 1) % kSm90Stages);
  }
  // The last V tile: multiplied if the warpgroup reaches it, waited for and released either way.
  wait_v(n_tiles - 1);
  if (wg_tiles > 0 && wg_tiles == n_tiles) {
    issue_pv<T, D>(o, pf, v_desc + stage_of(n_tiles - 1));
    wgmma::wait<0>();
    wgmma::fence_operands(o);
  }
  release(sm.empty_v + (ring0 + n_tiles - 1) % kSm90Stages);
  if (tail) release(sm.v_done);
  pr.tiles += n_tiles;
  pr.items += 1;
  pr.tails += tail ? 1 : 0;

  quad_sum(l_a, l_b);
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f;
  const float inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
  store_tile_rows<T, D>(p, t, o, t.row0 + wrow + g, t4, inv_a, inv_b);
}
#endif  // PAGELLM_WGMMA_AVAILABLE

// Warp-specialised, as FlashAttention-3: warpgroup 0 produces (one warp issuing TMA loads, with
// few registers: produce_sm90_item), warpgroups 1 and 2 consume (consume_sm90_item, with the
// registers the producer gave back), so the MMAs never wait at a block barrier for loads.
// Persistent: one block per SM takes work items (tile item, query head; the plan's order, longest
// first, the heads of an item together) in snake order (work_item); the producer loads the next
// item's Q and first tiles while the consumers finish and store the last one.
template <typename T, int D, bool kPingPong>
__global__ void __launch_bounds__(kSm90Threads, 1)
    tile_attention_sm90_kernel(const __grid_constant__ AttentionParams p,
                               const __grid_constant__ AttentionPlan plan,
                               const __grid_constant__ Sm90Maps maps) {
#if PAGELLM_WGMMA_AVAILABLE
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ unsigned char smem_raw[];
  const Sm90Smem sm = sm90_smem<D>(smem_raw);
  const int num_work = plan.num_tile_items * p.num_heads;
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSm90Stages; ++s) {
      tma::init(sm.full_k + s, 1);
      tma::init(sm.full_v + s, 1);
      tma::init(sm.empty_k + s, kSm90ConsumerWarps);
      tma::init(sm.empty_v + s, kSm90ConsumerWarps);
    }
    tma::init(sm.q_full, 1);
    tma::init(sm.q_empty, kSm90ConsumerWarps);
    tma::init(sm.v_fixed, 1);
    tma::init(sm.v_done, kSm90ConsumerWarps);
    tma::fence_init();
  }
  __syncthreads();
  Sm90Progress pr;
  // Round r takes work item r * gridDim.x + blockIdx.x, or counting down on odd rounds: with items
  // longest first, the snake order evens the blocks' sums.
  const int grid = gridDim.x;
  const auto work_item = [&](int r) {
    return r * grid + ((r & 1) ? grid - 1 - int(blockIdx.x) : int(blockIdx.x));
  };
  const auto span = [&](int w) {
    return tile_span_at(p, plan, kSm90TileRows, w / p.num_heads, w % p.num_heads);
  };
  if (warp < 4) {  // the producer warpgroup
    tma::release_registers<kSm90ProducerRegs>();
    if (warp == 0) {
      for (int r = 0, w = work_item(0); w < num_work; w = work_item(++r)) {
        produce_sm90_item<D>(p, span(w), maps, sm, lane, pr);
      }
    }
    return;
  }
  tma::claim_registers<kSm90ConsumerRegs>();
  const int cwarp = warp - 4;
  const int cwg = __shfl_sync(0xffffffffu, cwarp >> 2, 0);
  // Ping-pong turns run on across items: warpgroup 0 goes first, and at the end takes the turn
  // warpgroup 1 passed last.
  if constexpr (kPingPong) {
    if (cwg == 1) tma::named_barrier_arrive(1, 256);
  }
  for (int r = 0, w = work_item(0); w < num_work; w = work_item(++r)) {
    consume_sm90_item<T, D, kPingPong>(p, span(w), sm, cwarp, lane, pr);
  }
  if constexpr (kPingPong) {
    if (cwg == 0) tma::named_barrier_sync(1, 256);
  }
#endif  // PAGELLM_WGMMA_AVAILABLE
}

template <typename T, int D, bool kPingPong>
cudaError_t launch_tile_sm90_config(const AttentionParams& p, const AttentionPlan& plan,
                                    cudaStream_t stream) {
  constexpr int kSmem = sm90_smem_bytes<D>();
  const cudaError_t attr = allow_dynamic_smem<tile_attention_sm90_kernel<T, D, kPingPong>>(kSmem);
  if (attr != cudaSuccess) return attr;
  Sm90Maps maps;
  if (!make_sm90_maps(p, &maps)) return cudaErrorNotSupported;
  const int64_t work = int64_t{plan.num_tile_items} * p.num_heads;
  if (work > INT32_MAX) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(work, sm_count())));
  return launch_kernel(tile_attention_sm90_kernel<T, D, kPingPong>, grid, kSm90Threads, kSmem,
                       stream, p, plan, maps);
}

template <typename T, int D>
cudaError_t launch_tile_sm90_head_dim(const AttentionParams& p, const AttentionPlan& plan,
                                      cudaStream_t stream) {
  return prefill_pingpong_enabled() ? launch_tile_sm90_config<T, D, true>(p, plan, stream)
                                    : launch_tile_sm90_config<T, D, false>(p, plan, stream);
}

template <typename T>
cudaError_t launch_tile_sm90(const AttentionParams& p, const AttentionPlan& plan,
                             cudaStream_t stream) {
  if (!sm90_tma_fits(p)) return cudaErrorInvalidValue;
  if (p.head_dim == 64) return launch_tile_sm90_head_dim<T, 64>(p, plan, stream);
  if (p.head_dim == 128) return launch_tile_sm90_head_dim<T, 128>(p, plan, stream);
  return cudaErrorNotSupported;
}

}  // namespace pagellm::cuda::attention
