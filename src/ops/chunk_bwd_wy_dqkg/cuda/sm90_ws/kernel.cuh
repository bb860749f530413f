#pragma once
// v3 of chunk_kda_bwd_wy_dqkg_fused for 16-bit X at BT = 64, K = V = 128 (issue 12): a
// persistent, warp-specialized Hopper kernel. One CTA per SM walks the units u = blockIdx.x +
// n * gridDim.x; one warp of its producer warpgroup issues every input tile as a bulk tensor copy
// (TMA) into shared memory as soon as the consumers release the buffer, so the next unit's tiles
// stream in while this one computes; two consumer warpgroups only compute.
//
// The products are "k-major" (../shared/research/v3-design-research.md §4): warpgroup w owns
// k in [64 w, 64 w + 64) and computes dQᵀ = S·dOᵀ, dWᵀ = −S·dVᵀ and dK0ᵀ = dS·Vnᵀ (k x t, over
// v) with h and dh as the register A operand of wgmma (converted from float32 in registers, or
// loaded as they are), and dO, dV, Vn read by the tensor cores from swizzled shared memory. h
// streams through a two-slot ring of v slices (128 k x 128 bytes of v). Σ_v S⊙dS comes from the
// same registers; every elementwise step of SPEC.md (dq, dk, dg, dgk) happens at the
// accumulators' positions. Rounded to X before a product, as fla does: h and dh, dW, KG, X, Y.
//
// Per unit, the consumers' phases and the buffers each releases to the producer:
//   A  the three big products over the ring                          -> dO, Vn, ring slots
//   0  Āᵀ (made from Ā), dvbᵀ = dVᵀ·Ā (dv_out, db), D = dV·Vvᵀ       -> dV, Vv
//   E  epilogue: dq; dK0; dkgbᵀ = dWᵀ·Ā; dk, dg, db; dW, KG stored    -> g, q
//   D  D += dW·KGᵀ; X; Y = X·Āᵀ; Z = Āᵀ·Y; dA                        -> k, Ā
// Every product operand is K-major with the 128-byte swizzle (wgmma.cuh's descriptors); the
// consumers write Āᵀ, dW, KG, X and Yᵀ themselves in that layout.
//
// Rows >= L of a short chunk: the token tiles hold whatever follows the chunk (the next
// sequence's rows, or zeros past the tensor); every value computed from them is masked in
// registers before it can reach a valid output, and Ā is zeroed outside L x L in shared memory
// (as v2 zero-fills it), so that no 0 · NaN reaches a valid row.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/common/device_access.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/sm90_ws/maps.hpp"
#include "ops/chunk_bwd_wy_dqkg/cuda/unit.cuh"

