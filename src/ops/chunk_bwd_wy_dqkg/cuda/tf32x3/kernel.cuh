#pragma once
// The float32 tensor-core kernel of chunk_kda_bwd_wy_dqkg_fused (SPEC.md steps 1..12 per chunk),
// for float32 X: every product on mma.sync m16n8k8 with the 3xTF32 split (float32 operands from
// shared memory split into hi + lo TF32 parts as their fragments are loaded, three products per
// k8 step, float32 accumulators; cuda/common/tf32_mma.cuh), so that the results keep
// float32-level accuracy (SPEC's 1e-5 bar, where plain TF32 gives ~1e-3). Nothing is rounded
// between products (h, dh, dW, KG, X and Y stay float32); the elementwise math (exp2f of gates, β
// scaling, the dk/dg/db combinations, Σ S⊙dS) is float32 as in the simt kernel. No atomics, and
// every sum has a fixed order: results are bitwise reproducible.
//
// The structure follows the 16-bit sm80_mma kernel (phase 0, a K loop over slabs of h, phase 2);
// tile ownership and the shared-memory map are in traits.cuh, README.md in this folder walks
// through one unit. L = valid rows of the chunk (<= BT); rows >= L of every staged tile are zero
// and are never read from global memory nor written back.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tf32_mma.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/copy_tile.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/epilogues.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/tf32x3/traits.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/unit.cuh"

