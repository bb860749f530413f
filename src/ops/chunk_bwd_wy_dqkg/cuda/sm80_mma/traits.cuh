#pragma once
// Compile-time tiles and the shared-memory layout of the tensor-core (mma.sync) kernel.
//
// One CTA handles one work unit = (chunk, value head). Its warps form a grid of
//   kRowBlocks = BT / 16 row blocks (the m16 rows of every L x ... product) x kColGroups = 2,
// warp w = (row block w / 2, column group w % 2): 8, 4 or 2 warps for BT = 64, 32, 16. A warp owns
//   - per K slab of 16 rows of h (k0 .. k0+15): the 16 x 8 tiles of dQ, dK0, dW at its rows and
//     columns k0 + 8 cg .. + 7, reduced over all V with mma (A = dO, Vn, dV; B = S, dS);
//   - its rows x V/2 columns of dvb (A = Āᵀ, B = dV);
//   - its rows x BT/2 columns of D, Y = X·Āᵀ and Z = Āᵀ·Y.
// The h slab is the pipeline stage: S and dS [16 k x V] stream through a two-slot ring while the
// token tiles (dO, Vn, dV [BT x V]) and Ā stay resident for the whole unit.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/common/wgmma.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/quad_cols.cuh"

namespace kda::cuda {

template <typename XT_, typename HT_, int kBT_, int kV_, bool kStateVFirst_,
          bool kSplitUnits_ = false>
struct WyDqkgMmaTraits {
  using XT = XT_;  // X: __half or __nv_bfloat16
  using HT = HT_;  // h, dh: float or XT
  static constexpr int kBT = kBT_;
  static constexpr int kV = kV_;
  // h stored [.., V, K] (k contiguous): slabs are copied as V rows x 16 k.
  static constexpr bool kStateVFirst = kStateVFirst_;
  static constexpr bool kStateF32 = std::is_same_v<HT, float>;

  static_assert(std::is_same_v<XT, __half> || std::is_same_v<XT, __nv_bfloat16>,
                "the mma kernel takes 16-bit X");
  static_assert(std::is_same_v<HT, float> || std::is_same_v<HT, XT>, "h is float32 or X");
  static_assert(kBT == 16 || kBT == 32 || kBT == 64, "chunk size must be 16, 32 or 64");
  static_assert(kV == 64 || kV == 128, "V must be 64 or 128");

  static constexpr int kRowBlocks = kBT / 16;
  static constexpr int kColGroups = 2;
  static constexpr int kWarps = kRowBlocks * kColGroups;
  static constexpr int kThreads = 32 * kWarps;

  // Slab pairs: with h stored [K][V] at BT = 64 (the wgmma loop below), a pipeline stage is 32
  // rows of h, so every warp owns two n8 tiles per stage: half the stages, barriers and A-operand
  // reads of the 16-row form, twice the independent epilogue work between two barriers. Float32
  // h reaches its 32-row 16-bit copy in two 16-row halves through one staging slot
  // (kHalfSlabs), so that 2 CTAs still fit an SM.
  static constexpr bool kSlabPair = kBT == 64 && !kStateVFirst;
  static constexpr bool kHalfSlabs = kSlabPair && kStateF32;
  static constexpr int kSlabK = kSlabPair ? 32 : 16;       // K rows of h per pipeline stage
  static constexpr int kCopyK = kHalfSlabs ? 16 : kSlabK;  // K rows of h per copy
  static constexpr int kWarpK = kSlabK / kColGroups;       // a warp's columns of dQ/dK0/dW per slab
  static constexpr int kWarpTiles = kWarpK / 8;            // ... as n8 tiles: 1, or 2 (slab pairs)
  static constexpr int kWarpV = kV / kColGroups;           // dvb columns per warp
  static constexpr int kWarpJ = kBT / kColGroups;          // D, Y, Z columns per warp
  static constexpr int kVSteps = kV / 16;                  // k16 steps of the V reductions
  static constexpr int kJSteps = kBT / 16;                 // k16 steps of the BT reductions
  static constexpr int kJTiles = kWarpJ / 8;               // n8 tiles of a warp's D, Y, Z
  static_assert(kWarpK == 8 || (kSlabPair && kWarpK == 16), "n8 tiles per warp and slab");