namespace kda::cuda {
namespace ws {

inline constexpr int kBT = 64;
inline constexpr int kK = 128;
inline constexpr int kV = 128;
inline constexpr int kConsumerThreads = 256;             // two warpgroups
inline constexpr int kThreads = kConsumerThreads + 128;  // and the producer warpgroup
// Registers per thread (setmaxnreg): the producer warpgroup gives up what the consumers take
// (128 * 40 + 256 * 232 <= 65536). Compiled for 384 threads, ptxas would otherwise hold every
// thread to 168.
inline constexpr int kProducerRegs = 40;
inline constexpr int kConsumerRegs = 232;
inline constexpr int kAtom = 64 * 128;    // bytes: 64 rows of 128 bytes
inline constexpr int kTile = 2 * kAtom;   // a [64][128] 16-bit tile
inline constexpr int kSlice = 128 * 128;  // one h slice: 128 k x 128 bytes
inline constexpr int kSliceRing = 2;      // ring slots
inline constexpr unsigned kFullMask = 0xffffffffu;
// Named barrier of the 256 consumer threads (2, 3: each warpgroup alone).
inline constexpr int kBarAll = 1;

// The tiles the producer fills (full[b] / empty[b] per buffer, one use per unit).
enum Buf : int { kDo, kVn, kDv, kVv, kQ, kKk, kG, kA, kBufs };

struct alignas(1024) Tiles {
  unsigned char dO[kTile];                    // [t][v], two atoms of 64 v
  unsigned char Vn[kTile];                    // [t][v]
  unsigned char dV[kTile];                    // [t][v]
  unsigned char Vv[kTile];                    // [t][v]
  unsigned char q[kTile];                     // [t][k]
  unsigned char k[kTile];                     // [t][k]; in phase D: KG [j][k]
  unsigned char g[2 * kTile];                 // float32 [t][k], four atoms of 32 k
  unsigned char A[kAtom];                     // Ā [i][j] as stored (zeroed outside L x L)
  unsigned char At[kAtom];                    // Āᵀ: [j][i]
  unsigned char X[kAtom];                     // X [i][n]; in phases E, D (with Yt): dW [i][k]
  unsigned char Yt[kAtom];                    // Yᵀ: [j][n]
  unsigned char ring[kSliceRing][2][kSlice];  // [slot][S, dS]: [128 k][128 bytes of v]
};

struct Small {
  float beta[2][kBT];  // per unit parity: β, 0 beyond L
  float db[2][kBT];    // per unit parity: db's sums
  uint64_t full[kBufs];
  uint64_t empty[kBufs];
  uint64_t ring_full[kSliceRing];
  uint64_t ring_empty[kSliceRing];
};

static_assert(offsetof(Tiles, Yt) == offsetof(Tiles, X) + kAtom, "dW spans X and Yt as one tile");

inline constexpr int kSmemBytes = static_cast<int>(sizeof(Tiles) + sizeof(Small)) + 1024;

// h slices: v per slice (128 bytes of HT), slices per unit, k16 steps per slice.
template <typename HT>
struct Slices {
  static constexpr int kSliceV = 128 / static_cast<int>(sizeof(HT));
  static constexpr int kCount = kV / kSliceV;
  static constexpr int kSteps = kSliceV / 16;
};

// Byte offset of (row, byte `b` < 128 of the row) in a 128-byte-swizzled atom.
__device__ __forceinline__ int sw(int row, int b) {
  return wgmma::swizzle128_offset(row, b);
}
// Byte offset of 16-bit element (row, col) of a [64][128] tile (two atoms of 64 columns).
__device__ __forceinline__ int tile16(int row, int col) {
  return (col >> 6) * kAtom + sw(row, (col & 63) * 2);
}
// Byte offset of float32 element (row, col) of the g tile (four atoms of 32 columns).
__device__ __forceinline__ int tile32(int row, int col) {
  return (col >> 5) * kAtom + sw(row, (col & 31) * 4);
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// K-major descriptor of k16 step s of a tile of two atoms (K = 128 16-bit elements).
__device__ __forceinline__ uint64_t desc128(const void* tile, int s) {
  return wgmma::k_major_sw128_desc_step(tile, kAtom, s);
}
// ... of a one-atom tile (K = 64).
__device__ __forceinline__ uint64_t desc64(const void* tile, int s) {
  return wgmma::k_major_sw128_desc(tile, 32 * s);
}

// acc (64 x 32) = A · B over K = 64, both one K-major atom in shared memory (A's 64 rows, B's 32
// from b), waited for: phase D's Y and Z.
template <typename XT>
__device__ __forceinline__ void product_k64(float (&acc)[16], const void* a, const void* b) {
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) wgmma::mma_m64n32k16<XT>(acc, desc64(a, s), desc64(b, s), s > 0);
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::fence_operands(acc);
}

// Adds a warp's terms of db to the unit's sums: part[j][e] is this lane's sum over its rows for
// column t = 8 j + 2 quad + e; the lanes sharing quad are reduced, and their first adds it.
__device__ __forceinline__ void add_db_columns(float (&part)[8][2], float* dbs, int grp, int quad) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int o = 4; o < 32; o *= 2) part[j][e] += __shfl_xor_sync(kFullMask, part[j][e], o);
      if (grp == 0) atomicAdd(&dbs[8 * j + 2 * quad + e], part[j][e]);
    }
  }
}

