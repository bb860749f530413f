#pragma once
// Device side of the bulk tensor copies (TMA, sm_90): shared-memory barriers that count the bytes
// a copy delivers, the rank-4 tile copy into shared memory, the rank-4 L2 prefetch, and the proxy
// fence that orders ordinary shared-memory writes before a later bulk copy overwrites them.

#include <cstdint>

#include "cuda/common/tensor_map.hpp"

namespace kda::cuda::tma {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread: a barrier that completes a phase when one arrival and the announced bytes are in.
__device__ __forceinline__ void barrier_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_address(bar)) : "memory");
}

// One thread: a barrier whose phase completes after `count` arrivals and, when announced, the
// bytes of the phase's copies.
__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count)
               : "memory");
}

// After barrier_init, before any thread or copy uses the barrier (then a CTA barrier).
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The issuing thread's arrival, announcing the bytes the phase's copies will deliver.
__device__ __forceinline__ void barrier_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   smem_address(bar)),
               "r"(bytes)
               : "memory");
}

// Waits until the barrier's phase of parity `parity` (0, 1, 0, ... per use) has completed; the
// copies' writes are then visible to this thread.
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_address(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n"
        " mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// Box at coordinates (c0, c1, c2, c3) (innermost first, in elements) of `map` into shared memory
// at `dst` (128-byte aligned), completing `bytes` of the box's size on `bar`.
__device__ __forceinline__ void copy_tile_4d(void* dst, const TensorMapBytes& map, uint64_t* bar,
                                             int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_address(dst)),
      "l"(reinterpret_cast<uint64_t>(&map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(smem_address(bar))
      : "memory");
}

// Asks L2 to fetch the box at (c0, c1, c2, c3) of `map` (nothing reaches the SM).
__device__ __forceinline__ void prefetch_tile_4d(const TensorMapBytes& map, int c0, int c1, int c2,
                                                 int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(&map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// `base` (dynamic shared memory) rounded up to the 128-byte swizzle's period, 1024 bytes: where
// swizzled tiles may start. The launch asks for 1024 bytes more than the tiles need.
__device__ __forceinline__ unsigned char* align_to_swizzle_period(unsigned char* base) {
  return base + (1024 - smem_address(base) % 1024) % 1024;
}

// Orders this thread's earlier ordinary shared-memory writes before later bulk copies (the async
// proxy) into the same bytes.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace kda::cuda::tma