  // --- 16-bit tiles: row pitch = columns + 8 elements (16 bytes), so that the 8 row addresses
  // of every ldmatrix phase fall in 8 distinct 16-byte bank groups, and the C-fragment pair
  // stores (row g, word t) hit 32 distinct banks.
  static constexpr int kPad = 8;
  static constexpr int kTokLd = kV + kPad;     // dO, Vn, dV, Vv  [BT][kTokLd]
  static constexpr int kALd = kBT + kPad;      // Ā, X, Y         [BT][kALd]
  static constexpr int kKbLd = kSlabK + kPad;  // dW, KG of a slab [BT][kKbLd]
  // One copy of h or dh as stored (and as staged for float32 h): [kCopyK k][V] or,
  // state_v_first, [V][16 k].
  static constexpr int kSlabRows = kStateVFirst ? kV : kCopyK;
  static constexpr int kSlabCols = kStateVFirst ? kCopyK : kV;
  // Its 16-bit copy, the mma's B operand: k-first [16 k][kSlabXLd] whenever the conversion from
  // float32 can transpose on the way (the smaller tile: 16 x (V + 8) against V x 24 elements,
  // which keeps state_v_first at 2 CTAs per SM); as stored for X h, where cp.async writes it.
  static constexpr bool kSlabXKFirst = kStateF32 || !kStateVFirst;
  static constexpr int kSlabXRows = kSlabXKFirst ? kSlabK : kV;
  static constexpr int kSlabXLd = (kSlabXKFirst ? kV : kSlabK) + kPad;

  // --- the K loop's three products on wgmma (sm_90a) -----------------------------------------
  // With BT = 64 (one warpgroup's 64 rows) and a k-first 16-bit slab copy, dO·Sᵀ, dV·Sᵀ and
  // Vn·dSᵀ run as wgmma.m64n8k16 reading both operands straight from shared memory: warpgroup cg
  // takes the slab's columns 8 cg .. 8 cg + 7 for all 64 rows, and its warp r gets the same
  // accumulator fragment (rows 16 r .., 8 columns) that mma.sync gives warp (row block r, column
  // group cg), so the epilogues are shared. dO, Vn, dV and the slab copies are then stored as
  // wgmma's K-major tiles with the 128-byte swizzle: atoms of [rows][64] 16-bit elements, atom a
  // holding columns 64 a .. 64 a + 63, 16-byte chunk c of row r at chunk c ^ (r % 8).
  static constexpr bool kWgmmaLoop = kBT == 64 && kSlabXKFirst;
  // Split units (for problems with fewer units than the GPU has SMs): a cluster of n CTAs
  // (the launch's cluster size: 2, or 4 with K = 128) shares one unit. CTA r takes the r-th n-th
  // of the slab pairs (the K loop) and of phase 0's V columns; rank 0 sums the cluster's D and db
  // partials (read from the others' shared memory, in rank order) and runs phase 2 alone. Slab
  // pairs only (BT = 64, h stored [K][V]).
  static constexpr bool kSplitUnits = kSplitUnits_;
  static_assert(!kSplitUnits || kSlabPair, "split units take slab pairs (BT = 64, k-first h)");
  // Token tiles (dO, Vn, dV) in swizzled atoms without the padding, read by ldmatrix through
  // the swizzle: the wgmma loop's form, and at BT = 32 with float32 h 1.5 KB less shared memory,
  // so that four CTAs of four warps fit an SM (128-byte alignment suffices for ldmatrix).
  static constexpr bool kSwTokMma = kBT == 32 && kStateF32;
  static constexpr bool kSwTok = kWgmmaLoop || kSwTokMma;
  static constexpr int kAtomCols = 64;  // 16-bit elements in a 128-byte row
  static constexpr int kVAtoms = kV / kAtomCols;
  static constexpr int kTokAtomBytes = kBT * 128;      // one atom of a token tile
  static constexpr int kSlabAtomBytes = kSlabK * 128;  // one atom of a slab copy
  // Element index of (row, col) in a tile of swizzled atoms with kRows rows.
  template <int kRows>
  __host__ __device__ static constexpr int sw128_index(int row, int col) {
    return wgmma::sw128_element_index<kRows>(row, col);
  }
  // Quad columns (slab pairs: two n8 tiles per warp): the slab copy's rows are permuted within
  // each warpgroup's 16 so that a lane's four accumulator columns of a row (2 quad + e of tile 0
  // and of tile 1: positions 2 quad + e and 8 + 2 quad + e) are the four consecutive k columns
  // 4 quad + 2 tile + e. Its g, q, k loads and dq, dk, dg stores are then one 16- (float32) or
  // 8-byte (16-bit) access per row instead of two of half the width, whole 32-byte sectors.
  // Everything positional (dW, KG, Σ Kk⊙dK0, the products) follows the permuted order; the
  // global columns are read at k, Σ S⊙dS at the slab position (epilogues' sds_pos).
  // Both h dtypes: with Σ S⊙dS at slab positions and the epilogue in tile order no kernel
  // spills (with Σ S⊙dS read at k the float32-h kernels spilled, +14%, or had to roll their
  // conversion, +3%); H100: model bf16 -2.6%, h bf16 -4.1% (docs/performance.md, rung v2.kqf).
  static constexpr bool kQuadCols = kSlabPair;
  // The position in the slab copy of its k row `row` (identity without quad columns).
  __host__ __device__ static constexpr int slab_row_pos(int row) {
    return kQuadCols ? wy::quad_col_row_pos(row) : row;
  }
  // Where element (row, col) of a 16-bit slab copy lives: swizzled for the wgmma loop, rows of
  // kSlabXLd elements otherwise (row = k for k-first copies, at slab_row_pos).
  __host__ __device__ static constexpr int slab_x_index(int row, int col) {
    if constexpr (kWgmmaLoop) {
      return sw128_index<kSlabK>(slab_row_pos(row), col);
    } else {
      return row * kSlabXLd + col;
    }
  }
  // Warp w's row block and column group: (w / 2, w % 2) for mma.sync; (w % 4, w / 4) with the
  // wgmma loop, where the column group is the warpgroup.
  __host__ __device__ static constexpr int row_block_of(int warp) {
    return kWgmmaLoop ? warp % kRowBlocks : warp / kColGroups;
  }
  __host__ __device__ static constexpr int col_group_of(int warp) {
    return kWgmmaLoop ? warp / kRowBlocks : warp % kColGroups;
  }