// A unit as every warp sees it (resolved by the warp, lane 0's answer broadcast).
struct Unit {
  int64_t batch;     // batch row (0 when varlen)
  int64_t t0;        // first token of the chunk within it
  int64_t row;       // token row of the chunk's first row in [B*T]
  int64_t out_row0;  // its row in the outputs viewed as [B*T*HV, cols]
  int64_t h_index;   // h's chunk in [B*NT]
  int hv;
  int hq;
  int len;
  bool valid;
};

__device__ __forceinline__ Unit load_unit(const WyDqkgParams& p, const WyDqkgMaps& m, int64_t unit,
                                          int lane) {
  const WorkUnit w = resolve_unit(p, unit, kBT, lane);
  Unit u;
  u.valid = __shfl_sync(kFullMask, static_cast<int>(w.valid), 0) != 0;
  u.batch = __shfl_sync(kFullMask, w.batch, 0);
  u.t0 = __shfl_sync(kFullMask, w.t0, 0);
  u.row = u.batch * p.T + u.t0;
  u.hv = static_cast<int>(__shfl_sync(kFullMask, w.hv, 0));
  u.hq = static_cast<int>(u.hv / p.heads_per_group);
  u.len = __shfl_sync(kFullMask, w.len, 0);
  u.out_row0 = u.row * p.HV + u.hv;
  u.h_index = __shfl_sync(kFullMask, w.h_batch, 0) * m.h_nt + __shfl_sync(kFullMask, w.h_chunk, 0);
  return u;
}

}  // namespace ws