namespace kda::cuda {
namespace tf32x3 {

// Queues the copies of slab k0 .. k0 + kSlabK - 1 of h and dh, float32 as stored ([kSlabK k][V],
// or [V][kSlabK k] for state_v_first, columns swizzled by Tr::slab_col_xor), into rows of kSlabLd
// floats at dst_S / dst_dS. The same
// thread copies the same chunk positions of S and dS, so slab_sds can read both back after its
// own cp.async wait, without a barrier.
template <typename Tr>
__device__ __forceinline__ void issue_slab(const WyDqkgParams& p, const UnitOrigins& o,
                                           const LoopStrides& st, int k0, float* dst_S,
                                           float* dst_dS, int tid) {
  constexpr int kE = Tr::kChunkElems;
#pragma unroll
  for (int n = 0; n < Tr::kSlabIters; ++n) {
    const int c = tid + n * Tr::kThreads;
    if (Tr::kSlabChunks % Tr::kThreads != 0 && c >= Tr::kSlabChunks) break;
    const int row = c / Tr::kChunksPerRow;
    const int ch = c % Tr::kChunksPerRow;
    const int k = k0 + (Tr::kStateVFirst ? ch * kE : row);
    const int v = Tr::kStateVFirst ? row : ch * kE;
    const int dst = Tr::slab_row_pos(row) * Tr::kSlabLd + ((ch * kE) ^ Tr::slab_col_xor(row));
    mma::cp_async_16(dst_S + dst,
                     static_cast<const float*>(p.h.data) + o.h + k * st.h_k + v * st.h_v, 16);
    mma::cp_async_16(dst_dS + dst,
                     static_cast<const float*>(p.dh.data) + o.dh + k * st.dh_k + v * st.dh_v, 16);
  }
}

// After this thread's copies of a slab landed: Σ_v S⊙dS in float32 for each k of the slab, from
// the chunks this thread copied (issue_slab's positions):
//   k-first slabs: the lanes of a warp that share a k row reduce by butterfly; sds_out[k] = sum;
//   state_v_first: per-warp partials, sds_out[warp * kSlabK + k] (summed over warps by the
//   reader, in warp order).
template <typename Tr>
__device__ __forceinline__ void slab_sds(const float* slab_S, const float* slab_dS, float* sds_out,
                                         int tid) {
  constexpr int kE = Tr::kChunkElems;
  const int warp = tid / 32;
  const int lane = tid % 32;
  float col_sum[kE];  // state_v_first: Σ over this thread's rows v for its chunk's k columns
#pragma unroll
  for (int e = 0; e < kE; ++e) col_sum[e] = 0.0f;
  constexpr bool kTransposed = wy::kTransposedSds<Tr>;
  float part[Tr::kSlabIters];  // kTransposed: this lane's Σ S⊙dS of each of its chunks
#pragma unroll
  for (int n = 0; n < Tr::kSlabIters; ++n) {
    const int c = tid + n * Tr::kThreads;
    // Warp-uniform (kSlabChunks is a multiple of 32), so the shuffles below see whole warps.
    if (Tr::kSlabChunks % Tr::kThreads != 0 && c >= Tr::kSlabChunks) break;
    const int row = c / Tr::kChunksPerRow;
    const int ch = c % Tr::kChunksPerRow;
    const int at =
        Tr::slab_row_pos(row) * Tr::kSlabLd + ((ch * kE) ^ Tr::slab_col_xor(row));  // issue_slab's
    const float4 sv = *reinterpret_cast<const float4*>(slab_S + at);
    const float4 dsv = *reinterpret_cast<const float4*>(slab_dS + at);
    const float s[kE] = {sv.x, sv.y, sv.z, sv.w};
    const float ds[kE] = {dsv.x, dsv.y, dsv.z, dsv.w};
    wy::sds_chunk<Tr, kTransposed>(s, ds, row, ch, 0, col_sum, sds_out, part[n]);
  }
  if constexpr (kTransposed) wy::sds_reduce_rows<Tr>(part, 0, sds_out, tid);
  wy::sds_finish<Tr>(col_sum, 0, sds_out, warp, lane);
}

}  // namespace tf32x3

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSm)
    wy_dqkg_tf32x3_kernel(const WyDqkgParams p) {
  using mma::ALayout;
  using mma::BLayout;
  using Split = mma::Tf32x3Split;  // every operand's split, as in warp_mma_tf32
  constexpr int kBT = Tr::kBT;
  constexpr int kV = Tr::kV;
  constexpr int kTokLd = Tr::kTokLd;
  constexpr int kALd = Tr::kALd;
  constexpr int kSlabLd = Tr::kSlabLd;
  constexpr int kJSteps = Tr::kJSteps;
  constexpr int kJTiles = Tr::kJTiles;
  constexpr int kTiles = Tr::kWarpTiles;
  constexpr unsigned kFullMask = 0xffffffffu;
  // S as the B operand of dO·Sᵀ: element (v, k) of the slab at [k][v] (B [n][k]) or, stored
  // state_v_first, at [v][k] (B [k][n]).
  constexpr BLayout kSlabLayout = Tr::kStateVFirst ? BLayout::kKN : BLayout::kNK;
  static_assert(
      sizeof(WorkUnit) + sizeof(UnitOrigins) + sizeof(LoopStrides) + 64 <= Tr::kStaticSmemBound,
      "static shared memory within the bound the traits' CTA count assumes");

  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ WorkUnit unit_shared;
  __shared__ UnitOrigins origins_shared;
  __shared__ LoopStrides strides_shared;

  auto& sh = *reinterpret_cast<typename Tr::Shared*>(smem);
  float* const sA = &sh.A[0][0];            // Ā [BT][kALd], Ā[j][i]
  float* const sDo = &sh.dO[0][0];          // dO [BT][kTokLd]
  float* const sVn = &sh.Vn[0][0];          // Vn [BT][kTokLd]
  float* const sDv = &sh.dV[0][0];          // dV [BT][kTokLd]
  float* const sVv = &sh.ring[1].Vv[0][0];  // Vv [BT][kTokLd], phase 0 only (ring slot 1)
  float* const sDw = &sh.dW[0][0];          // dW of the slab [BT][kDwLd]
  float* const sKg = &sh.KG[0][0];          // KG of the slab [BT][kKgLd]
  float* const sX = &sh.X[0][0];            // X [BT][kXLd] (after the K loop, in dO's place)
  float* const sY = &sh.Y[0][0];            // Y [BT][kYLd] (after the K loop, in Vn's place)
  float* const sBeta = &sh.beta[0];         // β [BT], 0 beyond L
  float* const sSds = &sh.sds[0][0][0];     // [2][kSdsParts][kSlabK]
  float* const sKdk = &sh.kdk[0][0];        // [kRowBlocks][kSlabK]
  float* const sDb = &sh.db[0][0];          // [2][BT]
  // Ring slot `slot`: S and dS of a slab, [kSlabRows][kSlabLd] each.
  auto slab_S = [&](int slot) { return &sh.ring[slot].slab[0][0][0]; };
  auto slab_dS = [&](int slot) { return &sh.ring[slot].slab[1][0][0]; };

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int cg = warp % Tr::kColGroups;  // column group
  const int rb = warp / Tr::kColGroups;  // row block
  const int m0 = rb * 16;                // first row of the warp's row block
  const int grp = lane / 4;              // fragment row within 8
  const int quad = lane % 4;             // fragment column pair
  const wy::WarpPos pos{cg, rb, m0, grp, quad};
  if (tid == 0) {
    set_loop_strides(p, strides_shared);  // the unit pointers follow in publish_unit
  }
  const LoopStrides& st = strides_shared;  // read after the first barrier

  // One unit per CTA (a 2D grid when there are more than 2^31 - 1 units), as in sm80_mma.
  const int64_t unit = blockIdx.x + static_cast<int64_t>(blockIdx.y) * gridDim.x;
  if (unit >= p.num_units) return;  // uniform over the CTA
  publish_unit<float>(p, unit, kBT, warp, lane, unit_shared, origins_shared, &strides_shared);
  __syncthreads();
  if (!unit_shared.valid) return;  // inconsistent index tensors: see unit.cuh
  const UnitOrigins& o = origins_shared;
  const int L = unit_shared.len;
  const int num_slabs = static_cast<int>(p.K / Tr::kSlabK);
  auto out_row = [&](int i) { return o.out_row0 + static_cast<int64_t>(i) * p.HV; };

  // --- copies: group 1 = Ā, dV, Vv (phase 0); group 2 = dO, Vn, slab 0 ----------------------
  // Ā columns >= L are zero-filled too: they are not part of the chunk, and a NaN there would
  // reach valid rows through X·Āᵀ (0 · NaN).
  copy_tile_async<kBT, kBT, Tr::kThreads>(sA, kALd, static_cast<const float*>(p.A.data) + o.A,
                                          p.A.stride_token, L, L, tid);
  copy_tile_async<kBT, kV, Tr::kThreads>(sDv, kTokLd, static_cast<const float*>(p.dv.data) + o.dv,
                                         p.dv.stride_token, L, kV, tid);
  copy_tile_async<kBT, kV, Tr::kThreads>(sVv, kTokLd, static_cast<const float*>(p.v.data) + o.v,
                                         p.v.stride_token, L, kV, tid);
  mma::cp_async_commit();
  copy_tile_async<kBT, kV, Tr::kThreads>(sDo, kTokLd, static_cast<const float*>(p.do_.data) + o.do_,
                                         p.do_.stride_token, L, kV, tid);
  copy_tile_async<kBT, kV, Tr::kThreads>(sVn, kTokLd,
                                         static_cast<const float*>(p.v_new.data) + o.v_new,
                                         p.v_new.stride_token, L, kV, tid);
  tf32x3::issue_slab<Tr>(p, o, st, 0, slab_S(0), slab_dS(0), tid);
  mma::cp_async_commit();
  if (tid < kBT) {
    // β is float32 here (X is float32, and float32 β is float32 whatever X is).
    sBeta[tid] =
        tid < L ? load_float<float>(p.beta.data, o.beta + tid * p.beta.stride_token) : 0.0f;
  }
  mma::cp_async_wait<1>();  // group 1 landed (this thread's copies)
  __syncthreads();          // ... and everyone's

  // --- phase 0: steps 4, 6 (first term), 11 (first term) -------------------------------
  float db_part[2] = {0.0f, 0.0f};  // rows m0 + grp and m0 + grp + 8: this lane's share of db
  // dvb = Āᵀ·dV; dv_out = β ⊙ dvb; db += rowsum(dvb ⊙ Vv): the warp's V/2 columns, 32 at a time.
#pragma unroll 1
  for (int v0 = cg * Tr::kWarpV; v0 < (cg + 1) * Tr::kWarpV; v0 += 8 * Tr::kDvbTiles) {
    float acc[Tr::kDvbTiles][4] = {};
    mma::warp_mma_tf32<ALayout::kKM, BLayout::kKN, kJSteps, Tr::kDvbTiles>(acc, sA + m0, kALd,
                                                                           sDv + v0, kTokLd, lane);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = m0 + grp + 8 * h;
      if (i >= L) continue;
      const float beta_i = sBeta[i];
#pragma unroll
      for (int nt = 0; nt < Tr::kDvbTiles; ++nt) {
        const int v = v0 + 8 * nt + 2 * quad;
        const float d0 = acc[nt][2 * h];
        const float d1 = acc[nt][2 * h + 1];
        *reinterpret_cast<float2*>(static_cast<float*>(p.dv_out) + o.out_row0 * kV + i * st.dv_row +
                                   v) = make_float2(beta_i * d0, beta_i * d1);
        const float2 vv = *reinterpret_cast<const float2*>(sVv + i * kTokLd + v);
        db_part[h] = fmaf(d0, vv.x, db_part[h]);
        db_part[h] = fmaf(d1, vv.y, db_part[h]);
      }
    }
  }
  // D = dV·Vvᵀ: the warp's rows x columns j = cg * BT/2 .. (BT/2 of them), reduced over V.
  float acc_D[kJTiles][4] = {};
  if constexpr (Tr::kPairedLoads) {
    // k-paired 128-bit loads (v is contiguous in both tiles).
    mma::warp_mma_tf32_k16<BLayout::kNK, Tr::kVSteps, kJTiles>(
        acc_D, sDv + m0 * kTokLd, kTokLd, sVv + cg * Tr::kWarpJ * kTokLd, kTokLd, lane);
  } else {
    mma::warp_mma_tf32<ALayout::kMK, BLayout::kNK, Tr::kVSteps, kJTiles>(
        acc_D, sDv + m0 * kTokLd, kTokLd, sVv + cg * Tr::kWarpJ * kTokLd, kTokLd, lane);
  }
  __syncthreads();  // Vv is dead: ring slot 1 takes slab 1
  if (num_slabs > 1) tf32x3::issue_slab<Tr>(p, o, st, Tr::kSlabK, slab_S(1), slab_dS(1), tid);
  mma::cp_async_commit();

  // --- the K loop: slab kb = rows k0 .. k0+kSlabK-1 of h, dh; steps 1-3, 5, 7-9, 11 (2nd term)
