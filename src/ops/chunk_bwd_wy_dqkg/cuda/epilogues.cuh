#pragma once
// Elementwise pieces shared by chunk_bwd_wy_dqkg's two tensor-core kernels, sm80_mma (16-bit X,
// mma.sync m16n8k16 or wgmma) and tf32x3 (float32 X, 3xTF32). Both keep every accumulator in the
// C-fragment layout of mma.sync (rows m0 + grp and m0 + grp + 8 of the warp's row block, columns
// 2 quad and 2 quad + 1 of each n8 tile), so the float32 math around their products is one code:
// the slab's Σ S⊙dS, the K loop's epilogue inputs, and phase 2's db, X, Y and dA stores. What
// differs is passed in: the element type X of the shared tiles (float, __half or
// __nv_bfloat16) and their pitches. Each kernel's README walks through one unit; the step
// numbers are SPEC.md's.
//
// The kernels' SASS is the same as when this code was written out in each of them (checked with
// cuobjdump for every instantiation). That took some care, and is why the pieces are cut as they
// are: the epilogue inputs are the caller's arrays (a struct of them changed register
// allocation); the products and barriers of phase 2 stay in the kernels; phase 0's dv_out/db and
// the K loop's first epilogue half are still written out in each kernel (as helpers they moved
// instructions in the sm80_mma SASS); the second half is one helper (epilogue_dk_dg), with every
// kernel's SASS unchanged.

#include <cstdint>
#include <type_traits>

#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tf32_mma.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/unit.cuh"

namespace kda::cuda::wy {

// --- pairs of X: columns c, c + 1 of a row, as float32 --------------------------------------

// A pair as loaded from global memory before it is widened: float2, or the two 16-bit halves of
// one 32-bit word.
template <typename XT>
using RawPair = std::conditional_t<std::is_same_v<XT, float>, float2, uint32_t>;

template <typename XT>
__device__ __forceinline__ RawPair<XT> ldg_pair(const XT* at) {
  return __ldg(reinterpret_cast<const RawPair<XT>*>(at));
}

// The pair as stored: rounded to X (to nearest) for 16-bit X. Written as
// `pair_at<XT>(address) = pack_pair<XT>(lo, hi)`: the right side is evaluated first (C++17), as
// in the kernels before these helpers; the other order moved instructions in the SASS.
template <typename XT>
__device__ __forceinline__ RawPair<XT> pack_pair(float lo, float hi) {
  if constexpr (std::is_same_v<XT, float>) {
    return make_float2(lo, hi);
  } else {
    return mma::pack2<XT>(lo, hi);
  }
}

template <typename XT>
__device__ __forceinline__ RawPair<XT>& pair_at(XT* at) {
  return *reinterpret_cast<RawPair<XT>*>(at);
}

// The warp's place in the CTA's tiles and the lane's in the C fragments.
struct WarpPos {
  int cg;    // column group
  int rb;    // row block
  int m0;    // first row of the row block (16 rb)
  int grp;   // fragment row within 8 (lane / 4)
  int quad;  // fragment column pair (lane % 4)
};

// --- Σ_v S⊙dS of a slab, in float32, for each k -----------------------------------------------

// Whether the kernel's traits permute a warp's two n8 tiles into quad columns (the 16-bit
// kernel's slab pairs and the 3xTF32 kernel at BT = 64); false for traits without the member.
template <typename Tr>
inline constexpr bool kQuadCols = [] {
  if constexpr (requires { Tr::kQuadCols; }) {
    return Tr::kQuadCols;
  } else {
    return false;
  }
}();

// Where Σ S⊙dS of slab row k is written: at k, or with quad columns (traits with kQuadCols:
// the 16-bit and the 3xTF32 kernels) at the row's slab position, the accumulator column the
// epilogue reads it at (one lane offset for all of the epilogue's shared-memory reads: the
// float32-h model kernel's K loop is spill-free that way, and spilled 40 bytes reading it at k).
template <typename Tr>
__device__ __forceinline__ int sds_pos(int k) {
  if constexpr (kQuadCols<Tr>) {
    return Tr::slab_row_pos(k);
  } else {
    return k;
  }
}

// One chunk of kChunkElems elements, (row, ch) of the slab as issue_slab copied it, S in s and dS
// in ds. k-first slabs: the lanes of a warp that share a k row reduce by butterfly and
// sds_out[k_row0 + row] = the sum; state_v_first: accumulated into col_sum (sds_finish).
// Called for all of a warp's lanes at once (the shuffles see whole warps).
template <typename Tr>
__device__ __forceinline__ void sds_add_chunk(const float (&s)[Tr::kChunkElems],
                                              const float (&ds)[Tr::kChunkElems], int row, int ch,
                                              int k_row0, float (&col_sum)[Tr::kChunkElems],
                                              float* sds_out) {
  constexpr int kE = Tr::kChunkElems;
  constexpr unsigned kFullMask = 0xffffffffu;
  if constexpr (!Tr::kStateVFirst) {
    float part = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) part = fmaf(s[e], ds[e], part);
      // The kChunksPerRow lanes of one k row are an aligned group of the warp.
#pragma unroll
    for (int offset = Tr::kChunksPerRow / 2; offset > 0; offset /= 2) {
      part += __shfl_xor_sync(kFullMask, part, offset);
    }
    if (ch == 0) sds_out[sds_pos<Tr>(k_row0 + row)] = part;
  } else {
#pragma unroll
    for (int e = 0; e < kE; ++e) col_sum[e] = fmaf(s[e], ds[e], col_sum[e]);
  }
}