  // --- slab copies: 16-byte chunks of HT, the same chunks for S and dS --------------------
  static constexpr int kChunkElems = 16 / static_cast<int>(sizeof(HT));  // 4 (f32) or 8
  static constexpr int kChunksPerRow = kSlabCols / kChunkElems;
  static constexpr int kSlabChunks = kSlabRows * kChunksPerRow;  // per matrix
  static constexpr int kSlabIters = (kSlabChunks + kThreads - 1) / kThreads;
  static_assert(kSlabChunks % 32 == 0, "whole warps take part in a slab's Σ S⊙dS reductions");
  static_assert(32 % kChunksPerRow == 0 || kChunksPerRow % 32 == 0, "rows align with warps");
  static_assert(kChunksPerRow <= 32, "a row's chunks fit one warp");
  // Σ_v S⊙dS of a slab is summed over kSdsParts partial rows (fixed order): one (a warp reduces
  // a whole k row) or one per warp (state_v_first: each warp holds part of every k column).
  static constexpr int kSdsParts = kStateVFirst ? kWarps : 1;

  // --- shared memory ------------------------------------------------------------------------
  // float32 h: the raw slabs of one staging slot, S then dS, [kSlabRows][kSlabCols] each.
  static constexpr int kStageRawBytes = 2 * kSlabRows * kSlabCols * 4;
  // 16-bit slab copies (S_x and dS_x): one pair for float32 h (converted from the staging ring),
  // two for X h (they are the cp.async ring themselves).
  static constexpr int kSlabXSlots = kStateF32 ? 1 : 2;
  // Float32 h's staging ring: one slot (a slab's copy is issued as soon as the previous one is
  // converted, one in flight per CTA) at BT <= 32, so that five (BT = 16) or four (BT = 32) CTAs
  // fit an SM, and for slab pairs (kHalfSlabs: a pair's two 16-row halves pass through it in
  // turn), so that two fit; two slots (two slabs in flight) only for state_v_first at BT = 64.
  static constexpr int kStageSlots = kBT <= 32 || kHalfSlabs ? 1 : 2;
  // With float32 h, Vv lives in staging slot 1 during phase 0 (before slab 1 is copied), or
  // with one staging slot in the 16-bit slab copy (before slab 0 is converted into it).
  static constexpr bool kVvInStaging = kStateF32 && kStageSlots == 2;
  static constexpr bool kVvInSlabX = kStateF32 && kStageSlots == 1;
  // X h: Vv lives in ring slot 1 during phase 0 (slot 1 takes its first slab after phase 0)
  // where it fits: slab pairs (swizzled like dV) and BT <= 32, so that more CTAs fit an SM.
  static constexpr bool kVvInRing = !kStateF32 && (kSlabPair || kBT <= 32);
  // Vv's region takes slab 1 after phase 0 (float32 staging, or ring slot 1).
  static constexpr bool kVvLate = kStateF32 || kVvInRing;
  // Float32 h stored [K][V] at BT <= 32 (one staging slot): each slab arrives by two bulk tensor
  // copies (S, dS) that one thread issues, completing on an mbarrier, when params' maps exist.
  static constexpr bool kTmaSlab = kStateF32 && kBT <= 32 && !kStateVFirst;
  static_assert(!kTmaSlab || kStageSlots == 1, "bulk slab copies refill the one staging slot");
  static constexpr bool kVvSwizzled = kSlabPair;

