#pragma once
// The tensor-core kernel of chunk_kda_bwd_wy_dqkg_fused for 16-bit X (SPEC.md steps 1..12 per
// chunk). Every product runs on mma.sync m16n8k16 (16-bit inputs, float32 accumulation), but at
// BT = 64 the K loop's three (traits' kWgmmaLoop: wgmma.m64n8k16, or m64n16k16 with slab pairs,
// from swizzled shared memory);
// the elementwise math (exp2 of gates, β scaling, the dk/dg/db combinations, Σ S⊙dS) stays in
// float32 registers. Rounded to X before a product, as fla does: h and dh, dW, KG, X and Y.
// Tile ownership and the shared-memory map are in traits.cuh; README.md in this folder
// walks through one unit. Shapes: L = valid rows of the chunk (<= BT); rows >= L of every staged
// tile are zero and are never read from global memory nor written back.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/copy_tile.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/epilogues.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm80_mma/traits.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/unit.cuh"

namespace kda::cuda {

// Queues the copies of slab k0 .. k0 + kSlabK - 1 of h and dh: as stored ([kSlabK k][V], or
// [V][16 k] for state_v_first), into dst_S / dst_dS: float32 staging rows of kDstLd elements, or
// (kDstLd == kSlabXLd, X h) the 16-bit slab copy at Tr::slab_x_index. The same thread copies the
// same chunk positions of S and dS, so slab_prepare can read both back without a barrier.
template <typename Tr, int kDstLd>
__device__ __forceinline__ void issue_slab(const WyDqkgParams& p, const UnitOrigins& o,
                                           const LoopStrides& st, int k0, typename Tr::HT* dst_S,
                                           typename Tr::HT* dst_dS, int tid) {
  using HT = typename Tr::HT;
  constexpr int kE = Tr::kChunkElems;
#pragma unroll
  for (int n = 0; n < Tr::kSlabIters; ++n) {
    const int c = tid + n * Tr::kThreads;
    if (Tr::kSlabChunks % Tr::kThreads != 0 && c >= Tr::kSlabChunks) break;
    const int row = c / Tr::kChunksPerRow;
    const int ch = c % Tr::kChunksPerRow;
    const int k = k0 + (Tr::kStateVFirst ? ch * kE : row);
    const int v = Tr::kStateVFirst ? row : ch * kE;
    const int dst =
        kDstLd == Tr::kSlabXLd ? Tr::slab_x_index(row, ch * kE) : row * kDstLd + ch * kE;
    mma::cp_async_16(dst_S + dst, static_cast<const HT*>(p.h.data) + o.h + k * st.h_k + v * st.h_v,
                     16);
    mma::cp_async_16(dst_dS + dst,
                     static_cast<const HT*>(p.dh.data) + o.dh + k * st.dh_k + v * st.dh_v, 16);
  }
}

// After this thread's copies of a slab landed: for float32 h, converts the thread's chunks of the
// staging slot (stage_S, stage_dS) to X in slab_S, slab_dS; for X h, reads them from slab_S,
// slab_dS. Either way sums S⊙dS in float32 over v for each k of the slab:
//   k-first slabs: a warp's lanes that share a k row reduce by butterfly; sds_out[k] = the sum;
//   state_v_first: per-warp partials, sds_out[warp * 16 + k] (summed over warps by the reader).
template <typename Tr>
__device__ __forceinline__ void slab_prepare(const float* stage_S, const float* stage_dS,
                                             typename Tr::XT* slab_S, typename Tr::XT* slab_dS,
                                             float* sds_out, int k_row0, int tid) {
  using XT = typename Tr::XT;
  constexpr int kE = Tr::kChunkElems;
  const int warp = tid / 32;
  const int lane = tid % 32;
  float col_sum[kE];  // state_v_first: Σ over this thread's rows v for its chunk's k columns
#pragma unroll
  for (int e = 0; e < kE; ++e) col_sum[e] = 0.0f;
  // Slab pairs convert inside the K loop's epilogue state. Unrolled (both chunks' loads in
  // flight together) since the 32-bit offsets freed registers: 127 at the model shape, no
  // spills; the split-unit kernel stays rolled (unrolled, its spills grew from 32 to 48 bytes).
  constexpr bool kRolled = Tr::kHalfSlabs && Tr::kSplitUnits;
  constexpr int kUnroll = kRolled ? 1 : Tr::kSlabIters;
  // (The transposed sums need the unrolled loop: part[] is indexed by n. Not for X h at BT = 16,
  // where it measured 4% slower on the H200: 187.1 -> 194.5 µs at T=2048 H=32 fp16.)
  constexpr bool kTransposed =
      !kRolled && wy::kTransposedSds<Tr> && (Tr::kStateF32 || Tr::kBT > 16);
  float part[Tr::kSlabIters];  // kTransposed: this lane's Σ S⊙dS of each of its chunks
#pragma unroll kUnroll
  for (int n = 0; n < Tr::kSlabIters; ++n) {
    const int c = tid + n * Tr::kThreads;
    // Warp-uniform (kSlabChunks is a multiple of 32), so the shuffles below see whole warps.
    if (Tr::kSlabChunks % Tr::kThreads != 0 && c >= Tr::kSlabChunks) break;
    const int row = c / Tr::kChunksPerRow;
    const int ch = c % Tr::kChunksPerRow;
    float s[kE];
    float ds[kE];
    if constexpr (Tr::kStateF32) {
      const int src = row * Tr::kSlabCols + ch * 4;
      const float4 sv = *reinterpret_cast<const float4*>(stage_S + src);
      const float4 dsv = *reinterpret_cast<const float4*>(stage_dS + src);
      s[0] = sv.x, s[1] = sv.y, s[2] = sv.z, s[3] = sv.w;
      ds[0] = dsv.x, ds[1] = dsv.y, ds[2] = dsv.z, ds[3] = dsv.w;
      if constexpr (!Tr::kStateVFirst) {
        const int dst = Tr::slab_x_index(k_row0 + row, ch * 4);  // [k][v], as stored
        *reinterpret_cast<uint2*>(slab_S + dst) =
            make_uint2(mma::pack2<XT>(s[0], s[1]), mma::pack2<XT>(s[2], s[3]));
        *reinterpret_cast<uint2*>(slab_dS + dst) =
            make_uint2(mma::pack2<XT>(ds[0], ds[1]), mma::pack2<XT>(ds[2], ds[3]));
      } else {
        // Stored [v][k]: the 16-bit copy is transposed to [k][v] (element by element).
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int dst = Tr::slab_x_index(k_row0 + ch * 4 + e, row);
          slab_S[dst] = from_float<XT>(s[e]);
          slab_dS[dst] = from_float<XT>(ds[e]);
        }
      }
    } else {
      const int src = Tr::slab_x_index(row, ch * 8);
      const uint4 sv = *reinterpret_cast<const uint4*>(slab_S + src);
      const uint4 dsv = *reinterpret_cast<const uint4*>(slab_dS + src);
      const uint32_t sw[4] = {sv.x, sv.y, sv.z, sv.w};
      const uint32_t dsw[4] = {dsv.x, dsv.y, dsv.z, dsv.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 a = mma::unpack2<XT>(sw[w]);
        const float2 b = mma::unpack2<XT>(dsw[w]);
        s[2 * w] = a.x, s[2 * w + 1] = a.y;
        ds[2 * w] = b.x, ds[2 * w + 1] = b.y;
      }
    }
    wy::sds_chunk<Tr, kTransposed>(s, ds, row, ch, k_row0, col_sum, sds_out, part[n]);
  }
  if constexpr (kTransposed) {
    wy::sds_reduce_rows<Tr>(part, k_row0, sds_out, tid);
  }
  wy::sds_finish<Tr>(col_sum, k_row0, sds_out, warp, lane);
}

