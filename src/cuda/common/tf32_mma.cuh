#pragma once
// TF32 tensor-core building blocks for float32 operands (mma.sync m16n8k8, sm_80+ instructions,
// used on sm_90a): the TF32 rounding, one m16n8k8 product, the "3xTF32" split that recovers
// float32-level accuracy from TF32 tensor cores (x = hi + lo, both TF32; a·b taken as
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi), and warp-level fragment loads from float32 tiles in shared
// memory with plain 32-bit loads or (k-paired, where k is a tile's contiguous dimension) 128-bit
// loads. Shared by chunk_bwd_intra's float32 path and chunk_bwd_wy_dqkg's float32 kernel;
// tests/ops/chunk_bwd_wy_dqkg/test_wy_sm80_mma_units.cu checks warp_mma_tf32 and
// warp_mma_tf32_k16 against float64 products.
//
// Fragments of mma.m16n8k8 with .tf32 inputs (PTX ISA, "Matrix Fragments for mma.m16n8k8"),
// g = lane / 4, q = lane % 4:
//   A 16 x 8: a[0] = (g, q), a[1] = (g + 8, q), a[2] = (g, q + 4), a[3] = (g + 8, q + 4)
//   B  8 x 8: b0 = (q, g), b1 = (q + 4, g)
//   C 16 x 8: d[0] = (g, 2q), d[1] = (g, 2q + 1), d[2] = (g + 8, 2q), d[3] = (g + 8, 2q + 1)
// (C is the same as mma.m16n8k16's, so epilogues written for one serve the other.)

#include <cstdint>

#include "cuda/common/mma_fragments.cuh"

namespace kda::cuda::mma {

// x rounded to TF32 (10 mantissa bits), to nearest with ties away from zero.
__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t y;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
  return y;
}

// d += A · B for one m16n8k8 tile with TF32 inputs and float32 accumulation (fragments above).
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// An mma operand split for kSplit products: kSplit == 1 is plain TF32 (x rounded once);
// kSplit == 3 is "3xTF32", x = hi + lo with both parts TF32, and a product a·b taken as
// a_lo·b_hi + a_hi·b_lo + a_hi·b_hi (float32-level accuracy: the dropped a_lo·b_lo is 2^-22
// relative).
template <int kSplit>
struct Tf32Split {
  uint32_t hi;
  uint32_t lo;
  Tf32Split() = default;  // for fragment arrays filled by the loads below
  __device__ __forceinline__ explicit Tf32Split(float x) {
    if constexpr (kSplit == 1) {
      // Round half away from zero in one integer add: the tensor cores read a TF32 operand's
      // top 19 bits and ignore the 13 below, so adding half of the dropped range and letting
      // them truncate rounds as cvt.rna does for every finite x (cvt.rna costs a compare and a
      // predicated add; an infinite or NaN x, which no read input holds, may come out NaN).
      hi = __float_as_uint(x) + 0x1000u;
      lo = 0u;
    } else {
      hi = tf32_rna(x);
      lo = tf32_rna(x - __uint_as_float(hi));
    }
  }
};

template <int kSplit>
__device__ __forceinline__ void mma_split(float (&d)[4], const Tf32Split<kSplit> (&a)[4],
                                          const Tf32Split<kSplit>& b0,
                                          const Tf32Split<kSplit>& b1) {
  const uint32_t a_hi[4] = {a[0].hi, a[1].hi, a[2].hi, a[3].hi};
  if constexpr (kSplit == 3) {
    const uint32_t a_lo[4] = {a[0].lo, a[1].lo, a[2].lo, a[3].lo};
    mma_tf32(d, a_lo, b0.hi, b1.hi);
    mma_tf32(d, a_hi, b0.lo, b1.lo);
  } else {
    static_assert(kSplit == 1, "kSplit is 1 (TF32) or 3 (3xTF32)");
  }
  mma_tf32(d, a_hi, b0.hi, b1.hi);
}

// 3xTF32 with a split of three instructions instead of Tf32Split<3>'s two cvt.rna and a
// subtraction, for operands split as they are loaded (many times per element, as in
// chunk_bwd_wy_dqkg's float32 kernel): hi is x rounded to TF32 by Tf32Split<1>'s integer add, with
// the 13 bits the tensor cores ignore cleared so that lo is exact; lo = x − hi exactly (the two
// share x's top bits, so the difference has at most 13 significant bits) and is handed over
// unrounded, the tensor cores truncating it to TF32: an error of at most 2^-11 of lo, about 2^-23
// of x (a rounded lo: 2^-24; the dropped lo·lo: 2^-22). Same three products as Tf32Split<3>.
struct Tf32x3Split {
  uint32_t hi;
  uint32_t lo;
  Tf32x3Split() = default;  // for fragment arrays filled by the loads below
  __device__ __forceinline__ explicit Tf32x3Split(float x) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
  }
};