template <typename XT, typename HT>
__global__ void __launch_bounds__(ws::kThreads, 1)
    wy_dqkg_ws_kernel(const __grid_constant__ WyDqkgParams p,
                      const __grid_constant__ WyDqkgMaps maps) {
  using namespace ws;
  using Sl = Slices<HT>;
  constexpr bool kStateF32 = std::is_same_v<HT, float>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* const base =
      smem_raw + (1024 - tma::smem_address(smem_raw) % 1024) % 1024;  // the swizzle's period
  Tiles& t = *reinterpret_cast<Tiles*>(base);
  Small& sm = *reinterpret_cast<Small*>(base + sizeof(Tiles));

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  if (tid == 0) {
    for (int b = 0; b < kBufs; ++b) {
      tma::barrier_init(&sm.full[b], 1);
      tma::barrier_init(&sm.empty[b], kConsumerThreads);
    }
    for (int s = 0; s < kSliceRing; ++s) {
      tma::barrier_init(&sm.ring_full[s], 1);
      tma::barrier_init(&sm.ring_empty[s], kConsumerThreads);
    }
    tma::barrier_init_fence();
  }
  __syncthreads();

  // ---------------------------------------------------------------- the producer warp
  if (warp >= kConsumerThreads / 32) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (warp != kConsumerThreads / 32) return;  // one warp issues; the other three rest
    int it = 0;                                 // valid units so far
    int ring_n = 0;                             // h slices so far
    for (int64_t unit = blockIdx.x; unit < p.num_units; unit += gridDim.x) {
      const Unit u = load_unit(p, maps, unit, lane);
      if (!u.valid) continue;
      if (lane == 0) {
        const int row = static_cast<int>(u.row);
        // Waits until the consumers released buffer b of the previous unit, then announces it.
        auto claim = [&](int b, uint32_t bytes) {
          if (it > 0) tma::barrier_wait(&sm.empty[b], (it - 1) & 1);
          tma::barrier_arrive_expect(&sm.full[b], bytes);
        };
        // A token tile of `atoms` boxes of 128 bytes of columns (cols_per_atom columns each).
        auto token = [&](int b, unsigned char* dst, const TensorMapBytes& map, int head, int atoms,
                         int cols_per_atom) {
          claim(b, static_cast<uint32_t>(atoms * kAtom));
          for (int a = 0; a < atoms; ++a) {
            tma::copy_tile_4d(dst + a * kAtom, map, &sm.full[b], a * cols_per_atom, head, row, 0);
          }
        };
        auto slice = [&](int n) {
          const int slot = ring_n % kSliceRing;
          const int use = ring_n / kSliceRing;
          if (use > 0) tma::barrier_wait(&sm.ring_empty[slot], (use - 1) & 1);
          tma::barrier_arrive_expect(&sm.ring_full[slot], 2 * kSlice);
          const int hi = static_cast<int>(u.h_index);
          tma::copy_tile_4d(t.ring[slot][0], maps.h, &sm.ring_full[slot], n * Sl::kSliceV, 0, u.hv,
                            hi);
          tma::copy_tile_4d(t.ring[slot][1], maps.dh, &sm.ring_full[slot], n * Sl::kSliceV, 0, u.hv,
                            hi);
          ++ring_n;
        };
        // In the order the consumers release them (phase A: dO, Vn and the ring; phase 0: dV,
        // Vv; E: g, q; D: k, Ā), the first two slices first.
        slice(0);
        slice(1);
        token(kDo, t.dO, maps.do_, u.hv, 2, 64);
        token(kVn, t.Vn, maps.v_new, u.hv, 2, 64);
        token(kDv, t.dV, maps.dv, u.hv, 2, 64);
        token(kVv, t.Vv, maps.v, u.hv, 2, 64);
        token(kG, t.g, maps.g, u.hv, 4, 32);
        token(kQ, t.q, maps.q, u.hq, 2, 64);
        token(kKk, t.k, maps.k, u.hq, 2, 64);
        token(kA, t.A, maps.A, u.hv, 1, 64);
        for (int n = 2; n < Sl::kCount; ++n) slice(n);
      }
      ++it;
    }
    return;
  }

  // ---------------------------------------------------------------- the consumers
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int64_t HVK = p.HV * kK;
  int it = 0;
  int ring_n = 0;
  for (int64_t unit = blockIdx.x; unit < p.num_units; unit += gridDim.x) {
    // The thread's position, re-derived per unit from an opaque copy of its index: hoisted out
    // of the unit loop, the swizzled offsets derived from it were spilled (ptxas -v).
    int ctid = tid;
    asm volatile("" : "+r"(ctid));
    const int wg = ctid / 128;            // warpgroup: k in [64 wg, 64 wg + 64)
    const int wwarp = (ctid % 128) / 32;  // warp within it
    const int ln = ctid % 32;
    const int grp = ln / 4;
    const int quad = ln % 4;
    const int mat = ln / 8;               // ldmatrix / stmatrix: the 8x8 matrix this lane addresses
    const int mrow = ln % 8;              // ... and its row
    const int kb = 64 * wg + 16 * wwarp;  // first k row of the warp (phases A, E)
    const Unit u = load_unit(p, maps, unit, lane);
    if (!u.valid) continue;
    const uint32_t par = it & 1;
    const int L = u.len;
    float* const beta = sm.beta[par];
    float* const dbs = sm.db[par];
    if (tid < kBT) {
      float b = 0.0f;
      if (tid < L) {
        const int64_t off = u.batch * p.beta.stride_batch + (u.t0 + tid) * p.beta.stride_token +
                            u.hv * p.beta.stride_head;
        b = p.beta.is_f32 ? load_float<float>(p.beta.data, off) : load_float<XT>(p.beta.data, off);
      }
      beta[tid] = b;
      dbs[tid] = 0.0f;
    }

    // --- phase A: dQᵀ, dWᵀ (before its sign), dK0ᵀ over the v slices; Σ_v S⊙dS ------------
    float accQ[32];
    float accW[32];
    float accK[32];
    float sds[2] = {0.0f, 0.0f};  // rows kb + grp (+ 8): this lane's share of Σ_v S⊙dS
    tma::barrier_wait(&sm.full[kDo], par);
    tma::barrier_wait(&sm.full[kVn], par);
    tma::barrier_wait(&sm.full[kDv], par);
    {
      uint32_t aS[2][4];
      uint32_t adS[2][4];
#pragma unroll
      for (int s = 0; s < kV / 16; ++s) {
        const int n = s / Sl::kSteps;   // slice
        const int ss = s % Sl::kSteps;  // step within it
        const int slot = (ring_n + n) % kSliceRing;
        if (ss == 0) tma::barrier_wait(&sm.ring_full[slot], ((ring_n + n) / kSliceRing) & 1);
        const int buf = s & 1;
        if (s >= 2) {
          wgmma::wait_group<1>();  // step s - 2's group read buffer `buf`
          wgmma::fence_operands(aS[buf]);
          wgmma::fence_operands(adS[buf]);
        }
        const unsigned char* const S = t.ring[slot][0];
        const unsigned char* const dS = t.ring[slot][1];
        if constexpr (kStateF32) {
          const int c0 = 16 * ss + 2 * quad;
          float2 sv[4];
          float2 dv[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) {  // a[r]: row + 8 (r % 2), column + 8 (r / 2)
            const int off = sw(kb + grp + 8 * (r % 2), 4 * (c0 + 8 * (r / 2)));
            sv[r] = *reinterpret_cast<const float2*>(S + off);
            dv[r] = *reinterpret_cast<const float2*>(dS + off);
            sds[r % 2] = fmaf(sv[r].x, dv[r].x, fmaf(sv[r].y, dv[r].y, sds[r % 2]));
            aS[buf][r] = mma::pack2<XT>(sv[r].x, sv[r].y);
            adS[buf][r] = mma::pack2<XT>(dv[r].x, dv[r].y);
          }
        } else {
          const int off = sw(kb + (mat % 2) * 8 + mrow, 2 * (16 * ss + (mat / 2) * 8));
          mma::ldmatrix_x4(aS[buf], S + off);
          mma::ldmatrix_x4(adS[buf], dS + off);
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float2 a = mma::unpack2<XT>(aS[buf][r]);
            const float2 b = mma::unpack2<XT>(adS[buf][r]);
            sds[r % 2] = fmaf(a.x, b.x, fmaf(a.y, b.y, sds[r % 2]));
          }
        }
        // This thread's reads of the slice are done: the last step of a slice releases it.
        if (ss == Sl::kSteps - 1) tma::barrier_arrive(&sm.ring_empty[slot]);
        wgmma::fence();
        wgmma::mma_m64n64k16_rs<XT>(accQ, aS[buf], desc128(t.dO, s), s > 0);
        wgmma::mma_m64n64k16_rs<XT>(accW, aS[buf], desc128(t.dV, s), s > 0);
        wgmma::mma_m64n64k16_rs<XT>(accK, adS[buf], desc128(t.Vn, s), s > 0);
        wgmma::commit_group();
      }
      wgmma::wait_group<0>();
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        wgmma::fence_operands(aS[b]);
        wgmma::fence_operands(adS[b]);
      }
      wgmma::fence_operands(accQ);
      wgmma::fence_operands(accW);
      wgmma::fence_operands(accK);
    }
    ring_n += Sl::kCount;
    tma::barrier_arrive(&sm.empty[kDo]);
    tma::barrier_arrive(&sm.empty[kVn]);

    // --- phase 0: Āᵀ; dvbᵀ = dVᵀ·Ā -> dv_out, db; D = dV·Vvᵀ ---------------------------------
    tma::barrier_wait(&sm.full[kA], par);
    tma::barrier_wait(&sm.full[kVv], par);
    named_sync(kBarAll, kConsumerThreads);  // the previous unit's reads of Āᵀ, X, Yᵀ are done
    {
      // Warp cw transposes rows 8 cw .. 8 cw + 7 of Ā (zeroing outside L x L when L < 64).
      const int cw = tid / 32;
#pragma unroll
      for (int p2 = 0; p2 < 2; ++p2) {
        uint32_t r[4];
        unsigned char* const at = t.A + sw(8 * cw + mrow, 16 * (4 * p2 + mat));
        mma::ldmatrix_x4(r, at);
        if (L < kBT) {
          const int i = 8 * cw + grp;
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            const int j = 8 * (4 * p2 + m) + 2 * quad;
            const uint32_t keep =
                (i < L ? (j < L ? 0x0000ffffu : 0u) | (j + 1 < L ? 0xffff0000u : 0u) : 0u);
            r[m] &= keep;
          }
          mma::stmatrix_x4(at, r);
        }
        mma::stmatrix_x4_trans(t.At + sw(8 * (4 * p2 + mat) + mrow, 16 * cw), r);
      }
    }
    tma::fence_proxy_async_shared();        // the generic writes, before wgmma reads them
    named_sync(kBarAll, kConsumerThreads);  // Āᵀ (and the zeroed Ā), β, db's zeros
    const int vb = 64 * wg + 16 * wwarp;    // first v row of the warp (dvbᵀ)
    float accD[16];                         // D [i][32 wg + ..]
    {
      float acc[32];  // dvbᵀ [v][t]
      uint32_t a[4][4];
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        mma::ldmatrix_x4_trans(a[s],
                               t.dV + tile16(16 * s + (mat / 2) * 8 + mrow, vb + (mat % 2) * 8));
      }
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma::mma_m64n64k16_rs<XT>(acc, a[s], desc64(t.At, s), s > 0);
#pragma unroll
      for (int s = 0; s < kV / 16; ++s) {
        wgmma::mma_m64n32k16<XT>(accD, desc128(t.dV, s), desc128(t.Vv + 32 * 128 * wg, s), s > 0);
      }
      wgmma::commit_group();
      // Vv at dvbᵀ's positions: vv[j][h] = Vv[8 j + 2 quad (+1)][vb + grp + 8 h].
      uint32_t vv[8][2];
