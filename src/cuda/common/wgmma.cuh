#pragma once
// Hopper's warpgroup matrix multiply (wgmma, sm_90a), used by the WY operator's tensor-core
// kernel for its K loop at BT = 64: a warpgroup (4
// consecutive warps, 128 threads) multiplies a 64 x 16 tile of A by a 16 x N tile of B, both read
// by the tensor cores straight from shared memory through 64-bit matrix descriptors, into float32
// accumulators held in registers. v2's mma.sync needs every operand loaded into registers first
// (ldmatrix), and ncu shows v2 waiting on exactly that shared-memory traffic.
//
// Layout used here: both operands K-major (a row of A or of Bᵀ holds consecutive k) in 16-bit
// types, tiles of 64 k (128 bytes) per row with the 128-byte swizzle, the layout a bulk tensor
// copy writes with CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunk c of row r lies at chunk position
// c ^ (r % 8) of that row, rows 128 bytes apart, a tile 1024-byte aligned.
//
// tests/test_cuda_wgmma_units.cu checks the layout on the host and the product on the GPU.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/tma.cuh"

namespace kda::cuda::wgmma {

// Byte offset of the 16-byte chunk holding byte `k_byte` (0..127) of row `row` in a 128-byte
// swizzled K-major tile.
__host__ __device__ constexpr int swizzle128_offset(int row, int k_byte) {
  return row * 128 + ((((k_byte >> 4) ^ (row & 7)) << 4) | (k_byte & 15));
}

// Element index of 16-bit element (row, col) in a tile of such swizzled rows stored as atoms of
// [kRows][64] elements, atom a holding columns 64 a .. 64 a + 63 (a K-major operand with more
// than 64 k: k_major_sw128_desc_step below walks it).
template <int kRows>
__host__ __device__ constexpr int sw128_element_index(int row, int col) {
  return (col / 64) * kRows * 64 + swizzle128_offset(row, 2 * (col % 64)) / 2;
}

// The matrix descriptor of a K-major tile with the 128-byte swizzle starting at `tile`
// (1024-byte aligned, so the descriptor's base offset is 0), advanced by `k_bytes` along k
// inside the 128-byte row (a multiple of 32: one k16 step of a 16-bit type is 32 bytes).
// Fields: start address >> 4 (bits 0-13), leading byte offset >> 4 (bits 16-29: unused by
// swizzled K-major layouts, 1 by convention), stride byte offset >> 4 (bits 32-45: 1024 bytes
// between groups of 8 rows), swizzle mode (bits 62-63: 1 = 128 bytes).
__device__ __forceinline__ uint64_t k_major_sw128_desc(const void* tile, int k_bytes) {
  const uint64_t start = (tma::smem_address(tile) + static_cast<uint32_t>(k_bytes)) & 0x3ffffu;
  uint64_t desc = start >> 4;
  desc |= uint64_t{1} << 16;
  desc |= uint64_t{1024 >> 4} << 32;
  desc |= uint64_t{1} << 62;
  return desc;
}

// Orders this warpgroup's earlier register and shared-memory accesses before the wgmma that
// follow (before the first wgmma of a sequence, and after the accumulators were touched).
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Closes the group of wgmma issued since the last commit.
__device__ __forceinline__ void commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The 32 float32 accumulators of an m64n64 wgmma as asm operands %0 .. %31: their list in the
// instruction text, and the output constraints (read and written).
#define KDA_WGMMA_D32_LIST                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, " \
  "%17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define KDA_WGMMA_D32_OUTPUTS(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// D (64 x 64, float32) = A (64 x 16) · B (16 x 64) [+ D when `accumulate`], A and B bf16 in
// shared memory, both K-major (descriptors above). Accumulator layout, thread t of the
// warpgroup (warp w = t / 32, lane l): d[4 j + 2 h + e] is row 16 w + l / 4 + 8 h, column
// 8 j + 2 (l % 4) + e (the mma.sync C fragment of 16 x 8, once per n8 tile j).
__device__ __forceinline__ void mma_m64n64k16_bf16(float (&d)[32], uint64_t desc_a, uint64_t desc_b,
                                                   bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " KDA_WGMMA_D32_LIST
      "%32, %33, p, 1, 1, 0, 0;\n}\n"
      : KDA_WGMMA_D32_OUTPUTS(d)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0)
      : "memory");
}