  // The shared-memory layout as one struct, every region 128-byte aligned. Regions reused over a
  // unit's life are unions: X and Y take the dead dO and Vn tiles after the K loop; with float32
  // h, the staging ring holds the raw slabs (S then dS), and its slot 1 holds Vv during phase 0
  // (before slab 1 is copied); with h in X, Vv has its own tile and the 16-bit slab pair is a
  // two-slot cp.async ring.
  struct alignas(128) SlabX {
    XT m[kSlabXRows][kSlabXLd];  // the mma's B operand: [16 k][V + 8] or [V][16 k + 8]
  };
  static constexpr int kSlabXBytes = static_cast<int>(sizeof(SlabX));
  union alignas(128) StageSlotVv {
    float raw[2][kSlabRows][kSlabCols];  // S then dS as stored, unpadded (float32 h)
    XT tok[kBT][kTokLd];                 // Vv, in slot 1 during phase 0
  };
  struct alignas(128) StageSlotRaw {
    float raw[2][kSlabRows][kSlabCols];
  };
  using StageSlot = std::conditional_t<kVvInStaging, StageSlotVv, StageSlotRaw>;
  // What differs with the h dtype: float32 h stages raw slabs and converts them into one 16-bit
  // slab pair; X h copies straight into a two-slot ring of 16-bit slab pairs.
  struct StateF32Regions {
    StageSlot stage[kStageSlots];
    SlabX slab_x[1][2];  // [slot][S, dS]
  };
  static_assert(!kVvInSlabX || sizeof(SlabX) * 2 >= sizeof(XT) * kBT * kTokLd,
                "with one staging slot, Vv fits the 16-bit slab copy");
  struct StateXRegions {
    alignas(128) XT Vv[kBT][kTokLd];
    SlabX slab_x[2][2];  // [slot][S, dS]
  };
  struct StateXRingVvRegions {  // Vv in ring slot 1 during phase 0
    SlabX slab_x[2][2];         // [slot][S, dS]
  };
  static_assert(!kVvInRing || kSlabPair || 2 * sizeof(SlabX) >= sizeof(XT) * kBT * kTokLd,
                "Vv fits ring slot 1");
  struct alignas(128) TokSwMma {
    XT m[kVAtoms][kBT][kAtomCols];
  };
  using TokTile = std::conditional_t<kSwTokMma, TokSwMma, XT[kBT][kTokLd]>;
  struct Shared {
    alignas(128) XT A[kBT][kALd];  // Ā[j][i] = A[t0+j, hv, i]
    union alignas(128) {
      TokTile dO;       // do tile
      XT X[kBT][kALd];  // X = strict-lower(D) ⊙ β, after the K loop
    };
    union alignas(128) {
      TokTile Vn;       // v_new tile
      XT Y[kBT][kALd];  // Y = X · Āᵀ, after the K loop
    };
    alignas(128) TokTile dV;  // dv tile
    std::conditional_t<kStateF32, StateF32Regions,
                       std::conditional_t<kVvInRing, StateXRingVvRegions, StateXRegions>>
        state;
    alignas(128) XT dW[kBT][kKbLd];                // dW of the slab
    alignas(128) XT KG[kBT][kKbLd];                // KG of the slab
    alignas(128) float beta[kBT];                  // β, 0 beyond L
    alignas(128) float sds[2][kSdsParts][kSlabK];  // Σ S⊙dS partial rows, per ring slot
    alignas(128) float kdk[kRowBlocks][kSlabK];    // Σ_rows Kk⊙dK0 of a slab per row block
    alignas(128) float db[kColGroups][kBT];        // db partial sums per column group
  };