#pragma unroll 1
  for (int kb = 0; kb < num_slabs; ++kb) {
    const int ring = kb & 1;
    const int k0 = kb * Tr::kSlabK;
    float* const sds = sSds + ring * Tr::kSdsParts * Tr::kSlabK;  // this slab's Σ S⊙dS parts
    // Epilogue inputs at this thread's C-fragment positions (load_epilogue_inputs). Loaded
    // first, so that the slab's wait, the barrier and the products below hide their latency.
    int kl[kTiles];  // column within the slab, per tile
    int kc[kTiles];  // column of k
    float2 g_in[kTiles][2];
    float2 q_in[kTiles][2];
    float2 k_in[kTiles][2];
    float2 gn[kTiles];
    wy::load_epilogue_inputs<Tr, float>(kl, kc, g_in, q_in, k_in, gn, st, k0, L, pos);

    // Slab kb (and, for kb = 0, dO and Vn) landed for this thread; slab kb + 1's group may still
    // be pending.
    mma::cp_async_wait<1>();
    tf32x3::slab_sds<Tr>(slab_S(ring), slab_dS(ring), sds, tid);
    __syncthreads();  // the slab, its Σ S⊙dS and (kb = 0) dO, Vn are complete
    const float* const cur_S = slab_S(ring);
    const float* const cur_dS = slab_dS(ring);

    // Steps 1-3 before gating: dO·Sᵀ, Vn·dSᵀ, dV·Sᵀ for the warp's 16 rows x its n8 tiles
    // (acc[j][2 h + e]: row m0 + grp + 8 h, column kl[j] + e). Each A fragment (split once)
    // serves the warp's kTiles tiles, each B fragment its three products. The k8 steps over v go
    // in pairs with the k-paired loads (cuda/common/tf32_mma.cuh): lane q's logical k's q, q + 4
    // of step 2p + u are v = 16 p + 4q + 2u, + 1 in A and B alike, so a fragment row of dO, dV, Vn
    // and (k-first) of S, dS is one LDS.128 for both steps; state_v_first's slab has v on its rows
    // and is read by 32-bit loads of those rows (columns swizzled, see Tr::slab_col_xor).
    // Without Tr::kPairedLoads (k-first only), one k8 step at a time by 32-bit loads.
    float acc_dq[kTiles][4] = {};
    float acc_dk0[kTiles][4] = {};
    float acc_dw[kTiles][4] = {};
    const int kl0 = cg * Tr::kWarpK;  // the warp's first column of the slab
    if constexpr (Tr::kPairedLoads) {
      static_assert(Tr::kVSteps % 2 == 0, "k8 steps over V go in pairs");
#pragma unroll
      for (int s = 0; s < Tr::kVSteps; s += 2) {
        Split a_do[2][4];
        Split a_dv[2][4];
        Split a_vn[2][4];
        mma::load_a_tf32_k16(a_do, sDo + m0 * kTokLd + 8 * s, kTokLd, lane);
        mma::load_a_tf32_k16(a_dv, sDv + m0 * kTokLd + 8 * s, kTokLd, lane);
        mma::load_a_tf32_k16(a_vn, sVn + m0 * kTokLd + 8 * s, kTokLd, lane);
        Split bs[kTiles][2][2];  // [tile][step of the pair][b0, b1]
        Split bds[kTiles][2][2];
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          if constexpr (kSlabLayout == BLayout::kNK) {
            // Element (v, k) = (8 s, kl0 + 8 j) of the slab at [k][v].
            const int b_at = (kl0 + 8 * j) * kSlabLd + 8 * s;
            mma::load_b_tf32_k16_nk(bs[j], cur_S + b_at, kSlabLd, lane);
            mma::load_b_tf32_k16_nk(bds[j], cur_dS + b_at, kSlabLd, lane);
          } else {
            // Rows v = 8 s + 4 quad + r: slab_col_xor(v) is the same for the four r (8 s is a
            // multiple of 16), and kl0 + 8 j is a multiple of 8, so column kl0 + 8 j + grp is
            // stored at ((kl0 + 8 j) ^ xor) + grp.
            const int column = ((kl0 + 8 * j) ^ Tr::slab_col_xor(4 * quad)) + grp;
            mma::load_b_tf32_k16_kn(bs[j], cur_S + 8 * s * kSlabLd, kSlabLd, column, lane);
            mma::load_b_tf32_k16_kn(bds[j], cur_dS + 8 * s * kSlabLd, kSlabLd, column, lane);
          }
        }
        // The products in warp_mma_tf32's order: step by step, the tiles within a step.
#pragma unroll
        for (int u = 0; u < 2; ++u) {
#pragma unroll
          for (int j = 0; j < kTiles; ++j) {
            mma::mma_split(acc_dq[j], a_do[u], bs[j][u][0], bs[j][u][1]);
            mma::mma_split(acc_dw[j], a_dv[u], bs[j][u][0], bs[j][u][1]);
            mma::mma_split(acc_dk0[j], a_vn[u], bds[j][u][0], bds[j][u][1]);
          }
        }
      }
    } else {
      static_assert(kSlabLayout == BLayout::kNK, "state_v_first always pairs");
#pragma unroll
      for (int s = 0; s < Tr::kVSteps; ++s) {
        Split a_do[4];
        Split a_dv[4];
        Split a_vn[4];
        mma::load_a_tf32<ALayout::kMK>(a_do, sDo + m0 * kTokLd + 8 * s, kTokLd, lane);
        mma::load_a_tf32<ALayout::kMK>(a_dv, sDv + m0 * kTokLd + 8 * s, kTokLd, lane);
        mma::load_a_tf32<ALayout::kMK>(a_vn, sVn + m0 * kTokLd + 8 * s, kTokLd, lane);
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          // B origin: element (v, k) = (8 s, kl0 + 8 j) of the slab, at [k][v] (k-first only).
          const int b_at = (kl0 + 8 * j) * kSlabLd + 8 * s;
          Split bs0;
          Split bs1;
          Split bds0;
          Split bds1;
          mma::load_b_tf32<kSlabLayout>(bs0, bs1, cur_S + b_at, kSlabLd, lane);
          mma::load_b_tf32<kSlabLayout>(bds0, bds1, cur_dS + b_at, kSlabLd, lane);
          mma::mma_split(acc_dq[j], a_do, bs0, bs1);
          mma::mma_split(acc_dw[j], a_dv, bs0, bs1);
          mma::mma_split(acc_dk0[j], a_vn, bds0, bds1);
        }
      }
    }

    // Epilogue, first half (steps 1, 2, 3, 5's KG, 9's first terms, 8's row sums).
    float dk0[kTiles][2][2];  // dK0 = (Vn·dSᵀ) ⊙ exp2(gn − G), 0 on rows >= L
    float kg[kTiles][2][2];   // KG = Kk ⊙ E, 0 on rows >= L
    float eb[kTiles][2][2];   // E ⊙ β
    float dgf[kTiles][2][2];  // Q ⊙ dQ − Kk ⊙ dK0
    float dq_row[2][2];       // quad columns: tile 0's dQ of each row, stored with tile 1's
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      float kdk[2] = {0.0f, 0.0f};  // Σ over this thread's rows of Kk ⊙ dK0, per column
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = m0 + grp + 8 * h;
        const bool valid = i < L;
        const float beta_i = sBeta[i];
        float dq[2];
        float dw[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float G = e == 0 ? g_in[j][h].x : g_in[j][h].y;
          const float gne = e == 0 ? gn[j].x : gn[j].y;
          const float Q = e == 0 ? q_in[j][h].x : q_in[j][h].y;
          const float Kk = e == 0 ? k_in[j][h].x : k_in[j][h].y;
          const float E = exp2f(G);
          dq[e] = acc_dq[j][2 * h + e] * E * p.scale;
          // Rows >= L stay exactly zero (never 0 · exp2(...) of padding).
          dk0[j][h][e] = valid ? acc_dk0[j][2 * h + e] * exp2f(gne - G) : 0.0f;
          dw[e] = valid ? -acc_dw[j][2 * h + e] : 0.0f;
          kg[j][h][e] = valid ? Kk * E : 0.0f;
          eb[j][h][e] = E * beta_i;
          dgf[j][h][e] = fmaf(Q, dq[e], -(Kk * dk0[j][h][e]));
          kdk[e] = fmaf(Kk, dk0[j][h][e], kdk[e]);
        }
        wy::store_dq<Tr>(st, i, j, valid, kc, dq, dq_row[h]);
        *reinterpret_cast<float2*>(sDw + i * Tr::kDwLd + kl[j]) = make_float2(dw[0], dw[1]);
        *reinterpret_cast<float2*>(sKg + i * Tr::kKgLd + kl[j]) =
            make_float2(kg[j][h][0], kg[j][h][1]);
      }
      // Σ_rows Kk ⊙ dK0 of the row block: lanes with equal quad share columns.