__device__ __forceinline__ void mma_split(float (&d)[4], const Tf32x3Split (&a)[4],
                                          const Tf32x3Split& b0, const Tf32x3Split& b1) {
  const uint32_t a_hi[4] = {a[0].hi, a[1].hi, a[2].hi, a[3].hi};
  const uint32_t a_lo[4] = {a[0].lo, a[1].lo, a[2].lo, a[3].lo};
  mma_tf32(d, a_lo, b0.hi, b1.hi);
  mma_tf32(d, a_hi, b0.lo, b1.lo);
  mma_tf32(d, a_hi, b0.hi, b1.hi);
}

// --- fragment loads from float32 tiles in shared memory --------------------------------------
// Layouts as for the 16-bit loads (mma_fragments.cuh): A kMK holds element (m, k) at
// tile[m * ld + k], kKM at tile[k * ld + m]; B kNK holds (k, n) at tile[n * ld + k], kKN at
// tile[k * ld + n]. Each lane reads its fragment elements with 32-bit loads and splits them on
// the way (Split: Tf32x3Split, or Tf32Split<kSplit>). A row pitch ld with ld % 32 == 4 (or 20)
// words makes the loads that walk rows by g (A kMK, B kNK: word g * ld + q) conflict-free;
// ld % 32 == 8 (or 24) those that walk rows by q (A kKM, B kKN: word q * ld + g).

// The A fragment of the 16 x 8 block whose (m, k) = (0, 0) element is at `origin`.
template <ALayout kLayout, typename Split>
__device__ __forceinline__ void load_a_tf32(Split (&a)[4], const float* origin, int ld, int lane) {
  const int g = lane / 4;
  const int q = lane % 4;
  auto at = [&](int m, int k) {
    return kLayout == ALayout::kMK ? origin[m * ld + k] : origin[k * ld + m];
  };
  a[0] = Split(at(g, q));
  a[1] = Split(at(g + 8, q));
  a[2] = Split(at(g, q + 4));
  a[3] = Split(at(g + 8, q + 4));
}

// The B fragment (b0, b1) of the 8 x 8 block whose (k, n) = (0, 0) element is at `origin`.
template <BLayout kLayout, typename Split>
__device__ __forceinline__ void load_b_tf32(Split& b0, Split& b1, const float* origin, int ld,
                                            int lane) {
  const int g = lane / 4;
  const int q = lane % 4;
  auto at = [&](int k, int n) {
    return kLayout == BLayout::kNK ? origin[n * ld + k] : origin[k * ld + n];
  };
  b0 = Split(at(q, g));
  b1 = Split(at(q + 4, g));
}

// acc[nt] += A (16 x 8 kKSteps) · B (8 kKSteps x 8 kNTiles) for one warp, float32 operands in
// shared memory at `a_origin`, `b_origin` (the (0, 0) elements), split by `Split` as they are
// loaded (Tf32x3Split: three products per m16n8k8, float32-level accuracy). The k offset of
// step s is 8 s in both; tile nt starts at n = 8 nt.
template <ALayout kA, BLayout kB, int kKSteps, int kNTiles, typename Split = Tf32x3Split>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[kNTiles][4], const float* a_origin,
                                              int a_ld, const float* b_origin, int b_ld, int lane) {
#pragma unroll
  for (int s = 0; s < kKSteps; ++s) {
    Split a[4];
    load_a_tf32<kA>(a, kA == ALayout::kMK ? a_origin + 8 * s : a_origin + 8 * s * a_ld, a_ld, lane);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      const float* b =
          kB == BLayout::kNK ? b_origin + 8 * nt * b_ld + 8 * s : b_origin + 8 * s * b_ld + 8 * nt;
      Split b0;
      Split b1;
      load_b_tf32<kB>(b0, b1, b, b_ld, lane);
      mma_split(acc[nt], a, b0, b1);
    }
  }
}

// --- k-paired fragment loads: two k8 steps from 128-bit loads ---------------------------------
// The order of the reduction index k does not matter, inside one m16n8k8 product nor across the
// k8 steps of a sum, as long as A and B pair the same physical k. The k-paired loads take a k16
// block (two k8 steps, s = 0, 1) and give lane q its logical k = q and q + 4 of step s at the
// physical k = 4q + 2s and 4q + 2s + 1 (physical k relative to the block; steps s = 0 and 1
// together cover the 16 k's once). Where k is a tile's contiguous dimension, each fragment row
// of a lane is then one 128-bit load for both steps:
//   A [m][k] (kMK): a_s[0], a_s[2] = (g, 4q + 2s), (g, 4q + 2s + 1); a_s[1], a_s[3] the same on
//     row g + 8: two LDS.128 for two steps (the plain loads: eight LDS.32);
//   B [n][k] (kNK): b_s0, b_s1 = (k, n) = (4q + 2s, g), (4q + 2s + 1, g): one LDS.128 (plain:
//   four).
// B [k][n] (kKN) has k on its rows: 32-bit loads from rows 4q + 2s and 4q + 2s + 1 (the same
// physical k's), as many as before.
// Bank conflicts: a warp's LDS.128 is served per quarter warp (8 lanes: g = 2i, 2i + 1, q = 0..3);
// lane (g, q) reads words g ld + 4q .. + 3, so a row pitch ld ≡ 16 mod 32 words puts the two rows
// of a quarter on disjoint halves of the 32 banks: conflict-free (the plain loads' ld ≡ 4 would be
// 2-way). kKN rows 4q + r are 4 ld apart, and 4 ld mod 32 is 0 or 16 for any ld that keeps rows
// 16-byte aligned, so a kKN tile needs a column swizzle to be conflict-free: the kKN load takes the
// lane's column (n, swizzled by the caller) explicitly.

