#pragma once
// The general CUDA kernel of chunk_kda_bwd_wy_dqkg_fused: plain SIMT float32 arithmetic (FFMA,
// no tensor cores) for every supported option. The math is SPEC.md's steps 1..12 per chunk;
// README.md in this folder describes the structure. Shapes in comments: L = rows of the chunk
// (<= BT), 32 = one K block or V tile, rows beyond L of every staged tile hold zeros.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/simt/traits.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/unit.cuh"

namespace kda::cuda {

template <typename Traits>
struct SharedTiles {
  float* A;     // [BT][kALd]     Ā[j][i] = A[t0+j, hv, i], zero outside j, i < L
  float* D;     // [BT][kALd]     D = dV·Vvᵀ + dW·KGᵀ, then X in place
  float* beta;  // [BT]           β, zero beyond L
  float* S;     // [32 k][kTileLd] h tile,  S[k][v]
  float* dS;    // [32 k][kTileLd] dh tile
  float* dO;    // [BT][kTileLd]  do tile (32 v)
  float* Vn;    // [BT][kTileLd]  v_new tile
  float* dV;    // [BT][kTileLd]  dv tile
  float* Vv;    // [BT][kTileLd]  v tile (first K block only)
  float* dW;    // [BT][kTileLd]  dW of the current K block (32 k)
  float* KG;    // [BT][kTileLd]  KG of the current K block
  float* part;  // [8][32]        per-warp Σ_rows Kk⊙dK0 of the current K block
  float* Y;     // [BT][kALd]     X·Āᵀ (reuses the token tiles after the K loop)

