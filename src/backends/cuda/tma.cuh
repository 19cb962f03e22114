// Hopper (sm_90a) asynchronous-copy building blocks: shared-memory mbarriers (arrival counts plus
// transaction bytes), tensor-memory-accelerator (TMA) loads of a tensor map's box into shared
// memory, and the warpgroup register reallocation of warp-specialised kernels. Only meaningful in
// code compiled for sm_90a; callers guard their use with PAGELLM_WGMMA_AVAILABLE (wgmma.cuh).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "backends/cuda/attention/wgmma.cuh"

namespace pagellm::cuda::tma {

#if PAGELLM_WGMMA_AVAILABLE
__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier whose phase completes after `count` arrivals (and the bytes any arrive_expect_tx
// announced). Made visible to the async proxy (TMA) and the other threads by fence_init() and a
// block barrier.
__device__ __forceinline__ void init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_addr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also announces `bytes` of TMA data the phase must receive before it completes.
__device__ __forceinline__ void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_addr(bar)),
               "r"(bytes)
               : "memory");
}

// Waits until the phase of parity `parity` has completed (phase k has parity k & 1): a barrier's
// k-th use waits with parity k & 1. The retry loop lives inside the asm, so the compiler sees no
// divergent branch here (one next to an asynchronous warpgroup MMA serialises the MMAs).
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT;\n}\n" ::"r"(shared_addr(bar)),
      "r"(parity)
      : "memory");
}

// One arrival on bar from each thread where `pred` holds, predicated inside the asm (no branch
// for the compiler to see beside an asynchronous MMA).
__device__ __forceinline__ void arrive_if(uint64_t* bar, bool pred) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %1, 0;\n"
      "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(shared_addr(bar)),
      "r"(static_cast<int>(pred))
      : "memory");
}

// Loads the box at coordinates (c0, c1, c2) (innermost first) of a 3-D tensor map into shared
// memory at dst; `bar` receives the bytes. Elements outside the tensor arrive as zeros (and still
// count).
__device__ __forceinline__ void load_3d(void* dst, const CUtensorMap& map, uint64_t* bar, int c0,
                                        int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(shared_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(shared_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// The 2-D form of load_3d: the box at (c0, c1) (innermost first).
__device__ __forceinline__ void load_2d(void* dst, const CUtensorMap& map, uint64_t* bar, int c0,
                                        int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(shared_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(shared_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

// Named block barriers (1-15; 0 is __syncthreads): `threads` in all, some waiting (sync), some only
// arriving.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Warpgroup register reallocation: a producer warpgroup gives registers back, consumers take them.
template <int N>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif  // PAGELLM_WGMMA_AVAILABLE

}  // namespace pagellm::cuda::tma