// The 16-bit input types wgmma takes here.
template <typename T>
constexpr bool is_wgmma_input = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// Issues SHAPE_MACRO("bf16", ...) or SHAPE_MACRO("f16", ...) for the 16-bit input type T: the
// instruction text of each wgmma shape differs between the two types only in that word.
#define KDA_WGMMA_FOR_TYPE(T, SHAPE_MACRO, ...)                                 \
  static_assert(is_wgmma_input<T>, "wgmma inputs are __nv_bfloat16 or __half"); \
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {                             \
    SHAPE_MACRO("bf16", __VA_ARGS__);                                           \
  } else {                                                                      \
    SHAPE_MACRO("f16", __VA_ARGS__);                                            \
  }

// One wgmma.m64nNk16 with float32 accumulators d[0..N/2) and inputs of PTX type TYPE ("bf16"
// or "f16"): the instruction text differs only in that word, so the two input types share it.
#define KDA_WGMMA_M64N16K16(TYPE, d, desc_a, desc_b, accumulate)                            \
  asm volatile(                                                                             \
      "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"                                        \
      " wgmma.mma_async.sync.aligned.m64n16k16.f32." TYPE "." TYPE                          \
      " "                                                                                   \
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), \
        "+f"(d[7])                                                                          \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0)                                   \
      : "memory")
#define KDA_WGMMA_M64N8K16(TYPE, d, desc_a, desc_b, accumulate)   \
  asm volatile(                                                   \
      "{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n"               \
      " wgmma.mma_async.sync.aligned.m64n8k16.f32." TYPE "." TYPE \
      " "                                                         \
      "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"             \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])            \
      : "l"(desc_a), "l"(desc_b), "r"(accumulate ? 1 : 0)         \
      : "memory")

// D (64 x 16, float32) [+]= A (64 x 16) · B (16 x 16), both K-major in shared memory, 16-bit T
// (__nv_bfloat16 or __half): d[4 j + 2 h + e] is row 16 w + l / 4 + 8 h, column 8 j + 2 (l % 4)
// + e (j = 0, 1). The shape of one h slab's products in the WY kernel (16 k columns per slab, or
// per warpgroup with slab pairs).
template <typename T>
__device__ __forceinline__ void mma_m64n16k16(float (&d)[8], uint64_t desc_a, uint64_t desc_b,
                                              bool accumulate) {
  KDA_WGMMA_FOR_TYPE(T, KDA_WGMMA_M64N16K16, d, desc_a, desc_b, accumulate);
}

// D (64 x 8, float32) [+]= A (64 x 16) · B (16 x 8), 16-bit T (__nv_bfloat16 or __half), both
// K-major. d[2 h + e] is row 16 w + l / 4 + 8 h, column 2 (l % 4) + e: for warp w of the
// warpgroup exactly the mma.sync m16n8 C fragment of rows 16 w .. 16 w + 15. The WY kernel's
// K-loop products (one warpgroup per 8 k columns of a slab).
template <typename T>
__device__ __forceinline__ void mma_m64n8k16(float (&d)[4], uint64_t desc_a, uint64_t desc_b,
                                             bool accumulate) {
  KDA_WGMMA_FOR_TYPE(T, KDA_WGMMA_M64N8K16, d, desc_a, desc_b, accumulate);
}

#undef KDA_WGMMA_FOR_TYPE
#undef KDA_WGMMA_M64N16K16
#undef KDA_WGMMA_M64N8K16
#undef KDA_WGMMA_M64N32K16
#undef KDA_WGMMA_D32_LIST
#undef KDA_WGMMA_D32_OUTPUTS

// Keeps the compiler from touching accumulator registers across a wgmma sequence: the asm
// outputs of mma_async say the registers are ready when the instruction issues, but they are
// written until wait_group returns. Call after the accumulators are set and after wait_group.
template <int kN>
__device__ __forceinline__ void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Products over k beyond one 128-byte row: a K-major operand of 16-bit type with K = 64 a
// stored as `a` swizzled tiles of [rows][64], each `atom_bytes` = rows * 128 apart (a multiple of
// 1024). The descriptor of k16 step s: tile s / 4, 32 (s % 4) bytes into its rows.
__device__ __forceinline__ uint64_t k_major_sw128_desc_step(const void* tiles, int atom_bytes,
                                                            int step) {
  return k_major_sw128_desc(static_cast<const unsigned char*>(tiles) + (step / 4) * atom_bytes,
                            32 * (step % 4));
}

}  // namespace kda::cuda::wgmma
