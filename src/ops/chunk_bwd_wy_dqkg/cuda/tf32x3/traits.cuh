#pragma once
// Compile-time tiles and the shared-memory layout of the float32 tensor-core kernel (3xTF32).
//
// Why a kernel of its own: the sm80_mma kernel's products take 16-bit operands (rounded to X, as
// fla does); float32 X must keep float32-level accuracy (SPEC bar 1e-5), which TF32 alone (10
// mantissa bits, fla's ~1e-3) cannot give. Here every operand stays float32 in shared memory and
// is split into hi + lo TF32 parts as its fragment is loaded; each m16n8k8 step runs three
// mma.sync (lo·hi + hi·lo + hi·hi, cuda/common/tf32_mma.cuh).
//
// One CTA handles one work unit = (chunk, value head), with the sm80_mma kernel's warp grid:
//   kRowBlocks = BT / 16 row blocks x kColGroups = 2, warp w = (row block w / 2, column group
//   w % 2): 8, 4 or 2 warps for BT = 64, 32, 16. A warp owns
//   - per K slab of kSlabK rows of h (k0 ..): the 16 x kWarpK tiles of dQ, dK0, dW at its rows and
//     columns k0 + kWarpK cg .., reduced over all V (A = dO, Vn, dV; B = S, dS);
//   - its rows x V/2 columns of dvb (A = Āᵀ, B = dV);
//   - its rows x BT/2 columns of D, Y = X·Āᵀ and Z = Āᵀ·Y.
// The h slab is the pipeline stage: S and dS stream through a two-slot cp.async ring, float32 as
// stored (no conversion: the slab is the mma's B operand), while the token tiles dO, Vn, dV and Ā
// stay resident for the whole unit.
//
// Occupancy against residency (BT = 64, V = 128): the three float32 token tiles alone are 99 KiB,
// so two CTAs per SM (<= 113 KiB each) cannot keep them resident, and streaming them instead
// would re-read each of them K / kSlabK times from L2 or keep dQ/dK0/dW for all K in registers.
// We keep them resident and run one CTA of 8 warps per SM (~219 KiB); to make that CTA's loads of
// A fragments count, a slab is 32 rows of h (each warp two n8 tiles per A fragment, half the
// barriers of 16-row slabs), which the 1-CTA budget affords. BT = 32 and 16 keep 16-row slabs
// (one n8 tile per warp) so that two (BT = 32) or three (BT = 16, V = 128) CTAs fit an SM.
// Reused regions: Vv lives in ring slot 1 during phase 0 (slot 1 takes slab 1 after it); X and Y
// take the dead dO and Vn tiles after the K loop.

#include <algorithm>

#include "ops/chunk_bwd_wy_dqkg/cuda/quad_cols.cuh"

namespace kda::cuda {

template <int kBT_, int kV_, bool kStateVFirst_>
struct WyDqkgTf32x3Traits {
  static constexpr int kBT = kBT_;
  static constexpr int kV = kV_;
  // h stored [.., V, K] (k contiguous): slabs are copied as V rows x kSlabK k.
  static constexpr bool kStateVFirst = kStateVFirst_;
  static_assert(kBT == 16 || kBT == 32 || kBT == 64, "chunk size must be 16, 32 or 64");
  static_assert(kV == 64 || kV == 128, "V must be 64 or 128");

  static constexpr int kRowBlocks = kBT / 16;
  static constexpr int kColGroups = 2;
  static constexpr int kWarps = kRowBlocks * kColGroups;
  static constexpr int kThreads = 32 * kWarps;

  static constexpr int kSlabK = kBT == 64 ? 32 : 16;  // K rows of h per pipeline stage
  static constexpr int kWarpK = kSlabK / kColGroups;  // a warp's columns of dQ/dK0/dW per slab
  static constexpr int kWarpTiles = kWarpK / 8;       // ... as n8 tiles: 2 (BT = 64) or 1
  static constexpr int kWarpV = kV / kColGroups;      // dvb columns per warp
  static constexpr int kDvbTiles = 4;                 // n8 tiles of dvb per A fragment (32 v)
  static constexpr int kWarpJ = kBT / kColGroups;     // D, Y, Z columns per warp
  static constexpr int kJTiles = kWarpJ / 8;          // n8 tiles of a warp's D, Y, Z
  static constexpr int kVSteps = kV / 8;              // k8 steps of the V reductions
  static constexpr int kJSteps = kBT / 8;             // k8 steps of the BT reductions
  static constexpr int kSlabSteps = kSlabK / 8;       // k8 steps of D += dW·KGᵀ
  static_assert(kWarpV % (8 * kDvbTiles) == 0, "dvb column blocks split a warp's columns");