#pragma unroll
      for (int p4 = 0; p4 < 4; ++p4) {
        uint32_t r[4];
        mma::ldmatrix_x4_trans(r, t.Vv + tile16(8 * (2 * p4 + mat / 2) + mrow, vb + 8 * (mat % 2)));
        vv[2 * p4][0] = r[0];
        vv[2 * p4][1] = r[1];
        vv[2 * p4 + 1][0] = r[2];
        vv[2 * p4 + 1][1] = r[3];
      }
      wgmma::wait_group<0>();
#pragma unroll
      for (int s = 0; s < 4; ++s) wgmma::fence_operands(a[s]);
      wgmma::fence_operands(acc);
      wgmma::fence_operands(accD);
      tma::barrier_arrive(&sm.empty[kDv]);
      tma::barrier_arrive(&sm.empty[kVv]);
      XT* const dv_out = static_cast<XT*>(p.dv_out) + u.out_row0 * kV;
      const int64_t dv_row = p.HV * kV;
      float dbp[8][2];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tt = 8 * j + 2 * quad + e;
          float sum = 0.0f;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float d = acc[4 * j + 2 * h + e];
            const float2 v2 = mma::unpack2<XT>(vv[j][h]);
            sum = fmaf(d, e == 0 ? v2.x : v2.y, sum);
            if (tt < L) dv_out[tt * dv_row + vb + grp + 8 * h] = from_float<XT>(beta[tt] * d);
          }
          dbp[j][e] = sum;
        }
      }
      add_db_columns(dbp, dbs, grp, quad);
    }

    // --- phase E: the epilogue at (k, t) ---------------------------------------------------
    tma::barrier_wait(&sm.full[kG], par);
    tma::barrier_wait(&sm.full[kQ], par);
    tma::barrier_wait(&sm.full[kKk], par);
    const float* const g = reinterpret_cast<const float*>(t.g);
    uint32_t kf[8][2];  // k[8 j + 2 quad (+1)][kb + grp + 8 h] (ldmatrix.trans of [t][k])