  // The wgmma loop's layout: the swizzled tiles first (each 1024-byte aligned, the swizzle
  // pattern's period, so the descriptors' base offset is 0), then the rest as above. Vv stays in
  // rows of kTokLd (read by ldmatrix only).
  struct alignas(1024) TokSw {
    XT m[kVAtoms][kBT][kAtomCols];
  };
  struct alignas(1024) SlabXSw {
    XT m[kVAtoms][kSlabK][kAtomCols];
  };
  struct StateF32RegionsW {
    SlabXSw slab_x[1][2];  // [slot][S, dS]
    StageSlot stage[kStageSlots];
  };
  static_assert(!kWgmmaLoop || kStageSlots == 2 || kHalfSlabs,
                "the wgmma loop keeps two staging slots, or one for the halves of slab pairs");
  struct StateXRegionsW {
    SlabXSw slab_x[2][2];  // [slot][S, dS]
    alignas(128) XT Vv[kBT][kTokLd];
  };
  // Slab pairs: Vv, swizzled like dV, lives in ring slot 1 during phase 0 (slot 1 takes its first
  // pair after phase 0), so the layout fits 2 CTAs per SM.
  struct StateXPairRegionsW {
    SlabXSw slab_x[2][2];  // [slot][S, dS]
  };
  static_assert(!kSlabPair || 2 * sizeof(SlabXSw) >= sizeof(XT) * kBT * kV,
                "with slab pairs, Vv (swizzled) fits ring slot 1");
  static_assert(!kWgmmaLoop || (kWarpK * 128) % 1024 == 0,
                "a warpgroup's B rows start on a 1024-byte swizzle period (descriptor base 0)");
  struct SharedW {
    union alignas(1024) {
      TokSw dO;
      XT X[kBT][kALd];
    };
    union alignas(1024) {
      TokSw Vn;
      XT Y[kBT][kALd];
    };
    TokSw dV;
    std::conditional_t<kStateF32, StateF32RegionsW,
                       std::conditional_t<kSlabPair, StateXPairRegionsW, StateXRegionsW>>
        state;
    alignas(128) XT A[kBT][kALd];
    alignas(128) XT dW[kBT][kKbLd];
    alignas(128) XT KG[kBT][kKbLd];
    alignas(128) float beta[kBT];
    alignas(128) float sds[2][kSdsParts][kSlabK];
    alignas(128) float kdk[kRowBlocks][kSlabK];
    alignas(128) float db[kColGroups][kBT];
  };
  using SharedLayout = std::conditional_t<kWgmmaLoop, SharedW, Shared>;
  // Dynamic shared memory is only 16-byte aligned: the wgmma layout asks for 1 KB more and starts
  // at the first 1024-byte boundary.
  static constexpr int kSmemAlignSlack = kWgmmaLoop ? 1024 : 0;

  static constexpr int kSmemBytes = static_cast<int>(sizeof(SharedLayout)) + kSmemAlignSlack;
  // 228 KB of shared memory per SM, 1 KB of it reserved per CTA, and the kernel's static
  // __shared__ variables (under 512 bytes, asserted in the kernel).
  static constexpr int kStaticSmemBound = 512;
  static constexpr int kCtasBySmem = 228 * 1024 / (kSmemBytes + 1024 + kStaticSmemBound);
  // CTAs per SM the launch bounds ask for: as many as the shared memory allows, up to 2, 4, 6
  // for BT = 64, 32, 16 (registers: 128, 128, 170 per thread). The small chunks have few warps
  // per CTA (4 and 2), so their CTA count is their latency hiding: BT = 16's float32 staging is
  // one slot and X h's Vv lives in ring slot 1 (kVvInRing) for that.
  static constexpr int kMaxCtasPerSm = kBT == 64 ? 2 : kBT == 32 ? 4 : 6;
  static constexpr int kMinCtasPerSm = kCtasBySmem < kMaxCtasPerSm ? kCtasBySmem : kMaxCtasPerSm;
  static_assert(kMinCtasPerSm >= (kBT == 64 ? 2 : 3),
                "shared memory must allow 2 (BT = 64) or 3 CTAs per SM");
  static_assert(kTokLd % 8 == 0 && kALd % 8 == 0 && kKbLd % 8 == 0 && kSlabXLd % 8 == 0,
                "16-bit rows must start 16-byte aligned for cp.async and ldmatrix");
  static_assert((kBT * kV / 8) % kThreads == 0, "token tiles split evenly over the threads");
};

}  // namespace kda::cuda