  __device__ explicit SharedTiles(typename Traits::Shared& sh)
      : A(&sh.A[0][0]),
        D(&sh.D[0][0]),
        beta(&sh.beta[0]),
        S(&sh.S[0][0]),
        dS(&sh.dS[0][0]),
        dO(&sh.tok.dO[0][0]),
        Vn(&sh.tok.Vn[0][0]),
        dV(&sh.tok.dV[0][0]),
        Vv(&sh.tok.Vv[0][0]),
        dW(&sh.dW[0][0]),
        KG(&sh.KG[0][0]),
        part(&sh.part[0][0]),
        Y(&sh.Y[0][0]) {}
};

// Products over one V tile (32 columns v), for the thread's rows i and K column c = lane:
//   dq_acc[i] += Σ_v dO[i][v] S[c][v],  dk0_acc[i] += Σ_v Vn[i][v] dS[c][v],
//   dw_acc[i] += Σ_v dV[i][v] S[c][v],  sds += Σ_v S[c][v] dS[c][v]  (same in every warp).
// Per 4 columns: 2 + 3 * kRows float4 reads (S, dS per lane, conflict-free; row reads are
// broadcasts) for 12 * kRows + 4 FMAs. The v loop stays rolled: unrolled, the compiler hoists
// the next step's reads and the BT = 64 kernel no longer fits 128 registers.
template <typename Traits>
__device__ __forceinline__ void accumulate_v_tile(const SharedTiles<Traits>& sm, int row0, int lane,
                                                  float (&dq_acc)[Traits::kRows],
                                                  float (&dk0_acc)[Traits::kRows],
                                                  float (&dw_acc)[Traits::kRows], float& sds) {
  constexpr int kLd = Traits::kTileLd;
#pragma unroll 1
  for (int v = 0; v < Traits::kBV; v += 4) {
    const float4 s = load_float4(sm.S + lane * kLd + v);
    const float4 ds = load_float4(sm.dS + lane * kLd + v);
    sds = dot4_acc(s, ds, sds);
#pragma unroll
    for (int m = 0; m < Traits::kRows; ++m) {
      const int i = row0 + m;
      dq_acc[m] = dot4_acc(load_float4(sm.dO + i * kLd + v), s, dq_acc[m]);
      dk0_acc[m] = dot4_acc(load_float4(sm.Vn + i * kLd + v), ds, dk0_acc[m]);
      dw_acc[m] = dot4_acc(load_float4(sm.dV + i * kLd + v), s, dw_acc[m]);
    }
  }
}

// D[i][j] += Σ_{c < 32} R[i][c] · C[j][c] over two staged 32-wide tiles, for the thread's own
// entries of D (rows row0 + m, columns lane + 32 jj < BT). No other thread touches those
// entries, so no barrier is needed around the update. The tile-by-tile partial sums are added in
// a fixed order: deterministic.
template <typename Traits>
__device__ __forceinline__ void add_row_products(const SharedTiles<Traits>& sm, const float* R,
                                                 const float* C, int row0, int lane) {
  constexpr int kLd = Traits::kTileLd;
  float acc[Traits::kRows][Traits::kDCols];
#pragma unroll
  for (int m = 0; m < Traits::kRows; ++m) {
#pragma unroll
    for (int jj = 0; jj < Traits::kDCols; ++jj) acc[m][jj] = 0.0f;
  }
#pragma unroll 1
  for (int c = 0; c < 32; c += 4) {
    float4 cj[Traits::kDCols];  // C[j][c..c+3], one row j per lane: conflict-free
#pragma unroll
    for (int jj = 0; jj < Traits::kDCols; ++jj) {
      const int j = lane + 32 * jj;
      cj[jj] = j < Traits::kBT ? load_float4(C + j * kLd + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int m = 0; m < Traits::kRows; ++m) {
      const float4 ri = load_float4(R + (row0 + m) * kLd + c);  // broadcast
#pragma unroll
      for (int jj = 0; jj < Traits::kDCols; ++jj) acc[m][jj] = dot4_acc(ri, cj[jj], acc[m][jj]);
    }
  }
#pragma unroll
  for (int m = 0; m < Traits::kRows; ++m) {
#pragma unroll
    for (int jj = 0; jj < Traits::kDCols; ++jj) {
      const int j = lane + 32 * jj;
      if (j < Traits::kBT) sm.D[(row0 + m) * Traits::kALd + j] += acc[m][jj];
    }
  }
}

// out[i] = Σ_{j < BT} Ā[j][i] · col[j * kTileLd] for the thread's rows i: (Āᵀ · M)[i][lane] for
// a staged 32-wide tile M. Rows j >= L of Ā are zero, so the padding adds nothing.
template <typename Traits>
__device__ __forceinline__ void abar_t_times(const SharedTiles<Traits>& sm, int row0,
                                             const float* col, float (&out)[Traits::kRows]) {
#pragma unroll
  for (int m = 0; m < Traits::kRows; ++m) out[m] = 0.0f;
#pragma unroll 8
  for (int j = 0; j < Traits::kBT; ++j) {
    float a[Traits::kRows];
    load_row(sm.A + j * Traits::kALd + row0, a);
    const float mj = col[j * Traits::kTileLd];
#pragma unroll
    for (int m = 0; m < Traits::kRows; ++m) out[m] = fmaf(a[m], mj, out[m]);
  }
}

template <typename XT, typename HT, int kBT>
__global__ void __launch_bounds__(WyDqkgTraits<kBT>::kThreads, WyDqkgTraits<kBT>::kMinCtasPerSm)
    wy_dqkg_kernel(const WyDqkgParams p) {
  using Tr = WyDqkgTraits<kBT>;
  constexpr int kRows = Tr::kRows;
  constexpr int kDCols = Tr::kDCols;
  constexpr int kLd = Tr::kTileLd;
  constexpr int kALd = Tr::kALd;
  constexpr unsigned kFullMask = 0xffffffffu;

  extern __shared__ float4 smem_float4[];  // float4: 16-byte alignment for the vector reads
  const SharedTiles<Tr> sm(*reinterpret_cast<typename Tr::Shared*>(smem_float4));
  __shared__ WorkUnit unit_shared;
  __shared__ UnitOrigins origins_shared;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int row0 = warp * kRows;  // the thread's rows: row0 .. row0 + kRows - 1

  // Units beyond 2^31 - 1 CTAs: each CTA strides over units (the loop is uniform per CTA).
  for (int64_t unit = blockIdx.x; unit < p.num_units; unit += gridDim.x) {
    __syncthreads();  // the previous unit is done with shared memory
    publish_unit(p, unit, kBT, warp, lane, unit_shared, origins_shared);
    __syncthreads();
    if (!unit_shared.valid) continue;  // inconsistent index tensors: see wy_dqkg_unit.cuh
    // Read through references to shared memory: after each barrier the compiler re-reads these
    // (a broadcast load) instead of pinning a dozen 64-bit offsets in registers for the whole
    // unit, which pushed the BT = 64 kernel past its register budget.
    const UnitOrigins& o = origins_shared;
    const int L = unit_shared.len;
    // Row of chunk row i in the outputs viewed as [B*T*HV, cols].
    auto out_row = [&](int i) { return o.out_row0 + i * p.HV; };

    // --- Ā and β for the whole unit -------------------------------------------------------
    {
      const int tid = static_cast<int>(threadIdx.x);
      // [BT x BT], columns >= L and rows >= L zero. Once per unit; partly unrolled for 4 loads
      // in flight per thread.
#pragma unroll 4
      for (int e = tid; e < kBT * kBT; e += Tr::kThreads) {
        const int j = e / kBT;
        const int i = e % kBT;
        float a = 0.0f;
        if (j < L && i < L) {
          a = load_float<XT>(p.A.data, o.A + j * p.A.stride_token + i * p.A.stride_col);
        }
        sm.A[j * kALd + i] = a;
      }
      if (tid < kBT) {
        float b = 0.0f;
        if (tid < L) {
          const int64_t off = o.beta + tid * p.beta.stride_token;
          b = p.beta.is_f32 ? load_float<float>(p.beta.data, off)
                            : load_float<XT>(p.beta.data, off);
        }
        sm.beta[tid] = b;
      }
    }

    // Per-unit accumulators, carried across all K blocks: D in shared memory (the thread's own
    // entries) and this lane's share of db's row sums.
    float db_part[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      db_part[m] = 0.0f;
#pragma unroll
      for (int jj = 0; jj < kDCols; ++jj) {
        const int j = lane + 32 * jj;
        if (j < kBT) sm.D[(row0 + m) * kALd + j] = 0.0f;
      }
    }

    // h stored [.., V, K] (state_v_first): its k index is the contiguous one. (dh has the same
    // shape; if its strides differ only the coalescing of its loads suffers.)
    const bool h_k_fastest = p.h.stride_k < p.h.stride_v;

    for (int k0 = 0; k0 < p.K; k0 += Tr::kBK) {
      const int k_count = p.K - k0 < Tr::kBK ? static_cast<int>(p.K - k0) : Tr::kBK;
      const bool first_k_block = k0 == 0;
      float dq_acc[kRows], dk0_acc[kRows], dw_acc[kRows];  // [L x 32] at (row0+m, k0+lane)
      float sds = 0.0f;                                    // Σ_v S[k0+lane][v] dS[k0+lane][v]
#pragma unroll
      for (int m = 0; m < kRows; ++m) dq_acc[m] = dk0_acc[m] = dw_acc[m] = 0.0f;

      // --- steps 1-3 (and 4, 6, 11's dV·Vvᵀ in the first K block), one V tile at a time ------
      for (int v0 = 0; v0 < p.V; v0 += Tr::kBV) {
        const int v_count = p.V - v0 < Tr::kBV ? static_cast<int>(p.V - v0) : Tr::kBV;
        __syncthreads();  // everyone is done with the previous tiles
        {
          float* const state_dst[2] = {sm.S, sm.dS};
          const TileSource state_src[2] = {
              {p.h.data, o.h + k0 * p.h.stride_k + v0 * p.h.stride_v, p.h.stride_k, p.h.stride_v},
              {p.dh.data, o.dh + k0 * p.dh.stride_k + v0 * p.dh.stride_v, p.dh.stride_k,
               p.dh.stride_v}};
          load_tiles<HT, Tr::kBK, 2>(state_dst, state_src, 2, kLd, k_count, v_count, h_k_fastest);
          float* const token_dst[4] = {sm.dO, sm.Vn, sm.dV, sm.Vv};
          const TileSource token_src[4] = {
              {p.do_.data, o.do_ + v0 * p.do_.stride_col, p.do_.stride_token, p.do_.stride_col},
              {p.v_new.data, o.v_new + v0 * p.v_new.stride_col, p.v_new.stride_token,
               p.v_new.stride_col},
              {p.dv.data, o.dv + v0 * p.dv.stride_col, p.dv.stride_token, p.dv.stride_col},
              {p.v.data, o.v + v0 * p.v.stride_col, p.v.stride_token, p.v.stride_col}};
          // v is needed in the first K block only.
          load_tiles<XT, kBT, 4>(token_dst, token_src, first_k_block ? 4 : 3, kLd, L, v_count,
                                 false);
        }
        __syncthreads();

        if (first_k_block) {
          accumulate_v_tile(sm, row0, lane, dq_acc, dk0_acc, dw_acc, sds);
          add_row_products(sm, sm.dV, sm.Vv, row0, lane);  // step 11: D += dV·Vvᵀ
          // Step 4: dvb = Āᵀ·dV for column v0+lane; dv_out = β ⊙ dvb; db += dvb ⊙ Vv.
          float dvb[kRows];
          abar_t_times(sm, row0, sm.dV + lane, dvb);
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            const int i = row0 + m;
            if (i < L && lane < v_count) {
              const int64_t out = out_row(i) * p.V + v0 + lane;
              static_cast<XT*>(p.dv_out)[out] = from_float<XT>(sm.beta[i] * dvb[m]);
              db_part[m] = fmaf(dvb[m], sm.Vv[i * kLd + lane], db_part[m]);
            }
          }
        } else {
          accumulate_v_tile(sm, row0, lane, dq_acc, dk0_acc, dw_acc, sds);
        }
      }

      // --- K-block epilogue: steps 1, 2, 5, 7, 8, 9, 10 for columns k0 .. k0+31 -------------
      // Stage G, Q, Kk [BT x 32] in the dead dO, Vn, dV tiles.
      __syncthreads();  // everyone is done with the last V tile
      {
        float* const g_dst[1] = {sm.dO};
        const TileSource g_src[1] = {
            {p.g.data, o.g + k0 * p.g.stride_col, p.g.stride_token, p.g.stride_col}};
        load_tiles<float, kBT, 1>(g_dst, g_src, 1, kLd, L, k_count, false);
        float* const qk_dst[2] = {sm.Vn, sm.dV};
        const TileSource qk_src[2] = {
            {p.q.data, o.q + k0 * p.q.stride_col, p.q.stride_token, p.q.stride_col},
            {p.k.data, o.k + k0 * p.k.stride_col, p.k.stride_token, p.k.stride_col}};
        load_tiles<XT, kBT, 2>(qk_dst, qk_src, 2, kLd, L, k_count, false);
      }
      __syncthreads();
      const float* G_tile = sm.dO;
      const float* Q_tile = sm.Vn;
      const float* K_tile = sm.dV;
      const int k = k0 + lane;
      const bool col_ok = lane < k_count;
      const float gn = G_tile[(L - 1) * kLd + lane];  // gn = G[L-1]: the last valid row
      float dk0[kRows];                               // dK0 = (Vn·dSᵀ) ⊙ exp2(gn − G)
      float e_beta[kRows];                            // E ⊙ β
      float kg[kRows];                                // KG = Kk ⊙ E
      float dg_first[kRows];  // Q ⊙ dQ − Kk ⊙ dK0  (dg before the dkgb term)
      float kdk_sum = 0.0f;   // Σ over the thread's rows of Kk ⊙ dK0
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int i = row0 + m;
        float dw = 0.0f;
        dk0[m] = e_beta[m] = kg[m] = dg_first[m] = 0.0f;
        // Rows >= L and columns >= K stay exactly zero (never 0 · exp2(...) on padding).
        if (i < L && col_ok) {
          const float G = G_tile[i * kLd + lane];
          const float Q = Q_tile[i * kLd + lane];
          const float Kk = K_tile[i * kLd + lane];
          const float E = exp2f(G);
          const float dq = dq_acc[m] * E * p.scale;
          dk0[m] = dk0_acc[m] * exp2f(gn - G);
          dw = -dw_acc[m];
          kg[m] = Kk * E;
          e_beta[m] = E * sm.beta[i];
          dg_first[m] = fmaf(Q, dq, -(Kk * dk0[m]));
          kdk_sum = fmaf(Kk, dk0[m], kdk_sum);
          p.dq[out_row(i) * p.K + k] = dq;
        }
        sm.dW[i * kLd + lane] = dw;
        sm.KG[i * kLd + lane] = kg[m];
      }
      sm.part[warp * 32 + lane] = kdk_sum;
      __syncthreads();  // dW, KG and the partial sums are complete

      // Step 5: dkgb = Āᵀ·dW.
      float dkgb[kRows];
      abar_t_times(sm, row0, sm.dW + lane, dkgb);
      // Step 11, second term: D[i][j] += Σ_k dW[i][k] KG[j][k] over this block's 32 k.
      add_row_products(sm, sm.dW, sm.KG, row0, lane);
      // Steps 6 (second term), 7, 8, 9.
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int i = row0 + m;
        if (i < L && col_ok) {
          db_part[m] = fmaf(dkgb[m], kg[m], db_part[m]);
          const float dk = fmaf(dkgb[m], e_beta[m], dk0[m]);
          float dg = fmaf(kg[m] * dkgb[m], sm.beta[i], dg_first[m]);
          if (i == L - 1) {
            // dgk = exp2(gn) ⊙ Σ_v S⊙dS + Σ_i Kk⊙dK0, the row sum taken over warps in order.
            float dgk = exp2f(gn) * sds;
#pragma unroll
            for (int wp = 0; wp < Tr::kWarps; ++wp) dgk += sm.part[wp * 32 + lane];
            dg += dgk;
          }
          const int64_t out = out_row(i) * p.K + k;
          p.dk[out] = dk;
          p.dg[out] = dg;
        }
      }
    }