  // The V reductions of the K loop (and D = dV·Vvᵀ) read their fragments by the k-paired 128-bit
  // loads of cuda/common/tf32_mma.cuh, which want token rows (and k-first slab rows) of pitch
  // ≡ 16 mod 32 words, 12 more floats than the plain loads' ≡ 4. Where that would cost a CTA per SM
  // (k-first, V = 64, BT = 32: 4 -> 3 CTAs; BT = 16: 6 -> 5), the kernel keeps the plain 32-bit
  // loads and pitches instead. (state_v_first has a swizzled, unpadded slab, so it never loses.)
  static constexpr bool kPairedLoads = kStateVFirst || kBT == 64 || kV == 128;

  // --- row pitches in floats (32-bit words), cuda/common/tf32_mma.cuh's rules: ≡ 4 (or 20) mod 32
  // for tiles read by plain 32-bit loads with rows walked by the fragment row g (A [m][k],
  // B [n][k]), ≡ 8 (or 24) for those with rows walked by the fragment column q (A [k][m],
  // B [k][n]), ≡ 16 for tiles read by the k-paired 128-bit loads (A [m][k], B [n][k]: each quarter
  // warp's two rows g on disjoint halves of the banks). Every pitch is a multiple of 4 floats, so
  // rows start 16-byte aligned for cp.async and the 128-bit loads.
  // dO, Vn, dV, Vv [BT][V]: A [m][k] of the K loop's products and of D = dV·Vvᵀ, B [n][k] (Vv) of
  // D, by k-paired 128-bit loads (conflict-free at ≡ 16) or, without kPairedLoads, 32-bit loads
  // (≡ 4). dV is also B [k][n] of dvb = Āᵀ·dV by 32-bit loads, 2-way at either pitch (≡ 16: rows
  // q and q + 2 on the same banks; ≡ 4: rows q and q + 1 half overlapping): once per unit, against
  // the K loop's loads once per slab.
  static constexpr int kTokLd = kPairedLoads ? kV + 16 : kV + 4;
  static constexpr int kALd = kBT + 8;      // Ā[j][i]: read as Āᵀ (A [k][m]) in dvb, dkgb and Z
  static constexpr int kXLd = kBT + 4;      // X [i][n]: A [m][k] of Y = X·Āᵀ
  static constexpr int kYLd = kBT + 8;      // Y [n][j]: B [k][n] of Z = Āᵀ·Y
  static constexpr int kDwLd = kSlabK + 8;  // dW [j][k]: B [k][n] of dkgb (and A [m][k] of D)
  static constexpr int kKgLd = kSlabK + 4;  // KG [j][k]: B [n][k] of D += dW·KGᵀ
  // A slab of h or dh as stored: [kSlabK k][V] (B [n][k] of dO·Sᵀ, k-paired 128-bit loads at pitch
  // ≡ 16 mod 32, or 32-bit loads at ≡ 4) or, state_v_first, [V][kSlabK k] (B [k][n]: 32-bit loads
  // of rows v = 4q + r, the k-paired physical order, with the columns swizzled, see slab_col_xor).
  static constexpr int kSlabRows = kStateVFirst ? kV : kSlabK;
  static constexpr int kSlabCols = kStateVFirst ? kSlabK : kV;
  static constexpr int kSlabLd =
      kStateVFirst ? (kSlabK == 32 ? 32 : 20) : (kPairedLoads ? kV + 16 : kV + 4);
  // state_v_first: column k of slab row v is stored at k ^ slab_col_xor(v) (16-byte chunks stay
  // whole: the xor is a multiple of 8 floats). The K loop's B loads read, for one register, rows
  // v = 16 p + 4q + r (r fixed) at columns c0 + g (c0 a multiple of 8): the four q's must land on
  // four different 8-bank groups. kSlabK = 32, pitch 32: rows add nothing mod 32, xor 8q (q =
  // (v >> 2) & 3) moves q to block (c0 / 8) ^ q. kSlabK = 16, pitch 20: rows 4q add 16q mod 32
  // (0, 16, 0, 16), xor 8 (q >> 1) (= (v >> 3) & 1) moves q = 2, 3 to the other 8-column block.
  static constexpr int slab_col_xor(int v) {
    if (!kStateVFirst) return 0;
    return kSlabK == 32 ? 8 * ((v >> 2) & 3) : 8 * ((v >> 3) & 1);
  }
  static_assert(!kPairedLoads || (kTokLd % 32 == 16 && (kStateVFirst || kSlabLd % 32 == 16)),
                "the k-paired 128-bit loads' conflict-free pitch");