#pragma unroll
    for (int p4 = 0; p4 < 4; ++p4) {
      uint32_t r[4];
      mma::ldmatrix_x4_trans(r, t.k + tile16(8 * (2 * p4 + mat / 2) + mrow, kb + 8 * (mat % 2)));
      kf[2 * p4][0] = r[0], kf[2 * p4][1] = r[1], kf[2 * p4 + 1][0] = r[2],
             kf[2 * p4 + 1][1] = r[3];
    }
    float gn[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      gn[h] = *reinterpret_cast<const float*>(t.g + tile32(L - 1, kb + grp + 8 * h));
    }
    // dW = −(dV·Sᵀ), 0 on rows >= L, rounded to X: the A operand of dkgbᵀ = dWᵀ·Ā, and stored
    // transposed ([i][k]) over the X and Yᵀ atoms (free until phase D) for D's second term.
    uint32_t dw[4][4];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 2 * s + r / 2;
        const int h = r % 2;
        const int tt = 8 * j + 2 * quad;
        const float w0 = tt < L ? -accW[4 * j + 2 * h] : 0.0f;
        const float w1 = tt + 1 < L ? -accW[4 * j + 2 * h + 1] : 0.0f;
        dw[s][r] = mma::pack2<XT>(w0, w1);
      }
      mma::stmatrix_x4_trans(t.X + tile16(16 * s + (mat / 2) * 8 + mrow, kb + (mat % 2) * 8),
                             dw[s]);
    }
    float accG[32];  // dkgbᵀ [k][t]
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma::mma_m64n64k16_rs<XT>(accG, dw[s], desc64(t.At, s), s > 0);
    wgmma::commit_group();
    // While it runs: dq, dK0, Q⊙dQ − Kk⊙dK0 (into accQ), E (into accW), Σ_t Kk⊙dK0.
    float kdk[2] = {0.0f, 0.0f};
    float* const dq_base = p.dq + u.out_row0 * kK;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      uint32_t qf[4];  // q at (j, h) = (j, 0), (j, 1), (j + 1, 0), (j + 1, 1) for even j
      if (j % 2 == 0) {
        mma::ldmatrix_x4_trans(qf, t.q + tile16(8 * (j + mat / 2) + mrow, kb + 8 * (mat % 2)));
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int kc = kb + grp + 8 * h;
        const float2 qv = mma::unpack2<XT>(qf[2 * (j % 2) + h]);
        const float2 kv = mma::unpack2<XT>(kf[j][h]);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tt = 8 * j + 2 * quad + e;
          const int idx = 4 * j + 2 * h + e;
          const bool valid = tt < L;
          const float G = g[tile32(tt, kc) / 4];
          const float ex = exp2f(G);
          const float dq = accQ[idx] * ex * p.scale;
          if (valid) dq_base[tt * HVK + kc] = dq;
          const float Kk = e == 0 ? kv.x : kv.y;
          const float dk0 = valid ? accK[idx] * exp2f(gn[h] - G) : 0.0f;
          accK[idx] = dk0;
          accQ[idx] = fmaf(e == 0 ? qv.x : qv.y, dq, -(Kk * dk0));
          kdk[h] = fmaf(Kk, dk0, kdk[h]);
          accW[idx] = ex;  // E
        }
      }
    }
    tma::barrier_arrive(&sm.empty[kG]);
    tma::barrier_arrive(&sm.empty[kQ]);
    // KG = Kk ⊙ E (0 on rows >= L) in X, for D's second term: over this warpgroup's k columns of
    // the k tile (every warp of the warpgroup has its k values in registers), as [j][k].
    named_sync(2 + wg, 128);
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t kg[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 2 * s + r / 2;
        const int h = r % 2;
        const int tt = 8 * j + 2 * quad;
        const float2 kv = mma::unpack2<XT>(kf[j][h]);
        const float k0 = tt < L ? kv.x * accW[4 * j + 2 * h] : 0.0f;
        const float k1 = tt + 1 < L ? kv.y * accW[4 * j + 2 * h + 1] : 0.0f;
        kg[r] = mma::pack2<XT>(k0, k1);
      }
      mma::stmatrix_x4_trans(t.k + tile16(16 * s + (mat / 2) * 8 + mrow, kb + (mat % 2) * 8), kg);
    }
    wgmma::wait_group<0>();