// A fragments of the two k8 steps of the 16 x 16 block whose (m, k) = (0, 0) element is at
// `origin`, A [m][k] (kMK) only; `origin` 16-byte aligned, ld a multiple of 4.
template <typename Split>
__device__ __forceinline__ void load_a_tf32_k16(Split (&a)[2][4], const float* origin, int ld,
                                                int lane) {
  const int g = lane / 4;
  const int q = lane % 4;
  const float4 lo_row = *reinterpret_cast<const float4*>(origin + g * ld + 4 * q);
  const float4 hi_row = *reinterpret_cast<const float4*>(origin + (g + 8) * ld + 4 * q);
  a[0][0] = Split(lo_row.x);
  a[0][1] = Split(hi_row.x);
  a[0][2] = Split(lo_row.y);
  a[0][3] = Split(hi_row.y);
  a[1][0] = Split(lo_row.z);
  a[1][1] = Split(hi_row.z);
  a[1][2] = Split(lo_row.w);
  a[1][3] = Split(hi_row.w);
}

// B fragments b[s] = (b0, b1) of the two k8 steps of the 16 x 8 block whose (k, n) = (0, 0)
// element is at `origin`, B [n][k] (kNK): element (k, n) at origin[n * ld + k]; `origin` 16-byte
// aligned, ld a multiple of 4.
template <typename Split>
__device__ __forceinline__ void load_b_tf32_k16_nk(Split (&b)[2][2], const float* origin, int ld,
                                                   int lane) {
  const int g = lane / 4;
  const int q = lane % 4;
  const float4 v = *reinterpret_cast<const float4*>(origin + g * ld + 4 * q);
  b[0][0] = Split(v.x);
  b[0][1] = Split(v.y);
  b[1][0] = Split(v.z);
  b[1][1] = Split(v.w);
}

// The same for B [k][n] (kKN): element (k, n) of the block at k_rows[k * ld + column], `column`
// being where this lane's n = g sits in the rows (n0 + g for a plain tile, or swizzled).
template <typename Split>
__device__ __forceinline__ void load_b_tf32_k16_kn(Split (&b)[2][2], const float* k_rows, int ld,
                                                   int column, int lane) {
  const float* at = k_rows + 4 * (lane % 4) * ld + column;
  b[0][0] = Split(at[0]);
  b[0][1] = Split(at[ld]);
  b[1][0] = Split(at[2 * ld]);
  b[1][1] = Split(at[3 * ld]);
}

// warp_mma_tf32 with the k-paired loads: acc[nt] += A (16 x 8 kKSteps) · B (8 kKSteps x
// 8 kNTiles), A [m][k] only, kKSteps even. B kKN is read unswizzled (column n0 + g). The same
// products in the same order per accumulator as warp_mma_tf32; only the k's inside each k8 step
// differ (so the sums' rounding differs, within the same bound).
template <BLayout kB, int kKSteps, int kNTiles, typename Split = Tf32x3Split>
__device__ __forceinline__ void warp_mma_tf32_k16(float (&acc)[kNTiles][4], const float* a_origin,
                                                  int a_ld, const float* b_origin, int b_ld,
                                                  int lane) {
  static_assert(kKSteps % 2 == 0, "k-paired loads take k8 steps in pairs");
#pragma unroll
  for (int s = 0; s < kKSteps; s += 2) {
    Split a[2][4];
    load_a_tf32_k16(a, a_origin + 8 * s, a_ld, lane);
    Split b[kNTiles][2][2];
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      if constexpr (kB == BLayout::kNK) {
        load_b_tf32_k16_nk(b[nt], b_origin + 8 * nt * b_ld + 8 * s, b_ld, lane);
      } else {
        load_b_tf32_k16_kn(b[nt], b_origin + 8 * s * b_ld, b_ld, 8 * nt + lane / 4, lane);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) mma_split(acc[nt], a[h], b[nt][h][0], b[nt][h][1]);
    }
  }
}

}  // namespace kda::cuda::mma