    // --- db: each row's sum over lanes, by a fixed butterfly; lane 0's sum is written --------
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      float sum = db_part[m];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
      const int i = row0 + m;
      if (lane == 0 && i < L) p.db[out_row(i)] = sum;
    }

    // --- steps 11, 12: X = strict-lower(D) ⊙ β[j]; dA = −strict-lower(Āᵀ · X · Āᵀ) ---------
    // X in place of D: each thread rewrites only its own entries.
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const int i = row0 + m;
#pragma unroll
      for (int jj = 0; jj < kDCols; ++jj) {
        const int j = lane + 32 * jj;
        if (j < kBT) {
          float& d = sm.D[i * kALd + j];
          d = (i > j && i < L) ? d * sm.beta[j] : 0.0f;
        }
      }
    }
    __syncthreads();  // X is complete, and the token tiles are dead: Y takes their place
    // Y = X · Āᵀ:  Y[i][j] = Σ_n X[i][n] Ā[j][n]  (row i of X broadcast, row j of Ā per lane).
    {
      float y[kRows][kDCols];
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
#pragma unroll
        for (int jj = 0; jj < kDCols; ++jj) y[m][jj] = 0.0f;
      }
#pragma unroll 4
      for (int n = 0; n < kBT; n += 4) {
        float4 aj[kDCols];
#pragma unroll
        for (int jj = 0; jj < kDCols; ++jj) {
          const int j = lane + 32 * jj;
          aj[jj] = j < kBT ? load_float4(sm.A + j * kALd + n) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          const float4 xi = load_float4(sm.D + (row0 + m) * kALd + n);
#pragma unroll
          for (int jj = 0; jj < kDCols; ++jj) y[m][jj] = dot4_acc(xi, aj[jj], y[m][jj]);
        }
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
#pragma unroll
        for (int jj = 0; jj < kDCols; ++jj) {
          const int j = lane + 32 * jj;
          if (j < kBT) sm.Y[(row0 + m) * kALd + j] = y[m][jj];
        }
      }
    }
    __syncthreads();
    // Z = Āᵀ · Y:  Z[i][j] = Σ_n Ā[n][i] Y[n][j];  dA[i][j] = −Z[i][j] for j < i, else 0.
    {
      float z[kRows][kDCols];
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
#pragma unroll
        for (int jj = 0; jj < kDCols; ++jj) z[m][jj] = 0.0f;
      }
#pragma unroll 4
      for (int n = 0; n < kBT; ++n) {
        float a[kRows];
        load_row(sm.A + n * kALd + row0, a);
#pragma unroll
        for (int jj = 0; jj < kDCols; ++jj) {
          const int j = lane + 32 * jj;
          const float ynj = j < kBT ? sm.Y[n * kALd + j] : 0.0f;
#pragma unroll
          for (int m = 0; m < kRows; ++m) z[m][jj] = fmaf(a[m], ynj, z[m][jj]);
        }
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const int i = row0 + m;
        if (i >= L) continue;
        const int64_t out = out_row(i) * kBT;
#pragma unroll
        for (int jj = 0; jj < kDCols; ++jj) {
          const int j = lane + 32 * jj;
          if (j < kBT) p.dA[out + j] = j < i ? -z[m][jj] : 0.0f;
        }
      }
    }
  }
}

}  // namespace kda::cuda
