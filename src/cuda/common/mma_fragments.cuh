#pragma once
// Warp-level tensor-core building blocks of the mma kernel (sm_80+ instructions, used on sm_90a):
// cp.async 16-byte global->shared copies, ldmatrix fragment loads from shared memory in every
// layout the kernel needs, and mma.sync m16n8k16 with 16-bit inputs and float32 accumulators.
// tests/ops/chunk_bwd_wy_dqkg/test_wy_sm80_mma_units.cu checks each of them in isolation against
// float64 host products.
//
// Fragment layout of mma.sync.m16n8k16 (PTX ISA "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and t = lane % 4:
//   A (16 x 16, m x k): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8,
//   2t+8..) B (16 x 8,  k x n): b[0] = (2t..2t+1, g),  b[1] = (2t+8..2t+9, g) C (16 x 8,  m x n):
//   c[0..1] = (g, 2t..2t+1),  c[2..3] = (g+8, 2t..2t+1)
// Each 32-bit register holds two 16-bit elements, the lower column (or row, for B) in the low half.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace kda::cuda::mma {

// --- shared-memory addresses and cp.async -----------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes from global `src` to shared `dst`; only the first `src_bytes` (0..16) are read,
// the rest of the 16 bytes are zero-filled. With src_bytes == 0 nothing is read from `src`, which
// must still be a valid pointer. Both addresses must be 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's most recent groups are still in flight. The
// completed copies are visible to this thread only; other threads need a barrier after it.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// --- ldmatrix ----------------------------------------------------------------------------------
// Lane l supplies the row address of 8x8 matrix l / 8 (x4) or (l / 8) % 2 (x2); register r of
// every lane receives matrix r: (row g, cols 2t..2t+1), or with .trans (rows 2t..2t+1, col g).

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(row_addr)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(row_addr)));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(row_addr)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(row_addr)));
}

// --- mma.sync ----------------------------------------------------------------------------------

// d += A · B for one 16 x 8 tile, 16-bit inputs of type T (__half or __nv_bfloat16).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    static_assert(std::is_same_v<T, __half>, "mma inputs are __half or __nv_bfloat16");
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// --- operand loads from shared memory ----------------------------------------------------------
// Where a tile stores an operand element. Every tile row must start 16-byte aligned (row pitch a
// multiple of 8 elements); with a pitch of (cols + 8) elements the loads are bank-conflict free.

// A (m x k): kMK: element (m, k) at tile[m * ld + k] (row-major A);
//            kKM: element (m, k) at tile[k * ld + m] (the tile holds Aᵀ row-major).
enum class ALayout { kMK, kKM };
// B (k x n): kNK: element (k, n) at tile[n * ld + k] (the tile holds Bᵀ row-major);
//            kKN: element (k, n) at tile[k * ld + n] (row-major B).
enum class BLayout { kNK, kKN };

// The A fragment of the 16 x 16 block whose (m, k) = (0, 0) element sits at `origin` (a pointer
// into the tile computed with the layout above).
template <ALayout kLayout, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* origin, int ld, int lane) {
  const int q = lane / 8;  // which 8x8 matrix this lane addresses
  const int r = lane % 8;  // which row of it
  if constexpr (kLayout == ALayout::kMK) {
    // matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
    ldmatrix_x4(a, origin + (r + (q % 2) * 8) * ld + (q / 2) * 8);
  } else {
    // stored rows are k: (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15)
    ldmatrix_x4_trans(a, origin + (r + (q / 2) * 8) * ld + (q % 2) * 8);
  }
}

// B fragments of kNTiles adjacent 8-column tiles (n = 8 * nt ..) over one k16 step, the block's
// (k, n) = (0, 0) element at `origin`. Pairs of tiles take one x4 load; an odd last tile an x2.
template <BLayout kLayout, int kNTiles, typename T>
__device__ __forceinline__ void load_b(uint32_t (&b)[kNTiles][2], const T* origin, int ld,
                                       int lane) {
  const int q = lane / 8;
  const int r = lane % 8;
#pragma unroll
  for (int nt = 0; nt + 1 < kNTiles; nt += 2) {
    uint32_t x[4];
    if constexpr (kLayout == BLayout::kNK) {
      // stored rows are n: (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
      ldmatrix_x4(x, origin + (nt * 8 + r + (q / 2) * 8) * ld + (q % 2) * 8);
    } else {
      // stored rows are k: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
      ldmatrix_x4_trans(x, origin + (r + (q % 2) * 8) * ld + nt * 8 + (q / 2) * 8);
    }
    b[nt][0] = x[0];
    b[nt][1] = x[1];
    b[nt + 1][0] = x[2];
    b[nt + 1][1] = x[3];
  }
  if constexpr (kNTiles % 2 == 1) {
    constexpr int nt = kNTiles - 1;
    const int q2 = q % 2;  // lanes 16..31 repeat lanes 0..15 (their addresses are unused)
    if constexpr (kLayout == BLayout::kNK) {
      ldmatrix_x2(b[nt], origin + (nt * 8 + r) * ld + q2 * 8);
    } else {
      ldmatrix_x2_trans(b[nt], origin + (r + q2 * 8) * ld + nt * 8);
    }
  }
}

// acc[nt] += A (16 x 16 kKSteps) · B (16 kKSteps x 8 kNTiles) for one warp. `a_origin` and
// `b_origin` point at the (0, 0) elements; the k offset of step s is 16 s in both.
template <typename T, ALayout kA, BLayout kB, int kKSteps, int kNTiles>
__device__ __forceinline__ void warp_mma(float (&acc)[kNTiles][4], const T* a_origin, int a_ld,
                                         const T* b_origin, int b_ld, int lane) {
#pragma unroll
  for (int s = 0; s < kKSteps; ++s) {
    uint32_t a[4];
    load_a<kA>(a, kA == ALayout::kMK ? a_origin + 16 * s : a_origin + 16 * s * a_ld, a_ld, lane);
    uint32_t b[kNTiles][2];
    load_b<kB, kNTiles>(b, kB == BLayout::kNK ? b_origin + 16 * s : b_origin + 16 * s * b_ld, b_ld,
                        lane);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) mma_16816<T>(acc[nt], a, b[nt]);
  }
}

// --- 16-bit pairs --------------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low half)
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    static_assert(std::is_same_v<T, __half>, "pairs are __half or __nv_bfloat16");
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  } else {
    static_assert(std::is_same_v<T, __half>, "pairs are __half or __nv_bfloat16");
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
}

}  // namespace kda::cuda::mma
