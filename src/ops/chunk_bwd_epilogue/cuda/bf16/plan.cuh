#pragma once
// The bf16 epilogue kernel's fixed shape and shared-memory map. It takes the model's shape only:
// bf16 inputs, chunks of 64 tokens, K = V = 128, one value head per query/key head, h and dh in
// bf16; every other problem runs the general kernel (../kernel.cuh). A CTA of 16 warps owns one
// (chunk, head); warp w computes the 16 x 32 (or 16 x 16) output tile of rows 16 (w % 4) and
// column quarter w / 4 of every product, so a row slice is one 16-row sub-chunk.
//
// Tiles are bf16, row-major, with 8 elements of padding per row (ldmatrix conflict-free), or
// float32 with 4. Regions are reused as the unit goes on (byte offsets below):
//   kA    Akk (as stored; columns past a short chunk zeroed)
//   kG    G2 = log2 of the cumulative decay, float32 [64][132]
//   kDo, kDv   do and dv; after the product pass: X = D ⊙ β (hi, lo), then Pk = dAkk (hi, lo);
//              after the intra terms: dG float32 [64][132]
//   kVn   v_new
//   kH    h [128][136] (rows k, or v for V-first states); at the end dk float32 [64][132]
//   kKGU  KG = k̂ ⊙ 2^G2 (hi, lo), then U = v − KG·S (hi, lo), then dh, at the end dq float32
//   kKV   k and v; then t = Akkᵀ dv (hi, lo); then q and k again
//   kS    Akkᵀ X (hi, lo), then Pq = scale · dAqk (hi, lo)
//   kSmall  per-row and per-column float32 vectors

#include <cuda_bf16.h>

namespace kda::cuda::epilogue::bf16 {

using Bf16 = __nv_bfloat16;

constexpr int kL = 64;   // chunk rows
constexpr int kD = 128;  // K = V
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

constexpr int kPitchD = kD + 8;  // bf16 elements per row of a 128-wide tile
constexpr int kPitchL = kL + 8;  // bf16 elements per row of a 64-wide tile
constexpr int kPitchF = kD + 4;  // float32 elements per row of a 128-wide tile

constexpr int kTileD = kL * kPitchD * 2;      // 64 x 128 bf16: 17408 bytes
constexpr int kStateTile = kD * kPitchD * 2;  // 128 x 128 bf16: 34816
constexpr int kTileL = kL * kPitchL * 2;      // 64 x 64 bf16: 9216
constexpr int kTileF = kL * kPitchF * 4;      // 64 x 128 float32: 33792

constexpr int kA = 0;
constexpr int kG = kA + kTileL;
constexpr int kDo = kG + kTileF;
constexpr int kDv = kDo + kTileD;
constexpr int kVn = kDv + kTileD;
constexpr int kH = kVn + kTileD;
constexpr int kKGU = kH + kStateTile;
constexpr int kKV = kKGU + kStateTile;
constexpr int kS = kKV + 2 * kTileD;
constexpr int kSmall = kS + 2 * kTileL;

// Float offsets inside kSmall.
constexpr int kBeta = 0;                  // β (activated)
constexpr int kBetaRawGrad = kBeta + kL;  // dβ / d(β's input)
constexpr int kInvQ = kBetaRawGrad + kL;  // 1 / ||q|| (1 without l2norm, 0 past the chunk)
constexpr int kInvK = kInvQ + kL;
constexpr int kSDot = kInvK + kL;             // Σ_v S ⊙ dS per channel
constexpr int kDbPart = kSDot + kD;           // [4 column quarters][64 rows] dβ partials
constexpr int kKeysPart = kDbPart + 4 * kL;   // [4 row slices][128] Σ_i k̂ dk0 partials
constexpr int kSegment = kKeysPart + 4 * kD;  // [4 segments][128] the reverse cumsum's totals
constexpr int kSmallFloats = kSegment + 4 * kD;

constexpr int kSmemBytes = kSmall + kSmallFloats * 4;

static_assert(2 * kTileD >= kTileF, "dG, dq and dk float32 tiles fit where they are put");
static_assert(2 * kTileL <= 2 * kTileD, "X and Pk fit in the do and dv tiles");
static_assert(kSmemBytes <= 227 * 1024, "one CTA per SM");

}  // namespace kda::cuda::epilogue::bf16
