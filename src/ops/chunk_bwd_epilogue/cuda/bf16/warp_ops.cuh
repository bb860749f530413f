#pragma once
// Warp-level pieces of the bf16 epilogue kernel: the cp.async copies of its input tiles, float32
// values split into two bf16 terms (x ≈ hi + lo, about 16 significant bits) for the operands the
// kernel derives, and the mma.sync products of split operands (2 terms when one side is split,
// 3 when both are: the lo·lo term is below float32 accumulation noise).

#include <cstdint>

#include "cuda/common/fast_math.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "ops/chunk_bwd_epilogue/cuda/bf16/plan.cuh"

namespace kda::cuda::epilogue::bf16 {

using mma::ALayout;
using mma::BLayout;

// Rows 0 .. kRows - 1 of a tile of kCols bf16 columns, row r read from src + r * row_stride
// (elements); rows at or past `valid_rows` are zero-filled. Issued by the whole block, completed
// by the caller's cp_async_wait and barrier.
template <int kRows, int kCols, int kPitch>
__device__ __forceinline__ void copy_tile(Bf16* dst, const Bf16* src, int64_t row_stride,
                                          int valid_rows) {
  constexpr int kPieces = kCols / 8;  // 16-byte pieces per row
  static_assert(kRows * kPieces % kThreads == 0, "whole pieces per thread");
#pragma unroll
  for (int m = 0; m < kRows * kPieces / kThreads; ++m) {
    const int e = static_cast<int>(threadIdx.x) + m * kThreads;
    const int r = e / kPieces, c = (e % kPieces) * 8;
    const bool inside = r < valid_rows;
    mma::cp_async_16(dst + r * kPitch + c, inside ? src + r * row_stride + c : src,
                     inside ? 16 : 0);
  }
}

__device__ __forceinline__ uint32_t bits_of(__nv_bfloat162 v) {
  return *reinterpret_cast<const uint32_t*>(&v);
}

// (x0, x1) as bf16 pairs hi + lo.
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 back = __bfloat1622float2(h);
  hi = bits_of(h);
  lo = bits_of(__floats2bfloat162_rn(x0 - back.x, x1 - back.y));
}

__device__ __forceinline__ float2 load_pair(const Bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// Where lane's C-fragment elements of a warp tile at (row0, col0) sit: element e of n-tile nt at
// row row0 + g + 8 (e / 2), column col0 + 8 nt + 2 tq + (e % 2).
struct Lane {
  int lane, g, tq;
  __device__ explicit Lane(int l) : lane(l), g(l / 4), tq(l % 4) {}
  __device__ int row(int row0, int e) const { return row0 + g + 8 * (e / 2); }
  __device__ int col(int col0, int nt, int e) const { return col0 + 8 * nt + 2 * tq + (e & 1); }
  // The B fragment's (k x n) element m of n-tile nt: k row row0 + 2 tq + (m % 2) + 8 (m / 2),
  // n column col0 + 8 nt + g.
  __device__ int b_row(int row0, int m) const { return row0 + 2 * tq + (m & 1) + 8 * (m / 2); }
  __device__ int b_col(int col0, int nt) const { return col0 + 8 * nt + g; }
};

// fn(nt, half, row, col) for each pair of adjacent C-fragment elements the lane holds in a
// 16 x (8 kNT) warp tile at (row0, col0): elements 2 half and 2 half + 1 of n-tile nt, at row
// `row`, columns col and col + 1.
template <int kNT, typename Fn>
__device__ __forceinline__ void for_each_pair(const Lane& l, int row0, int col0, Fn fn) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) fn(nt, half, l.row(row0, 2 * half), l.col(col0, nt, 0));
  }
}

// A 16 x (8 kNT) float32 accumulator tile stored as bf16 hi and lo tiles at (row0, col0).
template <int kNT>
__device__ __forceinline__ void store_split(Bf16* hi, Bf16* lo, int pitch,
                                            const float (&acc)[kNT][4], int row0, int col0,
                                            const Lane& l) {
  for_each_pair<kNT>(l, row0, col0, [&](int nt, int half, int row, int col) {
    uint32_t h, o;
    split2(acc[nt][2 * half], acc[nt][2 * half + 1], h, o);
    *reinterpret_cast<uint32_t*>(hi + row * pitch + col) = h;
    *reinterpret_cast<uint32_t*>(lo + row * pitch + col) = o;
  });
}

template <int kNT>
__device__ __forceinline__ void zero_acc(float (&acc)[kNT][4]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  }
}

// acc += (A_hi + A_lo) · B over kKSteps k16 steps; A split, B raw.
template <ALayout kA, BLayout kB, int kKSteps, int kNT>
__device__ __forceinline__ void mma_split_a(float (&acc)[kNT][4], const Bf16* a_hi,
                                            const Bf16* a_lo, int a_ld, const Bf16* b, int b_ld,
                                            int lane) {
  mma::warp_mma<Bf16, kA, kB, kKSteps, kNT>(acc, a_hi, a_ld, b, b_ld, lane);
  mma::warp_mma<Bf16, kA, kB, kKSteps, kNT>(acc, a_lo, a_ld, b, b_ld, lane);
}

// acc += A · (B_hi + B_lo); A raw, B split.
template <ALayout kA, BLayout kB, int kKSteps, int kNT>
__device__ __forceinline__ void mma_split_b(float (&acc)[kNT][4], const Bf16* a, int a_ld,
                                            const Bf16* b_hi, const Bf16* b_lo, int b_ld,
                                            int lane) {
  mma::warp_mma<Bf16, kA, kB, kKSteps, kNT>(acc, a, a_ld, b_hi, b_ld, lane);
  mma::warp_mma<Bf16, kA, kB, kKSteps, kNT>(acc, a, a_ld, b_lo, b_ld, lane);
}

__device__ __forceinline__ void mma3(float (&acc)[4], const uint32_t (&a_hi)[4],
                                     const uint32_t (&a_lo)[4], const uint32_t (&b_hi)[2],
                                     const uint32_t (&b_lo)[2]) {
  mma::mma_16816<Bf16>(acc, a_hi, b_hi);
  mma::mma_16816<Bf16>(acc, a_hi, b_lo);
  mma::mma_16816<Bf16>(acc, a_lo, b_hi);
}

}  // namespace kda::cuda::epilogue::bf16