// One chunk's share of Σ S⊙dS: with kTransposed its own sum, kept in `part` for
// sds_reduce_rows (below) to reduce with the thread's other chunks; otherwise sds_add_chunk.
template <typename Tr, bool kTransposed>
__device__ __forceinline__ void sds_chunk(const float (&s)[Tr::kChunkElems],
                                          const float (&ds)[Tr::kChunkElems], int row, int ch,
                                          int k_row0, float (&col_sum)[Tr::kChunkElems],
                                          float* sds_out, float& part) {
  if constexpr (kTransposed) {
    float sum = 0.0f;
#pragma unroll
    for (int e = 0; e < Tr::kChunkElems; ++e) sum = fmaf(s[e], ds[e], sum);
    part = sum;
  } else {
    sds_add_chunk<Tr>(s, ds, row, ch, k_row0, col_sum, sds_out);
  }
}

// k-first slabs whose kN = kSlabIters chunks per thread are all in registers (part[n]: this
// lane's Σ over its chunk n of S⊙dS): the sums of the kN rows a warp holds, reduced over the
// kChunksPerRow lanes of each row with one transposed butterfly instead of kN separate ones.
// At each of the first log2(kN) steps a lane keeps half of its values (the upper half where its
// lane bit is set) and adds its partner's copy of the same half: kN − 1 shuffles in all for
// those steps, then one per remaining lane bit (BT = 16, V = 128: 9 shuffles for 8 rows instead
// of 40). The lane whose bits below the last halving step are zero then holds the sum of chunk
// n = its halving bits read as a number, row (tid / kChunksPerRow) + n · kThreads /
// kChunksPerRow of the slab, and writes sds_out[k_row0 + row]. Fixed order: deterministic.
template <typename Tr>
inline constexpr bool kTransposedSds =
    !Tr::kStateVFirst && Tr::kSlabIters >= 2 && (Tr::kSlabIters & (Tr::kSlabIters - 1)) == 0 &&
    Tr::kSlabChunks % Tr::kThreads == 0 && Tr::kSlabIters <= Tr::kChunksPerRow &&
    Tr::kChunksPerRow <= 32;