  // Quad columns (k-first slabs at BT = 64, two n8 tiles per warp; ../quad_cols.cuh), as in
  // the 16-bit kernel's traits: slab row k is stored at slab_row_pos(k), so that a lane's four
  // accumulator columns of a row are four consecutive k (one 16-byte access per row for g, q, k,
  // dq, dk, dg).
  static constexpr bool kQuadCols = kBT == 64 && !kStateVFirst;
  __host__ __device__ static constexpr int slab_row_pos(int row) {
    return kQuadCols ? wy::quad_col_row_pos(row) : row;
  }

  // --- slab copies: 16-byte chunks (4 floats), the same chunks for S and dS -----------------
  static constexpr int kChunkElems = 4;
  static constexpr int kChunksPerRow = kSlabCols / kChunkElems;
  static constexpr int kSlabChunks = kSlabRows * kChunksPerRow;  // per matrix
  static constexpr int kSlabIters = (kSlabChunks + kThreads - 1) / kThreads;
  static_assert(kSlabChunks % 32 == 0, "whole warps take part in a slab's Σ S⊙dS reductions");
  static_assert(32 % kChunksPerRow == 0, "a row's chunks are an aligned group of one warp");
  // Σ_v S⊙dS of a slab is summed over kSdsParts partial rows (fixed order): one (a warp reduces
  // a whole k row) or one per warp (state_v_first: each warp holds part of every k column).
  static constexpr int kSdsParts = kStateVFirst ? kWarps : 1;

  // --- shared memory --------------------------------------------------------------------------
  // One ring slot: S then dS of a slab; in slot 1, Vv during phase 0.
  union alignas(128) RingSlot {
    float slab[2][kSlabRows][kSlabLd];  // [S, dS]
    float Vv[kBT][kTokLd];
  };
  struct Shared {
    alignas(128) float A[kBT][kALd];  // Ā[j][i] = A[t0+j, hv, i], columns >= L zero
    union alignas(128) {
      float dO[kBT][kTokLd];  // do tile
      float X[kBT][kXLd];     // X = strict-lower(D) ⊙ β, after the K loop
    };
    union alignas(128) {
      float Vn[kBT][kTokLd];  // v_new tile
      float Y[kBT][kYLd];     // Y = X · Āᵀ, after the K loop
    };
    alignas(128) float dV[kBT][kTokLd];  // dv tile
    RingSlot ring[2];
    alignas(128) float dW[kBT][kDwLd];             // dW of the slab
    alignas(128) float KG[kBT][kKgLd];             // KG of the slab
    alignas(128) float beta[kBT];                  // β, 0 beyond L
    alignas(128) float sds[2][kSdsParts][kSlabK];  // Σ S⊙dS partial rows, per ring slot
    alignas(128) float kdk[kRowBlocks][kSlabK];    // Σ_rows Kk⊙dK0 of a slab per row block
    alignas(128) float db[kColGroups][kBT];        // db partial sums per column group
  };
  static constexpr int kSmemBytes = static_cast<int>(sizeof(Shared));

  // 228 KiB of shared memory per SM, 1 KiB of it reserved per CTA, the kernel's static __shared__
  // variables under kStaticSmemBound (asserted in the kernel); at most 227 KiB for one CTA.
  static constexpr int kStaticSmemBound = 512;
  static constexpr int kSmemPerCta = kSmemBytes + 1024 + kStaticSmemBound;
  static_assert(kSmemBytes + kStaticSmemBound <= 227 * 1024, "one CTA fits an SM");
  // CTAs per SM for the launch bounds: what the shared memory allows, but never so many that
  // the registers per thread would drop below 160 (BT = 16's two-warp CTAs would otherwise cap
  // them at 128 and spill the K loop's split fragments).
  static constexpr int kSmemCtas = 228 * 1024 / kSmemPerCta;
  static constexpr int kRegisterCtas = 65536 / (kThreads * 160);
  static constexpr int kMinCtasPerSm = std::max(1, std::min(kSmemCtas, kRegisterCtas));
};

}  // namespace kda::cuda