// Asks L2 for the line holding p (nothing reaches the SM's registers or L1).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSm)
    wy_dqkg_mma_kernel(const __grid_constant__ WyDqkgParams p) {
  using XT = typename Tr::XT;
  using HT = typename Tr::HT;
  using mma::ALayout;
  using mma::BLayout;
  constexpr int kBT = Tr::kBT;
  constexpr int kV = Tr::kV;
  constexpr int kTokLd = Tr::kTokLd;
  constexpr int kALd = Tr::kALd;
  constexpr int kKbLd = Tr::kKbLd;
  constexpr int kSlabXLd = Tr::kSlabXLd;
  constexpr int kJSteps = Tr::kJSteps;
  constexpr int kJTiles = Tr::kJTiles;
  constexpr unsigned kFullMask = 0xffffffffu;
  // S as the B operand of dO·Sᵀ: element (v, k) of the 16-bit slab at [k][v] or [v][k].
  constexpr BLayout kSlabLayout = Tr::kSlabXKFirst ? BLayout::kNK : BLayout::kKN;
  static_assert(
      sizeof(WorkUnit) + sizeof(UnitOrigins) + sizeof(LoopStrides) + sizeof(uint64_t) + 64 <=
          Tr::kStaticSmemBound,
      "static shared memory within the bound the traits' CTA count assumes");

  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ WorkUnit unit_shared;
  __shared__ UnitOrigins origins_shared;
  __shared__ LoopStrides strides_shared;
  __shared__ uint64_t slab_bar;  // kTmaSlab: the staging slot's bulk copies complete here

  unsigned char* smem_base = smem;
  if constexpr (Tr::kWgmmaLoop) {
    smem_base = tma::align_to_swizzle_period(smem);
  }
  auto& sh = *reinterpret_cast<typename Tr::SharedLayout*>(smem_base);
  // The token tiles dO, Vn, dV: [BT][kTokLd], or with the wgmma loop swizzled atoms
  // [V / 64][BT][64] (Tr::sw128_index).
  XT* const sA = &sh.A[0][0];                     // Ā [BT][kALd], Ā[j][i]
  XT* const sDo = reinterpret_cast<XT*>(&sh.dO);  // dO
  XT* const sVn = reinterpret_cast<XT*>(&sh.Vn);  // Vn
  XT* const sDv = reinterpret_cast<XT*>(&sh.dV);  // dV
  XT* sVv = nullptr;  // Vv [BT][kTokLd], or swizzled like dV (kVvSwizzled); phase 0 only
  if constexpr (Tr::kVvInStaging) {
    sVv = &sh.state.stage[1].tok[0][0];
  } else if constexpr (Tr::kVvInSlabX) {
    sVv = reinterpret_cast<XT*>(&sh.state.slab_x[0][0]);  // rows of kTokLd, before slab 0
  } else if constexpr (Tr::kVvInRing) {
    sVv = reinterpret_cast<XT*>(&sh.state.slab_x[1][0]);  // ring slot 1, before its first stage
  } else {
    sVv = &sh.state.Vv[0][0];
  }
  XT* const sDw = &sh.dW[0][0];          // dW of the slab [BT][kKbLd]
  XT* const sKg = &sh.KG[0][0];          // KG of the slab [BT][kKbLd]
  XT* const sX = &sh.X[0][0];            // X [BT][kALd] (after the K loop)
  XT* const sY = &sh.Y[0][0];            // Y [BT][kALd] (after the K loop)
  float* const sBeta = &sh.beta[0];      // β [BT], 0 beyond L
  float* const sSds = &sh.sds[0][0][0];  // [2][kSdsParts][kSlabK]
  float* const sKdk = &sh.kdk[0][0];     // [kRowBlocks][kSlabK]
  float* const sDb = &sh.db[0][0];       // [2][BT]
  // Staging slot `slot` of float32 h: S then dS, [kSlabRows][kSlabCols] each.
  auto stage_S = [&](int slot) -> float* {
    if constexpr (Tr::kStateF32) {
      return &sh.state.stage[slot].raw[0][0][0];
    } else {
      return nullptr;  // X h is copied straight into the 16-bit ring
    }
  };
  auto stage_dS = [&](int slot) { return stage_S(slot) + Tr::kSlabRows * Tr::kSlabCols; };
  // 16-bit slab copies: slot 0 only for float32 h, slots 0 and 1 (the ring) for X h.
  // (elements at Tr::slab_x_index)
  auto slab_S = [&](int slot) { return reinterpret_cast<XT*>(&sh.state.slab_x[slot][0]); };
  auto slab_dS = [&](int slot) { return reinterpret_cast<XT*>(&sh.state.slab_x[slot][1]); };

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int cg = Tr::col_group_of(warp);  // column group (the warpgroup, with the wgmma loop)
  const int rb = Tr::row_block_of(warp);
  const int m0 = rb * 16;     // first row of the warp's row block
  const int grp = lane / 4;   // fragment row within 8
  const int quad = lane % 4;  // fragment column pair
  const wy::WarpPos pos{cg, rb, m0, grp, quad};
  if (tid == 0) {
    set_loop_strides(p, strides_shared);  // the unit pointers follow in publish_unit
  }
  const LoopStrides& st = strides_shared;  // read after the first barrier

  // One unit per CTA (a 2D grid when there are more than 2^31 - 1 units), or with split units
  // one per cluster of `ranks` CTAs (a 1D grid). No loop over units on purpose: around one the
  // compiler hoists every lane's ldmatrix addresses out of it, and the BT = 64 kernel spilled.
  int rank = 0;   // this CTA's rank in its cluster (split units)
  int ranks = 1;  // CTAs per unit
  if constexpr (Tr::kSplitUnits) {
    rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
    ranks = static_cast<int>(cooperative_groups::this_cluster().num_blocks());
  }
  const int64_t unit = Tr::kSplitUnits ? static_cast<int64_t>(blockIdx.x / ranks)
                                       : blockIdx.x + static_cast<int64_t>(blockIdx.y) * gridDim.x;
  // Uniform over the CTA, and over a cluster (whose CTAs share the unit, so that none waits at a
  // cluster barrier for one that left).
  if (unit >= p.num_units) return;
  publish_unit<XT>(p, unit, kBT, warp, lane, unit_shared, origins_shared, &strides_shared);
  const bool tma_slab = Tr::kTmaSlab && p.h_maps_ok;  // uniform
  if constexpr (Tr::kTmaSlab) {
    if (tma_slab && tid == 0) {
      tma::barrier_init(&slab_bar);
      tma::barrier_init_fence();
    }
  }
  __syncthreads();
  if (!unit_shared.valid) return;  // inconsistent index tensors: see wy_dqkg_unit.cuh
  const UnitOrigins& o = origins_shared;
  const int L = unit_shared.len;
  const int num_slabs = static_cast<int>(p.K / Tr::kSlabK);
  // This CTA's slabs: all of them, or its rank's share (the launcher makes `ranks` divide them).
  const int slab_begin = Tr::kSplitUnits ? rank * num_slabs / ranks : 0;
  const int slab_end = Tr::kSplitUnits ? (rank + 1) * num_slabs / ranks : num_slabs;
  // Whether h row k, at or past this CTA's first slab, still belongs to its slabs (so that its
  // copy may be issued).
  auto own_k = [&](int k) {
    if constexpr (Tr::kSplitUnits) {
      return k < slab_end * Tr::kSlabK;
    } else {
      return k < p.K;
    }
  };
  auto out_row = [&](int i) { return o.out_row0 + static_cast<int64_t>(i) * p.HV; };

  // --- copies: group 1 = Ā, dV, Vv (phase 0); group 2 = dO, Vn, slab 0; [group 3 = slab 1] --
  // Ā columns >= L are zero-filled too: they are not part of the chunk, and a NaN there would
  // reach valid rows through X·Āᵀ (0 · NaN).
  copy_tile_async<kBT, kBT, Tr::kThreads>(sA, kALd, static_cast<const XT*>(p.A.data) + o.A,
                                          p.A.stride_token, L, L, tid);
  constexpr bool kSw = Tr::kSwTok;
  copy_tile_async<kBT, kV, Tr::kThreads, kSw>(sDv, kTokLd, static_cast<const XT*>(p.dv.data) + o.dv,
                                              p.dv.stride_token, L, kV, tid);
  copy_tile_async<kBT, kV, Tr::kThreads, Tr::kVvSwizzled>(
      sVv, kTokLd, static_cast<const XT*>(p.v.data) + o.v, p.v.stride_token, L, kV, tid);
  mma::cp_async_commit();
  copy_tile_async<kBT, kV, Tr::kThreads, kSw>(
      sDo, kTokLd, static_cast<const XT*>(p.do_.data) + o.do_, p.do_.stride_token, L, kV, tid);
  copy_tile_async<kBT, kV, Tr::kThreads, kSw>(sVn, kTokLd,
                                              static_cast<const XT*>(p.v_new.data) + o.v_new,
                                              p.v_new.stride_token, L, kV, tid);
  // Slab kb of float32 h into the staging slot by bulk tensor copies (one thread).
  auto issue_slab_tma = [&](int kb) {
    if constexpr (Tr::kTmaSlab) {
      const int chunk = static_cast<int>(unit_shared.h_batch * p.h_nt + unit_shared.h_chunk);
      const int hv = static_cast<int>(unit_shared.hv);
      tma::barrier_arrive_expect(&slab_bar, Tr::kStageRawBytes);
      tma::copy_tile_4d(stage_S(0), p.h_map, &slab_bar, 0, kb * Tr::kSlabK, hv, chunk);
      tma::copy_tile_4d(stage_dS(0), p.dh_map, &slab_bar, 0, kb * Tr::kSlabK, hv, chunk);
    }
  };
  if constexpr (Tr::kTmaSlab) {
    if (tma_slab) {
      if (tid == 0) issue_slab_tma(slab_begin);
    } else {
      issue_slab<Tr, Tr::kSlabCols>(p, o, st, slab_begin * Tr::kSlabK, stage_S(0), stage_dS(0),
                                    tid);
    }
  } else if constexpr (Tr::kStateF32) {
    issue_slab<Tr, Tr::kSlabCols>(p, o, st, slab_begin * Tr::kSlabK, stage_S(0), stage_dS(0), tid);
  } else {
    issue_slab<Tr, kSlabXLd>(p, o, st, slab_begin * Tr::kSlabK, slab_S(0), slab_dS(0), tid);
  }
  mma::cp_async_commit();
  if constexpr (!Tr::kVvLate) {
    if (slab_begin + 1 < slab_end) {
      issue_slab<Tr, kSlabXLd>(p, o, st, (slab_begin + 1) * Tr::kSlabK, slab_S(1), slab_dS(1), tid);
    }
    mma::cp_async_commit();
  }
  if (tid < kBT) {
    float b = 0.0f;
    if (tid < L) {
      const int64_t off = o.beta + tid * p.beta.stride_token;
      b = p.beta.is_f32 ? load_float<float>(p.beta.data, off) : load_float<XT>(p.beta.data, off);
    }
    sBeta[tid] = b;
  }
  if constexpr (Tr::kHalfSlabs) {
    // The first pair's second half is issued only after phase 0 (the 16-bit copy holds Vv until
    // then) and its copy waits alone (ncu: 4.7% of the stall samples): ask
    // L2 for its lines now, one 128-byte line per thread, so that its copy finds L2, not DRAM.
    constexpr int kLinesPerRow = Tr::kSlabCols * static_cast<int>(sizeof(float)) / 128;
    constexpr int kLines = Tr::kCopyK * kLinesPerRow;  // of S, and as many of dS
    static_assert(2 * kLines <= Tr::kThreads, "one line per thread");
    const int k = slab_begin * Tr::kSlabK + Tr::kCopyK + (tid % kLines) / kLinesPerRow;
    const int v = (tid % kLinesPerRow) * (128 / static_cast<int>(sizeof(float)));
    if (tid < 2 * kLines && own_k(k)) {
      const bool is_s = tid < kLines;
      const float* const base = static_cast<const float*>(is_s ? p.h.data : p.dh.data);
      prefetch_l2(base + (is_s ? o.h + k * st.h_k + v * st.h_v : o.dh + k * st.dh_k + v * st.dh_v));
    }
  }
  mma::cp_async_wait<Tr::kVvLate ? 1 : 2>();  // group 1 landed (this thread's copies)
  __syncthreads();                            // ... and everyone's

  // The A fragment (rows m0 .. m0 + 15, columns 16 s ..) of a token tile (dO, Vn, dV): rows of
  // kTokLd, or swizzled atoms (Tr::kSwTok).
  auto load_tok_a = [&](uint32_t(&a)[4], const XT* tile, int s) {
    if constexpr (Tr::kSwTok) {
      const int q = lane / 8;
      mma::ldmatrix_x4(a, tile + Tr::template sw128_index<kBT>(m0 + lane % 8 + (q % 2) * 8,
                                                               16 * s + (q / 2) * 8));
    } else {
      mma::load_a<ALayout::kMK>(a, tile + m0 * kTokLd + 16 * s, kTokLd, lane);
    }
  };

  // --- phase 0: steps 4, 6 (first term), 11 (first term) -------------------------------
  float db_part[2] = {0.0f, 0.0f};  // rows m0 + grp and m0 + grp + 8: this lane's share of db
  // dvb = Āᵀ·dV; dv_out = β ⊙ dvb; db += rowsum(dvb ⊙ Vv): the warp's V/2 columns, 16 at a time
  // (split units: the rank's share of those 16-column steps).
  int v_first = cg * Tr::kWarpV;
  int v_end = (cg + 1) * Tr::kWarpV;
  if constexpr (Tr::kSplitUnits) {
    constexpr int kSteps = Tr::kWarpV / 16;
    v_first = cg * Tr::kWarpV + 16 * (rank * kSteps / ranks);
    v_end = cg * Tr::kWarpV + 16 * ((rank + 1) * kSteps / ranks);
  }
#pragma unroll 1
  for (int v0 = v_first; v0 < v_end; v0 += 16) {
    float acc[2][4] = {};  // (16 rows, 16 columns v0 ..)
    if constexpr (Tr::kSwTok) {
      // The same product with dV read from its swizzled atoms (B element (j, v) at dV[j][v]).
#pragma unroll
      for (int s = 0; s < kJSteps; ++s) {
        uint32_t a[4];
        mma::load_a<ALayout::kKM>(a, sA + m0 + 16 * s * kALd, kALd, lane);
        uint32_t x[4];
        const int q = lane / 8;
        mma::ldmatrix_x4_trans(x, sDv + Tr::template sw128_index<kBT>(
                                            16 * s + lane % 8 + (q % 2) * 8, v0 + (q / 2) * 8));
        const uint32_t b0[2] = {x[0], x[1]};
        const uint32_t b1[2] = {x[2], x[3]};
        mma::mma_16816<XT>(acc[0], a, b0);
        mma::mma_16816<XT>(acc[1], a, b1);
      }
    } else {
      mma::warp_mma<XT, ALayout::kKM, BLayout::kKN, kJSteps, 2>(acc, sA + m0, kALd, sDv + v0,
                                                                kTokLd, lane);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = m0 + grp + 8 * h;
      if (i >= L) continue;
      const float beta_i = sBeta[i];
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int v = v0 + 8 * nt + 2 * quad;
        const float d0 = acc[nt][2 * h];
        const float d1 = acc[nt][2 * h + 1];
        *reinterpret_cast<uint32_t*>(static_cast<XT*>(p.dv_out) + o.out_row0 * kV + i * st.dv_row +
                                     v) = mma::pack2<XT>(beta_i * d0, beta_i * d1);
        const int vv_at = Tr::kVvSwizzled ? Tr::template sw128_index<kBT>(i, v) : i * kTokLd + v;
        const float2 vv = mma::unpack2<XT>(*reinterpret_cast<const uint32_t*>(sVv + vv_at));
        db_part[h] = fmaf(d0, vv.x, db_part[h]);
        db_part[h] = fmaf(d1, vv.y, db_part[h]);
      }
    }
  }
  // D = dV·Vvᵀ: the warp's rows x columns j = cg * BT/2 .. (BT/2 of them), reduced over V.
  float acc_D[kJTiles][4] = {};
  if constexpr (Tr::kSwTok) {
    // The same product with dV read from its swizzled atoms (A element (i, v) at dV[i][v]).
#pragma unroll
    for (int s = 0; s < Tr::kVSteps; ++s) {
      if constexpr (Tr::kSplitUnits) {
        // The rank's share of the reduction over V (the partial D is summed over the cluster).
        if (s < rank * Tr::kVSteps / ranks || s >= (rank + 1) * Tr::kVSteps / ranks) continue;
      }
      uint32_t a[4];
      load_tok_a(a, sDv, s);
      uint32_t b[kJTiles][2];
      if constexpr (Tr::kVvSwizzled) {
        // B element (v, j) at Vv[j][v], swizzled: load_b's kNK addresses through sw128_index.
        static_assert(kJTiles % 2 == 0, "pairs of n8 tiles per x4 load");
        const int q = lane / 8;
#pragma unroll
        for (int nt = 0; nt < kJTiles; nt += 2) {
          uint32_t x[4];
          mma::ldmatrix_x4(x, sVv + Tr::template sw128_index<kBT>(
                                        cg * Tr::kWarpJ + nt * 8 + lane % 8 + (q / 2) * 8,
                                        16 * s + (q % 2) * 8));
          b[nt][0] = x[0];
          b[nt][1] = x[1];
          b[nt + 1][0] = x[2];
          b[nt + 1][1] = x[3];
        }
      } else {
        mma::load_b<BLayout::kNK, kJTiles>(b, sVv + cg * Tr::kWarpJ * kTokLd + 16 * s, kTokLd,
                                           lane);
      }
#pragma unroll
      for (int nt = 0; nt < kJTiles; ++nt) mma::mma_16816<XT>(acc_D[nt], a, b[nt]);
    }
  } else {
    mma::warp_mma<XT, ALayout::kMK, BLayout::kNK, Tr::kVSteps, kJTiles>(
        acc_D, sDv + m0 * kTokLd, kTokLd, sVv + cg * Tr::kWarpJ * kTokLd, kTokLd, lane);
  }
  // Float32 h in slab pairs (kHalfSlabs): half `half` of pair `pair` (k rows 16 half .. of the
  // 16-bit copy) converted from the one staging slot once its copy landed; the slot then takes
  // the next half's copy at once (the next pair's first half after a second half).
  auto convert_half = [&](int pair, int half) {
    if constexpr (Tr::kHalfSlabs) {
      mma::cp_async_wait<0>();
      float* const pair_sds = sSds + ((pair - slab_begin) & 1) * Tr::kSdsParts * Tr::kSlabK;
      slab_prepare<Tr>(stage_S(0), stage_dS(0), slab_S(0), slab_dS(0), pair_sds, Tr::kCopyK * half,
                       tid);
      const int next_k = pair * Tr::kSlabK + Tr::kCopyK * (half + 1);
      if (own_k(next_k)) {
        issue_slab<Tr, Tr::kSlabCols>(p, o, st, next_k, stage_S(0), stage_dS(0), tid);
      }
      mma::cp_async_commit();
    }
  };
  __syncthreads();  // Vv is dead: with two float32 staging slots its slot takes slab 1
  if constexpr (Tr::kVvInStaging) {
    if (slab_begin + 1 < slab_end) {
      issue_slab<Tr, Tr::kSlabCols>(p, o, st, (slab_begin + 1) * Tr::kSlabK, stage_S(1),
                                    stage_dS(1), tid);
    }
    mma::cp_async_commit();
  } else if constexpr (Tr::kHalfSlabs) {
    // The 16-bit copy held Vv: the first pair goes into it now, both halves (the second half's
    // copy waits alone this once).
    convert_half(slab_begin, 0);
    convert_half(slab_begin, 1);
  } else if constexpr (Tr::kVvInRing) {
    // Ring slot 1 held Vv; the reads above were ordinary loads, so the cp.async writes that
    // follow need no proxy fence.
    if (slab_begin + 1 < slab_end) {
      issue_slab<Tr, kSlabXLd>(p, o, st, (slab_begin + 1) * Tr::kSlabK, slab_S(1), slab_dS(1), tid);
    }
    mma::cp_async_commit();
  }

  // --- the K loop: slab kb = rows k0 .. k0+kSlabK-1 of h, dh; steps 1-3, 5, 7-9, 11 (2nd term)