template <typename Tr>
__device__ __forceinline__ void sds_reduce_rows(float (&part)[Tr::kSlabIters], int k_row0,
                                                float* sds_out, int tid) {
  constexpr unsigned kFullMask = 0xffffffffu;
  constexpr int kN = Tr::kSlabIters;
  constexpr int kLanes = Tr::kChunksPerRow;  // lanes of one row: lane bits [0, log2(kLanes))
  const int lane = tid % 32;
  int n = 0;    // the chunk index this lane's value[0] stands for, once the halving is done
  int m = kN;   // values still held
  int low = 1;  // the lowest lane bit a halving step used
#pragma unroll
  for (int o = kLanes / 2; o > 0; o /= 2) {
    if (m > 1) {
      const bool upper = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) {
        if (i < m / 2) {
          const float send = upper ? part[i] : part[i + m / 2];
          const float keep = upper ? part[i + m / 2] : part[i];
          part[i] = keep + __shfl_xor_sync(kFullMask, send, o);
        }
      }
      m /= 2;
      if (upper) n += m;
      low = o;
    } else {
      part[0] += __shfl_xor_sync(kFullMask, part[0], o);
    }
  }
  // Lanes that differ only in bits below `low` hold the same sum once the plain steps are done;
  // the one with those bits zero writes it.
  if ((lane & (low - 1)) == 0) {
    const int row = tid / kLanes + n * (Tr::kThreads / kLanes);
    sds_out[sds_pos<Tr>(k_row0 + row)] = part[0];
  }
}

// state_v_first, after the thread's last chunk: per-warp partials,
// sds_out[warp * kSlabK + k_row0 + k] (summed over warps by the reader, in warp order).
template <typename Tr>
__device__ __forceinline__ void sds_finish(float (&col_sum)[Tr::kChunkElems], int k_row0,
                                           float* sds_out, int warp, int lane) {
  constexpr int kE = Tr::kChunkElems;
  constexpr unsigned kFullMask = 0xffffffffu;
  if constexpr (Tr::kStateVFirst) {
    // Lanes with equal lane % kChunksPerRow hold the same k columns: reduce across the others.
#pragma unroll
    for (int e = 0; e < kE; ++e) {
#pragma unroll
      for (int offset = Tr::kChunksPerRow; offset < 32; offset *= 2) {
        col_sum[e] += __shfl_xor_sync(kFullMask, col_sum[e], offset);
      }
    }
    if (lane < Tr::kChunksPerRow) {
#pragma unroll
      for (int e = 0; e < kE; ++e) {
        sds_out[warp * Tr::kSlabK + k_row0 + lane * kE + e] = col_sum[e];
      }
    }
  }
}

// --- the K loop's epilogues -------------------------------------------------------------------