#pragma unroll
      for (int e = 0; e < 2; ++e) {
#pragma unroll
        for (int offset = 4; offset < 32; offset *= 2) {
          kdk[e] += __shfl_xor_sync(kFullMask, kdk[e], offset);
        }
      }
      if (grp == 0) {
        sKdk[rb * Tr::kSlabK + kl[j]] = kdk[0];
        sKdk[rb * Tr::kSlabK + kl[j] + 1] = kdk[1];
      }
    }
    __syncthreads();  // dW, KG and the Σ Kk⊙dK0 parts of the slab are complete

    // Every warp is past its products of slab kb: its ring slot takes slab kb + 2.
    if (kb + 2 < num_slabs) {
      tf32x3::issue_slab<Tr>(p, o, st, k0 + 2 * Tr::kSlabK, slab_S(ring), slab_dS(ring), tid);
    }
    mma::cp_async_commit();

    // Step 5: dkgb = Āᵀ·dW (rows m0.., the warp's columns), reduced over j.
    float acc_kgb[kTiles][4] = {};
    mma::warp_mma_tf32<ALayout::kKM, BLayout::kKN, kJSteps, kTiles>(
        acc_kgb, sA + m0, kALd, sDw + cg * Tr::kWarpK, Tr::kDwLd, lane);
    // Step 11, second term: D += dW·KGᵀ over the slab's k.
    mma::warp_mma_tf32<ALayout::kMK, BLayout::kNK, Tr::kSlabSteps, kJTiles>(
        acc_D, sDw + m0 * Tr::kDwLd, Tr::kDwLd, sKg + cg * Tr::kWarpJ * Tr::kKgLd, Tr::kKgLd, lane);

    // Epilogue, second half: steps 6 (second term), 7, 8, 9.
    wy::epilogue_dk_dg<Tr>(db_part, acc_kgb, kg, eb, dk0, dgf, gn, kl, kc, sBeta, sds, sKdk, st,
                           m0 + grp, L);
  }

  // --- db; steps 11, 12: X = strict-lower(D) ⊙ β[j]; dA = −strict-lower(Āᵀ·X·Āᵀ) --------
  wy::store_db_parts(db_part, sDb, kBT, pos);
  // X goes to the dead dO tile: the last slab's products read it before its second barrier.
  wy::store_x<Tr, Tr::kXLd>(acc_D, sX, sBeta, L, pos);
  __syncthreads();  // X and the db parts are complete
  if (tid < L) p.db[out_row(tid)] = sDb[tid] + sDb[kBT + tid];
  // Y = X·Āᵀ: Y[i][j] = Σ_n X[i][n] Ā[j][n]; B element (n, j) at Ā[j][n]. Y goes to the dead Vn
  // tile.
  {
    float acc_Y[kJTiles][4] = {};
    mma::warp_mma_tf32<ALayout::kMK, BLayout::kNK, kJSteps, kJTiles>(
        acc_Y, sX + m0 * Tr::kXLd, Tr::kXLd, sA + cg * Tr::kWarpJ * kALd, kALd, lane);
    wy::store_y<Tr, Tr::kYLd>(acc_Y, sY, pos);
  }
  __syncthreads();  // Y is complete
  // Z = Āᵀ·Y: Z[i][j] = Σ_n Ā[n][i] Y[n][j].
  {
    float acc_Z[kJTiles][4] = {};
    mma::warp_mma_tf32<ALayout::kKM, BLayout::kKN, kJSteps, kJTiles>(
        acc_Z, sA + m0, kALd, sY + cg * Tr::kWarpJ, Tr::kYLd, lane);
    wy::store_da<Tr>(acc_Z, p, out_row, L, pos);
  }
}

}  // namespace kda::cuda