#pragma unroll 1
  for (int kb = slab_begin; kb < slab_end; ++kb) {
    const int ring = (kb - slab_begin) & 1;
    const int k0 = kb * Tr::kSlabK;
    float* const sds = sSds + ring * Tr::kSdsParts * Tr::kSlabK;  // this slab's Σ S⊙dS parts
    // Epilogue inputs at this thread's C-fragment positions (load_epilogue_inputs). Loaded
    // first, so that the slab preparation, the barrier and the products below hide their latency.
    constexpr int kTiles = Tr::kWarpTiles;
    int kl[kTiles];  // column within the slab, per tile
    int kc[kTiles];  // column of k
    float2 g_in[kTiles][2];
    uint32_t q_in[kTiles][2];
    uint32_t k_in[kTiles][2];
    float2 gn[kTiles];
    wy::load_epilogue_inputs<Tr, XT>(kl, kc, g_in, q_in, k_in, gn, st, k0, L, pos);
    // BT >= 32: the next stage's g, q, k rows into L2 (thread i < L: row i), so that its
    // epilogue inputs, loaded at its start, come from L2 rather than from DRAM (H200: model bf16
    // 158 -> 155 µs, h in bf16 148 -> 142, BT = 32 -0.9%; at BT = 16 it cost 1%, so not there).
    if constexpr (kBT >= 32) {
      if (kb + 1 < slab_end && tid < L) {
        const int k1 = k0 + Tr::kSlabK;
        prefetch_l2(st.g + (tid * st.g_row + k1));
        prefetch_l2(static_cast<const XT*>(st.q) + (tid * st.q_row + k1));
        prefetch_l2(static_cast<const XT*>(st.k) + (tid * st.k_row + k1));
      }
    }

    // Slab kb (and, for kb = 0, dO and Vn) landed for this thread; with two slots in flight
    // (the 16-bit ring, or two staging slots) slab kb + 1's group may still be pending.
    // (Float32 h in slab pairs: pair kb was converted during the previous iteration.)
    constexpr int kSlabsInFlight = Tr::kStateF32 ? Tr::kStageSlots : 2;
    if constexpr (!Tr::kHalfSlabs) mma::cp_async_wait<kSlabsInFlight - 1>();
    // No barrier needed before: each thread reads back only its own copies, and the previous
    // slab's 16-bit copy was last read before the previous iteration's second barrier.
    if constexpr (Tr::kHalfSlabs) {
      // pair kb is in the 16-bit copy already
    } else if constexpr (Tr::kTmaSlab) {
      if (tma_slab) {
        // The slab's bulk copies: phase kb - slab_begin of the barrier (parity alternates).
        tma::barrier_wait(&slab_bar, (kb - slab_begin) & 1);
        slab_prepare<Tr>(stage_S(0), stage_dS(0), slab_S(0), slab_dS(0), sds, 0, tid);
        // Slab kb + 1 is issued after the barrier below, once every thread has read the slot.
      } else {
        slab_prepare<Tr>(stage_S(0), stage_dS(0), slab_S(0), slab_dS(0), sds, 0, tid);
        if (kb + 1 < slab_end) {
          issue_slab<Tr, Tr::kSlabCols>(p, o, st, k0 + Tr::kSlabK, stage_S(0), stage_dS(0), tid);
        }
        mma::cp_async_commit();
      }
    } else if constexpr (Tr::kStateF32) {
      const int slot = Tr::kStageSlots == 1 ? 0 : ring;
      slab_prepare<Tr>(stage_S(slot), stage_dS(slot), slab_S(0), slab_dS(0), sds, 0, tid);
      // This thread's staging chunks are free again: slab kb + kStageSlots takes them.
      if (kb + Tr::kStageSlots < slab_end) {
        issue_slab<Tr, Tr::kSlabCols>(p, o, st, k0 + Tr::kStageSlots * Tr::kSlabK, stage_S(slot),
                                      stage_dS(slot), tid);
      }
      mma::cp_async_commit();
    } else {
      slab_prepare<Tr>(nullptr, nullptr, slab_S(ring), slab_dS(ring), sds, 0, tid);
    }
    if constexpr (Tr::kWgmmaLoop) {
      // The wgmma below read the slab copy and the token tiles through the async proxy; this
      // thread's stores and landed cp.async copies are ordinary (generic-proxy) writes.
      tma::fence_proxy_async_shared();
    }
    __syncthreads();  // the slab's 16-bit copy, Σ S⊙dS and (kb = 0) dO, Vn are complete
    if constexpr (Tr::kTmaSlab) {
      if (tma_slab && tid == 0 && kb + 1 < slab_end) issue_slab_tma(kb + 1);
    }
    const XT* const cur_S = slab_S(Tr::kStateF32 ? 0 : ring);
    const XT* const cur_dS = slab_dS(Tr::kStateF32 ? 0 : ring);

    // Steps 1-3 before gating: dO·Sᵀ, Vn·dSᵀ, dV·Sᵀ for the warp's 16 rows x its n8 tiles
    // (acc[4 j + 2 h + e]: row m0 + grp + 8 h, column kl[j] + e).
    float acc_dq[4 * kTiles] = {};
    float acc_dk0[4 * kTiles] = {};
    float acc_dw[4 * kTiles] = {};
    if constexpr (Tr::kWgmmaLoop) {
      // Warpgroup cg: all 64 rows x the slab's columns kWarpK cg .. (rows kWarpK cg.. of the slab
      // copy: 1024 or 2048 bytes into each atom, whole swizzle periods), eight k16 steps over V.
      const uint64_t d_do = wgmma::k_major_sw128_desc(sDo, 0);
      const uint64_t d_dv = wgmma::k_major_sw128_desc(sDv, 0);
      const uint64_t d_vn = wgmma::k_major_sw128_desc(sVn, 0);
      const uint64_t d_s = wgmma::k_major_sw128_desc(cur_S + cg * Tr::kWarpK * Tr::kAtomCols, 0);
      const uint64_t d_ds = wgmma::k_major_sw128_desc(cur_dS + cg * Tr::kWarpK * Tr::kAtomCols, 0);
      wgmma::fence_operands(acc_dq);
      wgmma::fence_operands(acc_dw);
      wgmma::fence_operands(acc_dk0);
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < Tr::kVSteps; ++s) {
        // Step s: atom s / 4, 32 (s % 4) bytes into its rows (descriptor addresses count 16 B).
        const uint64_t tok = ((s / 4) * Tr::kTokAtomBytes + 32 * (s % 4)) >> 4;
        const uint64_t slab = ((s / 4) * Tr::kSlabAtomBytes + 32 * (s % 4)) >> 4;
        if constexpr (kTiles == 1) {
          wgmma::mma_m64n8k16<XT>(acc_dq, d_do + tok, d_s + slab, s > 0);
          wgmma::mma_m64n8k16<XT>(acc_dw, d_dv + tok, d_s + slab, s > 0);
          wgmma::mma_m64n8k16<XT>(acc_dk0, d_vn + tok, d_ds + slab, s > 0);
        } else {
          wgmma::mma_m64n16k16<XT>(acc_dq, d_do + tok, d_s + slab, s > 0);
          wgmma::mma_m64n16k16<XT>(acc_dw, d_dv + tok, d_s + slab, s > 0);
          wgmma::mma_m64n16k16<XT>(acc_dk0, d_vn + tok, d_ds + slab, s > 0);
        }
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();
      wgmma::fence_operands(acc_dq);
      wgmma::fence_operands(acc_dw);
      wgmma::fence_operands(acc_dk0);
    } else {
      static_assert(kTiles == 1, "the mma.sync loop takes one n8 tile per warp");
      // B origin: element (v, k) = (0, kl0) of the slab, kl0 = the warp's first column.
      const int kl0 = cg * Tr::kWarpK;
      const XT* const s_origin = kSlabLayout == BLayout::kNK ? cur_S + kl0 * kSlabXLd : cur_S + kl0;
      const XT* const ds_origin =
          kSlabLayout == BLayout::kNK ? cur_dS + kl0 * kSlabXLd : cur_dS + kl0;
      constexpr int kBStep = kSlabLayout == BLayout::kNK ? 16 : 16 * kSlabXLd;  // per k16 of v
#pragma unroll
      for (int s = 0; s < Tr::kVSteps; ++s) {
        uint32_t b_s[1][2];
        uint32_t b_ds[1][2];
        mma::load_b<kSlabLayout, 1>(b_s, s_origin + s * kBStep, kSlabXLd, lane);
        mma::load_b<kSlabLayout, 1>(b_ds, ds_origin + s * kBStep, kSlabXLd, lane);
        uint32_t a[4];
        load_tok_a(a, sDo, s);
        mma::mma_16816<XT>(acc_dq, a, b_s[0]);
        load_tok_a(a, sDv, s);
        mma::mma_16816<XT>(acc_dw, a, b_s[0]);
        load_tok_a(a, sVn, s);
        mma::mma_16816<XT>(acc_dk0, a, b_ds[0]);
      }
    }

    // Epilogue, first half (steps 1, 2, 3, 5's KG, 9's first terms, 8's row sums).
    float dk0[kTiles][2][2];  // dK0 = (Vn·dSᵀ) ⊙ exp2(gn − G), 0 on rows >= L
    float kg[kTiles][2][2];   // KG = Kk ⊙ E, 0 on rows >= L
    float eb[kTiles][2][2];   // E ⊙ β
    float dgf[kTiles][2][2];  // Q ⊙ dQ − Kk ⊙ dK0
    float kdk[kTiles][2];     // Σ over this thread's rows of Kk ⊙ dK0, per tile and column
    float dq_row[2][2];       // quad columns: the row's dQ of tile 0, stored with tile 1's
    // (tile, row) pairs in the order j, h (rows first, h, j, spilled 44 bytes in the model
    // kernel with quad columns); a quad-column row's dQ of tile 0 waits in dq_row for tile 1's.
#pragma unroll
    for (int t = 0; t < 2 * kTiles; ++t) {
      const int j = t / 2;
      const int h = t % 2;
      if (h == 0) kdk[j][0] = kdk[j][1] = 0.0f;
      const int i = m0 + grp + 8 * h;
      const bool valid = i < L;
      const float beta_i = sBeta[i];
      const float2 qf = mma::unpack2<XT>(q_in[j][h]);
      const float2 kf = mma::unpack2<XT>(k_in[j][h]);
      float dq[2];
      float dw[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float G = e == 0 ? g_in[j][h].x : g_in[j][h].y;
        const float gne = e == 0 ? gn[j].x : gn[j].y;
        const float Q = e == 0 ? qf.x : qf.y;
        const float Kk = e == 0 ? kf.x : kf.y;
        const float E = exp2f(G);
        const int a = 4 * j + 2 * h + e;
        dq[e] = acc_dq[a] * E * p.scale;
        // Rows >= L stay exactly zero (never 0 · exp2(...) of padding).
        dk0[j][h][e] = valid ? acc_dk0[a] * exp2f(gne - G) : 0.0f;
        dw[e] = valid ? -acc_dw[a] : 0.0f;
        kg[j][h][e] = valid ? Kk * E : 0.0f;
        eb[j][h][e] = E * beta_i;
        dgf[j][h][e] = fmaf(Q, dq[e], -(Kk * dk0[j][h][e]));
        kdk[j][e] = fmaf(Kk, dk0[j][h][e], kdk[j][e]);
      }
      wy::store_dq<Tr>(st, i, j, valid, kc, dq, dq_row[h]);
      *reinterpret_cast<uint32_t*>(sDw + i * kKbLd + kl[j]) = mma::pack2<XT>(dw[0], dw[1]);
      *reinterpret_cast<uint32_t*>(sKg + i * kKbLd + kl[j]) =
          mma::pack2<XT>(kg[j][h][0], kg[j][h][1]);
      // Σ_rows Kk ⊙ dK0 of the row block, once the tile's two rows are in: lanes with equal
      // quad share columns.
      if (h == 1) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
#pragma unroll
          for (int offset = 4; offset < 32; offset *= 2) {
            kdk[j][e] += __shfl_xor_sync(kFullMask, kdk[j][e], offset);
          }
        }
        if (grp == 0) {
          sKdk[rb * Tr::kSlabK + kl[j]] = kdk[j][0];
          sKdk[rb * Tr::kSlabK + kl[j] + 1] = kdk[j][1];
        }
      }
    }
    __syncthreads();  // dW, KG and the Σ Kk⊙dK0 parts of the slab are complete

    if constexpr (!Tr::kStateF32) {
      // Every warp is past its products of slab kb: its ring slot takes slab kb + 2.
      if (kb + 2 < slab_end) {
        issue_slab<Tr, kSlabXLd>(p, o, st, k0 + 2 * Tr::kSlabK, slab_S(ring), slab_dS(ring), tid);
      }
      mma::cp_async_commit();
    } else if constexpr (Tr::kHalfSlabs) {
      // Every warp is past its products of pair kb: the 16-bit copy takes pair kb + 1's first
      // half (its Σ S⊙dS into the other sds slot: epilogue 2 below still reads this pair's).
      if (kb + 1 < slab_end) convert_half(kb + 1, 0);
    }

    // Step 5: dkgb = Āᵀ·dW (rows m0.., the warp's columns), reduced over j.
    float acc_kgb[kTiles][4] = {};
    mma::warp_mma<XT, ALayout::kKM, BLayout::kKN, kJSteps, kTiles>(
        acc_kgb, sA + m0, kALd, sDw + cg * Tr::kWarpK, kKbLd, lane);
    // Step 11, second term: D += dW·KGᵀ over the slab's k.
    mma::warp_mma<XT, ALayout::kMK, BLayout::kNK, Tr::kSlabK / 16, kJTiles>(
        acc_D, sDw + m0 * kKbLd, kKbLd, sKg + cg * Tr::kWarpJ * kKbLd, kKbLd, lane);

    // Epilogue, second half: steps 6 (second term), 7, 8, 9.
    wy::epilogue_dk_dg<Tr>(db_part, acc_kgb, kg, eb, dk0, dgf, gn, kl, kc, sBeta, sds, sKdk, st,
                           m0 + grp, L);
    if constexpr (Tr::kHalfSlabs) {
      // Pair kb + 1's second half (its copy was in flight during step 5 and epilogue 2); the
      // next iteration's first barrier publishes the whole pair.
      if (kb + 1 < slab_end) convert_half(kb + 1, 1);
    }
  }

  // --- db; steps 11, 12: X = strict-lower(D) ⊙ β[j]; dA = −strict-lower(Āᵀ·X·Āᵀ) --------
  wy::store_db_parts(db_part, sDb, kBT, pos);
  float db_sum = 0.0f;  // split units: rank 0's db of row tid, the cluster's parts summed
  if constexpr (Tr::kSplitUnits) {
    // D and db are sums over the slabs and over V, which the cluster's CTAs split: each CTA puts
    // its D partial (fragment e of thread t at red[e * kThreads + t]) into its dead slab region
    // (last read before the last slab's second barrier), and rank 0 adds the others' in rank
    // order through distributed shared memory. The second cluster barrier keeps every CTA (and
    // so its shared memory) alive until rank 0 has read it.
    auto cluster = cooperative_groups::this_cluster();
    float* const red = reinterpret_cast<float*>(&sh.state);
    static_assert(sizeof(sh.state) >= sizeof(float) * kJTiles * 4 * Tr::kThreads,
                  "D's partial fits the slab region");
#pragma unroll
    for (int nt = 0; nt < kJTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) red[(nt * 4 + e) * Tr::kThreads + tid] = acc_D[nt][e];
    }
    cluster.sync();  // every CTA's D and db parts are written (release / acquire, cluster-wide)
    if (rank == 0) {
      if (tid < L) db_sum = sDb[tid] + sDb[kBT + tid];
      for (int r = 1; r < ranks; ++r) {
        const float* const peer_red = cluster.map_shared_rank(red, r);
#pragma unroll
        for (int nt = 0; nt < kJTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_D[nt][e] += peer_red[(nt * 4 + e) * Tr::kThreads + tid];
        }
        if (tid < L) {
          const float* const peer_db = cluster.map_shared_rank(sDb, r);
          db_sum += peer_db[tid] + peer_db[kBT + tid];
        }
      }
    }
    cluster.sync();  // rank 0 has read the others' parts: they may leave
    if (rank != 0) return;
  }
  // X goes to the dead dO tile: the last slab's products were read before its second barrier.
  wy::store_x<Tr, kALd>(acc_D, sX, sBeta, L, pos);
  __syncthreads();  // X and the db parts are complete
  if (tid < L) p.db[out_row(tid)] = Tr::kSplitUnits ? db_sum : sDb[tid] + sDb[kBT + tid];
  // Y = X·Āᵀ: Y[i][j] = Σ_n X[i][n] Ā[j][n]; B element (n, j) at Ā[j][n].
  {
    float acc_Y[kJTiles][4] = {};
    mma::warp_mma<XT, ALayout::kMK, BLayout::kNK, kJSteps, kJTiles>(
        acc_Y, sX + m0 * kALd, kALd, sA + cg * Tr::kWarpJ * kALd, kALd, lane);
    wy::store_y<Tr, kALd>(acc_Y, sY, pos);
  }
  __syncthreads();  // Y is complete
  // Z = Āᵀ·Y: Z[i][j] = Σ_n Ā[n][i] Y[n][j].
  {
    float acc_Z[kJTiles][4] = {};
    mma::warp_mma<XT, ALayout::kKM, BLayout::kKN, kJSteps, kJTiles>(
        acc_Z, sA + m0, kALd, sY + cg * Tr::kWarpJ, kALd, lane);
    wy::store_da<Tr>(acc_Z, p, out_row, L, pos);
  }
}

}  // namespace kda::cuda