// Epilogue inputs at this thread's C-fragment positions: rows i_h = m0 + grp + 8h, columns
// kc_j, kc_j + 1 of each of the warp's n8 tiles j (kl_j within the slab); g, q, k are 0 on rows
// >= L, gn is g of the chunk's last row L - 1. Arrays of the caller rather than one struct: in a
// struct the K loop's SASS changed (tf32x3, BT = 16).
template <typename Tr, typename XT>
__device__ __forceinline__ void load_epilogue_inputs(
    int (&kl)[Tr::kWarpTiles], int (&kc)[Tr::kWarpTiles], float2 (&g_in)[Tr::kWarpTiles][2],
    RawPair<XT> (&q_in)[Tr::kWarpTiles][2], RawPair<XT> (&k_in)[Tr::kWarpTiles][2],
    float2 (&gn)[Tr::kWarpTiles], const LoopStrides& st, int k0, int L, const WarpPos& w) {
  if constexpr (kQuadCols<Tr>) {
    // Quad columns (the traits' slab_row_pos): tile j's columns are k 4 quad + 2 j (+ 1), so a
    // row's four values are one access of both tiles.
    static_assert(Tr::kWarpTiles == 2, "two n8 tiles per warp");
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      kl[j] = w.cg * Tr::kWarpK + 8 * j + 2 * w.quad;
      kc[j] = k0 + w.cg * Tr::kWarpK + 4 * w.quad + 2 * j;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = w.m0 + w.grp + 8 * h;
      float4 g4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      // g's load stays inside each branch: hoisted above them it changes the SASS of all 18
      // quad-column kernels away from the code that was measured and tested on the GPU.
      if constexpr (std::is_same_v<XT, float>) {
        float4 q4 = g4;
        float4 k4 = g4;
        if (i < L) {
          g4 = __ldg(reinterpret_cast<const float4*>(st.g + (i * st.g_row + kc[0])));
          q4 = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(st.q) +
                                                     (i * st.q_row + kc[0])));
          k4 = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(st.k) +
                                                     (i * st.k_row + kc[0])));
        }
        g_in[0][h] = make_float2(g4.x, g4.y);
        g_in[1][h] = make_float2(g4.z, g4.w);
        q_in[0][h] = make_float2(q4.x, q4.y);
        q_in[1][h] = make_float2(q4.z, q4.w);
        k_in[0][h] = make_float2(k4.x, k4.y);
        k_in[1][h] = make_float2(k4.z, k4.w);
      } else {
        uint2 q2 = make_uint2(0u, 0u);
        uint2 k2 = make_uint2(0u, 0u);
        if (i < L) {
          g4 = __ldg(reinterpret_cast<const float4*>(st.g + (i * st.g_row + kc[0])));
          q2 = __ldg(reinterpret_cast<const uint2*>(static_cast<const XT*>(st.q) +
                                                    (i * st.q_row + kc[0])));
          k2 = __ldg(reinterpret_cast<const uint2*>(static_cast<const XT*>(st.k) +
                                                    (i * st.k_row + kc[0])));
        }
        g_in[0][h] = make_float2(g4.x, g4.y);
        g_in[1][h] = make_float2(g4.z, g4.w);
        q_in[0][h] = q2.x;
        q_in[1][h] = q2.y;
        k_in[0][h] = k2.x;
        k_in[1][h] = k2.y;
      }
    }
    const float4 gn4 = __ldg(reinterpret_cast<const float4*>(st.g + ((L - 1) * st.g_row + kc[0])));
    gn[0] = make_float2(gn4.x, gn4.y);
    gn[1] = make_float2(gn4.z, gn4.w);
  } else {
#pragma unroll
    for (int j = 0; j < Tr::kWarpTiles; ++j) {
      kl[j] = w.cg * Tr::kWarpK + 8 * j + 2 * w.quad;
      kc[j] = k0 + kl[j];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = w.m0 + w.grp + 8 * h;
        g_in[j][h] = make_float2(0.0f, 0.0f);
        q_in[j][h] = RawPair<XT>{};
        k_in[j][h] = RawPair<XT>{};
        if (i < L) {
          g_in[j][h] = __ldg(reinterpret_cast<const float2*>(st.g + (i * st.g_row + kc[j])));
          q_in[j][h] = ldg_pair<XT>(static_cast<const XT*>(st.q) + (i * st.q_row + kc[j]));
          k_in[j][h] = ldg_pair<XT>(static_cast<const XT*>(st.k) + (i * st.k_row + kc[j]));
        }
      }
      gn[j] = __ldg(reinterpret_cast<const float2*>(st.g + ((L - 1) * st.g_row + kc[j])));
    }
  }
}

// Epilogue 2's extra term of dg on the chunk's last row (step 9): dgk = exp2(gn) ⊙ Σ_v S⊙dS +
// Σ_i Kk⊙dK0 at slab column `col`, the partial sums added in a fixed order (Σ S⊙dS's parts at
// sds_pos, as written; the row blocks' Σ Kk⊙dK0 in sKdk[kRowBlocks][kSlabK]).
template <typename Tr>
__device__ __forceinline__ float last_row_dgk(const float* sds, const float* sKdk, int col,
                                              float gn) {
  float sds_sum = 0.0f;
#pragma unroll
  for (int part = 0; part < Tr::kSdsParts; ++part) sds_sum += sds[part * Tr::kSlabK + col];
  float kdk_sum = 0.0f;
#pragma unroll
  for (int r = 0; r < Tr::kRowBlocks; ++r) kdk_sum += sKdk[r * Tr::kSlabK + col];
  return fmaf(exp2f(gn), sds_sum, kdk_sum);
}