#pragma unroll
    for (int s = 0; s < 4; ++s) wgmma::fence_operands(dw[s]);
    wgmma::fence_operands(accG);
    // dgk = exp2(gn) ⊙ Σ_v S⊙dS + Σ_t Kk⊙dK0 for this lane's two k rows (quads share rows).
    float dgk[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int o = 1; o < 4; o *= 2) {
        sds[h] += __shfl_xor_sync(kFullMask, sds[h], o);
        kdk[h] += __shfl_xor_sync(kFullMask, kdk[h], o);
      }
      dgk[h] = fmaf(exp2f(gn[h]), sds[h], kdk[h]);
    }
    float* const dk_base = p.dk + u.out_row0 * kK;
    float* const dg_base = p.dg + u.out_row0 * kK;
    float dbk[8][2];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int tt = 8 * j + 2 * quad + e;
        const bool valid = tt < L;
        const float b = beta[tt];
        float sum = 0.0f;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int kc = kb + grp + 8 * h;
          const int idx = 4 * j + 2 * h + e;
          const float2 kv = mma::unpack2<XT>(kf[j][h]);
          const float kgv = valid ? (e == 0 ? kv.x : kv.y) * accW[idx] : 0.0f;
          const float dkgb = accG[idx];
          sum = fmaf(dkgb, kgv, sum);
          const float dk = fmaf(dkgb, accW[idx] * b, accK[idx]);
          float dg = fmaf(kgv * dkgb, b, accQ[idx]);
          if (tt == L - 1) dg += dgk[h];
          if (valid) {
            dk_base[tt * HVK + kc] = dk;
            dg_base[tt * HVK + kc] = dg;
          }
        }
        dbk[j][e] = sum;
      }
    }
    add_db_columns(dbk, dbs, grp, quad);

    // --- phase D: D += dW·KGᵀ; X; Y = X·Āᵀ; Z = Āᵀ·Y; dA -----------------------------------
    tma::fence_proxy_async_shared();
    named_sync(kBarAll, kConsumerThreads);  // dW, KG complete
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < kK / 16; ++s) {
      // dW over the X and Yᵀ atoms (adjacent: one tile of two atoms).
      wgmma::mma_m64n32k16<XT>(accD, desc128(t.X, s), desc128(t.k + 32 * 128 * wg, s), true);
    }
    wgmma::commit_group();
    wgmma::wait_group<0>();
    wgmma::fence_operands(accD);
    tma::barrier_arrive(&sm.empty[kKk]);
    named_sync(kBarAll, kConsumerThreads);  // both warpgroups' reads of dW are done: X replaces it
    const int i0 = 16 * wwarp + grp;        // rows i0, i0 + 8 of D, Y, Z
    const int j0 = 32 * wg + 2 * quad;      // columns j0 + 8 jj (+1)
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = i0 + 8 * h;
        const int j = j0 + 8 * jj;
        const float x0 = (i > j && i < L) ? accD[4 * jj + 2 * h] * beta[j] : 0.0f;
        const float x1 = (i > j + 1 && i < L) ? accD[4 * jj + 2 * h + 1] * beta[j + 1] : 0.0f;
        *reinterpret_cast<uint32_t*>(t.X + sw(i, 2 * j)) = mma::pack2<XT>(x0, x1);
      }
    }
    tma::fence_proxy_async_shared();
    named_sync(kBarAll, kConsumerThreads);  // X complete; every db term is in
    if (tid < L) p.db[u.out_row0 + tid * p.HV] = dbs[tid];
    float accY[16];
    product_k64<XT>(accY, t.X, t.A + 32 * 128 * wg);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = i0 + 8 * h;
          const int j = j0 + 8 * jj + e;
          *reinterpret_cast<XT*>(t.Yt + sw(j, 2 * i)) = from_float<XT>(accY[4 * jj + 2 * h + e]);
        }
      }
    }
    tma::fence_proxy_async_shared();
    named_sync(kBarAll, kConsumerThreads);  // Yᵀ complete
    float accZ[16];
    product_k64<XT>(accZ, t.At, t.Yt + 32 * 128 * wg);
    tma::barrier_arrive(&sm.empty[kA]);
    float* const dA = p.dA + u.out_row0 * kBT;
    const int64_t dA_row = p.HV * kBT;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = i0 + 8 * h;
        const int j = j0 + 8 * jj;
        if (i < L) {
          const float z0 = i > j ? -accZ[4 * jj + 2 * h] : 0.0f;
          const float z1 = i > j + 1 ? -accZ[4 * jj + 2 * h + 1] : 0.0f;
          *reinterpret_cast<float2*>(dA + i * dA_row + j) = make_float2(z0, z1);
        }
      }
    }
    ++it;
  }
}

}  // namespace kda::cuda