// A quad-column row's four values (tile 0's two columns, then tile 1's) as one 16-byte store at
// `out`, the row's column kc[0].
__device__ __forceinline__ void store_quad_row(float* out, const float (&v)[2][2]) {
  *reinterpret_cast<float4*>(out) = make_float4(v[0][0], v[0][1], v[1][0], v[1][1]);
}

// Epilogue 1's dq of tile j on row i: stored as the tile's pair, or with quad columns kept in
// dq_row from tile 0 and stored with tile 1's as the row's four columns kc[0] .. kc[0] + 3.
template <typename Tr, int kTiles>
__device__ __forceinline__ void store_dq(const LoopStrides& st, int i, int j, bool valid,
                                         const int (&kc)[kTiles], const float (&dq)[2],
                                         float (&dq_row)[2]) {
  if constexpr (Tr::kQuadCols) {
    if (j == 0) {
      dq_row[0] = dq[0];
      dq_row[1] = dq[1];
    } else if (valid) {
      const float row[2][2] = {{dq_row[0], dq_row[1]}, {dq[0], dq[1]}};
      store_quad_row(st.dq + (i * st.out_row + kc[0]), row);
    }
  } else if (valid) {
    *reinterpret_cast<float2*>(st.dq + (i * st.out_row + kc[j])) = make_float2(dq[0], dq[1]);
  }
}

// Epilogue 2 of a slab (steps 6's second term, 7, 8, 9) for the thread's two rows row0 and
// row0 + 8: dk, dg from dkgb = Āᵀ·dW (acc_kgb) and epilogue 1's kg, eb, dk0, dgf; db's terms into
// db_part; dk, dg stored (a quad-column row in one 16-byte store per output). The same code for
// the 16-bit and the 3xTF32 kernels (their SASS is what it was when written out in each).
template <typename Tr, int kTiles>
__device__ __forceinline__ void epilogue_dk_dg(
    float (&db_part)[2], const float (&acc_kgb)[kTiles][4], const float (&kg)[kTiles][2][2],
    const float (&eb)[kTiles][2][2], const float (&dk0)[kTiles][2][2],
    const float (&dgf)[kTiles][2][2], const float2 (&gn)[kTiles], const int (&kl)[kTiles],
    const int (&kc)[kTiles], const float* sBeta, const float* sds, const float* sKdk,
    const LoopStrides& st, int row0, int L) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = row0 + 8 * h;
    if (i >= L) continue;
    const float beta_i = sBeta[i];
    float dk_row[kTiles][2];  // quad columns: the row's values, stored after the tiles
    float dg_row[kTiles][2];
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      float dk[2];
      float dg[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float dkgb = acc_kgb[j][2 * h + e];
        db_part[h] = fmaf(dkgb, kg[j][h][e], db_part[h]);
        dk[e] = fmaf(dkgb, eb[j][h][e], dk0[j][h][e]);
        dg[e] = fmaf(kg[j][h][e] * dkgb, beta_i, dgf[j][h][e]);
        if (i == L - 1) {
          dg[e] += wy::last_row_dgk<Tr>(sds, sKdk, kl[j] + e, e == 0 ? gn[j].x : gn[j].y);
        }
      }
      if constexpr (Tr::kQuadCols) {
        dk_row[j][0] = dk[0], dk_row[j][1] = dk[1];
        dg_row[j][0] = dg[0], dg_row[j][1] = dg[1];
      } else {
        const int out = i * st.out_row + kc[j];
        *reinterpret_cast<float2*>(st.dk + out) = make_float2(dk[0], dk[1]);
        *reinterpret_cast<float2*>(st.dg + out) = make_float2(dg[0], dg[1]);
      }
    }
    if constexpr (Tr::kQuadCols) {
      const int out = i * st.out_row + kc[0];
      wy::store_quad_row(st.dk + out, dk_row);
      wy::store_quad_row(st.dg + out, dg_row);
    }
  }
}

// --- phase 2: db, steps 11, 12 ----------------------------------------------------------------
// The products (Y = X·Āᵀ, Z = Āᵀ·Y) and the barriers stay in the kernels; these are the
// elementwise steps around them.

// db, first step: the lanes' shares summed over the quad lanes; sDb[cg][row] (the two column
// groups are added after the barrier, in a fixed order).
__device__ __forceinline__ void store_db_parts(const float (&db_part)[2], float* sDb, int bt,
                                               const WarpPos& w) {
  constexpr unsigned kFullMask = 0xffffffffu;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = db_part[h];
    sum += __shfl_xor_sync(kFullMask, sum, 1);
    sum += __shfl_xor_sync(kFullMask, sum, 2);
    if (w.quad == 0) sDb[w.cg * bt + w.m0 + w.grp + 8 * h] = sum;
  }
}

// X = strict-lower(D) ⊙ β[j] (0 on rows >= L) from acc_D = D, into sX (pitch kXLd).
template <typename Tr, int kXLd, typename XT>
__device__ __forceinline__ void store_x(const float (&acc_D)[Tr::kJTiles][4], XT* sX,
                                        const float* sBeta, int L, const WarpPos& w) {
#pragma unroll
  for (int nt = 0; nt < Tr::kJTiles; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = w.m0 + w.grp + 8 * h;
      const int j = w.cg * Tr::kWarpJ + 8 * nt + 2 * w.quad;
      const float x0 = (i > j && i < L) ? acc_D[nt][2 * h] * sBeta[j] : 0.0f;
      const float x1 = (i > j + 1 && i < L) ? acc_D[nt][2 * h + 1] * sBeta[j + 1] : 0.0f;
      pair_at<XT>(sX + i * kXLd + j) = pack_pair<XT>(x0, x1);
    }
  }
}

// Y = acc_Y into sY (pitch kYLd), rounded to X.
template <typename Tr, int kYLd, typename XT>
__device__ __forceinline__ void store_y(const float (&acc_Y)[Tr::kJTiles][4], XT* sY,
                                        const WarpPos& w) {
#pragma unroll
  for (int nt = 0; nt < Tr::kJTiles; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = w.m0 + w.grp + 8 * h;
      const int j = w.cg * Tr::kWarpJ + 8 * nt + 2 * w.quad;
      pair_at<XT>(sY + i * kYLd + j) = pack_pair<XT>(acc_Y[nt][2 * h], acc_Y[nt][2 * h + 1]);
    }
  }
}

// dA[i][j] = −Z[i][j] for j < i, else 0, from acc_Z = Z = Āᵀ·Y; rows < L. out_row(i) is the
// output row of chunk row i.
template <typename Tr, typename OutRow>
__device__ __forceinline__ void store_da(const float (&acc_Z)[Tr::kJTiles][4],
                                         const WyDqkgParams& p, OutRow out_row, int L,
                                         const WarpPos& w) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = w.m0 + w.grp + 8 * h;
    if (i >= L) continue;
    const int64_t out = out_row(i) * Tr::kBT;
#pragma unroll
    for (int nt = 0; nt < Tr::kJTiles; ++nt) {
      const int j = w.cg * Tr::kWarpJ + 8 * nt + 2 * w.quad;
      *reinterpret_cast<float2*>(p.dA + out + j) =
          make_float2(j < i ? -acc_Z[nt][2 * h] : 0.0f, j + 1 < i ? -acc_Z[nt][2 * h + 1] : 0.0f);
    }
  }
}

}  // namespace kda::cuda::wy
