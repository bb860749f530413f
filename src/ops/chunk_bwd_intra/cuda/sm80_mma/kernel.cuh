#pragma once
// The chunk_bwd_intra kernel (SPEC-chunk-bwd-intra.md steps 1..8), sm_90a. README.md in this
// folder walks through one work item and gives the performance model.
//
// Work: unit = (chunk, value head); a persistent CTA takes units blockIdx.x, + gridDim.x, ...
// Each unit is one or two "items" (passes over up to 128 channels). A CTA has 4·NC warps
// (NC = BT / 16 sub-chunks); a warp's task is (sub-chunk t, 32-channel group): 16 rows x 32
// channels of every output. Per task, with f = first row of t and l = last row of t:
//   row part    (sources s' < t):  dqa, r  += Pq|Pk[t, s'] · (Kk[s'] ⊙ exp2(G[f] − G[s']))
//                                  then ⊙ exp2(G[i] − G[f])                  (mma.sync, TF32)
//   column part (sources s > t):   dkc     += Pq|Pkᵀ[s, t] · ((Q | β⊙Kk)[s] ⊙ exp2(G[s] − G[l]))
//                                  then ⊙ exp2(G[l] − G[i])                  (mma.sync, TF32)
//   (every exponent <= 0 for a non-increasing gate: nothing overflows, whatever the decay)
//   the mma accumulators go through a per-warp shared-memory tile to one channel per lane;
//   diagonal block (j <= i inside t): exact D = exp2(G[i] − G[j]) per pair and channel on the
//   CUDA cores, each D used for dqa, r and dkc at once; rows are finished from the last to the
//   first, so dkc[i] is complete when row i is stored: dq, dk, dg rows (incoming + intra) go to
//   global memory, Σ_c r·Kk per row to a shared partial; db = db_in + Σ partials after the next
//   item's first barrier (PendingDb). With safe_gate (bounded gates: IntraTraits::kDiagTc) the
//   diagonal block goes through the tensor cores too, through anchors of both signs.
// Files: traits.cuh (compile-time shape, the stage view), copies.cuh (a work item's copies and
// prefetches), phase_one.cuh, c_tile.cuh, phase_two.cuh (a task's two phases), this file (the
// persistent kernel: the item loop, its barriers and the deferred db).
// Row i of dq and db reads only rows j <= i (mma rows are independent dot products; anchors f
// <= i), so those outputs are causal bit for bit.
// No atomics; every sum has a fixed order: results are bitwise reproducible.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/tma.cuh"
#include "ops/chunk_bwd_intra/cuda/params.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/copies.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/device.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/phase_one.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/phase_two.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/traits.cuh"

namespace kda::cuda::intra {

// --- the kernel ----------------------------------------------------------------------------------

// db of one unit, deferred: its per-row partials (one per channel group) sit in dbpart[buffer]
// until the threads that own its rows sum them after the next item's first barrier, so that no
// barrier of its own is needed at the end of every item.
struct PendingDb {
  bool pending = false;
  int buffer = 0;      // dbpart buffer (the unit's number mod 2)
  int64_t at = 0;      // element of db_out
  float db_in = 0.0f;  // incoming db of the row
};

template <typename Tr>
__device__ __forceinline__ void finish_db(const IntraParams& p, const float* dbpart, int row,
                                          PendingDb& d) {
  if (!d.pending) return;
  const int groups_total = static_cast<int>((p.K + 31) / 32);
  const float* part = dbpart + d.buffer * Tr::kMaxGroups * Tr::kBT + row;
  float sum = 0.0f;
  for (int gi = 0; gi < groups_total; ++gi) sum += part[gi * Tr::kBT];
  p.db_out[d.at] = d.db_in + sum;
  d.pending = false;
}

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks)
    chunk_bwd_intra_kernel(const __grid_constant__ IntraParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const IntraSmemLayout& lay = p.smem;
  // Resolved units, slot m % 3 for unit m (the current one, the next one, and the one after it,
  // resolved two units ahead by the last warp so that no barrier waits on the resolution).
  auto* units = reinterpret_cast<IntraUnit*>(smem + lay.units_off);
  auto* dbpart = reinterpret_cast<float*>(smem + lay.dbpart_off);  // [2][kMaxGroups][BT]
  float* scratch = reinterpret_cast<float*>(smem + lay.scratch_off) + warp * Tr::kScratchFloats;
  auto* bars = reinterpret_cast<uint64_t*>(smem + lay.barriers_off);  // [stage]: bulk copies
  constexpr bool tma = Tr::kBulk;
  // When the incoming dq/dk/dg of an item are prefetched to L2: two-stage bulk kernels with the
  // exact diagonal issue the prefetch when the issuer's phase 1 is done (the last warp: the
  // lightest phase 1), the tensor-core diagonal ones when its off-diagonal products are done
  // (before its diagonal block: their phase 1 is longer), the cp.async kernels when the item
  // starts. Measured (H200, T=8192 bf16): item start 438-447 µs, after the issuer's phase 1
  // 416-418 (T=2048: 125 -> 113); one item ahead 502 (the lines wait longer in L2 and are evicted
  // before phase 2 reads them). Tensor-core diagonal: item start 431-432, after phase 1 436 -> 441,
  // before the diagonal block 422-423 (T=2048: 123.5 -> 117).
  constexpr bool kIncomingLate = Tr::kBulkStages == 2 && !Tr::kDiagTc;
  constexpr bool kIncomingMid = Tr::kBulkStages == 2 && Tr::kDiagTc;
  uint32_t phases = 0;  // bit s: the parity of stage s's next bulk-copy phase
  // The threads that finish db: row tid - kDbFirst (the warps before the last one, whose tasks
  // have the lightest first phase).
  constexpr int kDbFirst = Tr::kThreads - 32 - Tr::kBT;
  const int db_row = tid - kDbFirst;
  const bool db_thread = db_row >= 0 && db_row < Tr::kBT;
  PendingDb db;

  const int64_t first = blockIdx.x;
  const int64_t step = gridDim.x;
  if (first >= p.num_units) return;
  const int passes = lay.passes;
  const int stages = Tr::kBulk ? Tr::kBulkStages : lay.stages;
  const int64_t my_units = (p.num_units - 1 - first) / step + 1;
  const int64_t items = my_units * passes;

  // Queues item (w, pass)'s copies into stage `stage_index` (cp.async by every thread, or bulk
  // tensor copies by one); returns this thread's β bits for store_beta.
  auto issue = [&](const IntraUnit& w, int pass, int stage_index) -> uint32_t {
    unsigned char* stage = smem + stage_index * Tr::kMap.bytes;
    if (!tma) return issue_copies<Tr>(p, w, pass, stage, tid);
    if (tid == Tr::kIssuer) issue_item_tma<Tr>(p, w, pass, stage, bars + stage_index);
    return beta_bits_of<Tr>(p, w, tid);
  };

  // Prologue: units 0 and 1 resolved (warps 0 and 1), the first item's copies into stage 0.
  if (warp < 2 && warp < my_units) {
    const IntraUnit w = resolve_unit(p, first + warp * step, Tr::kBT, lane);
    if (lane == 0) units[warp] = w;
  }
  if (tma && tid == 0) {
    tma::barrier_init(bars);
    tma::barrier_init(bars + 1);
    tma::barrier_init_fence();
  }
  __syncthreads();
  {
    const IntraUnit u0 = units[0];
    if (u0.valid) {
      const uint32_t beta = issue(u0, 0, 0);
      if (tid < Tr::kBT) store_beta<Tr>(p, smem, beta, tid);
    }
    cp_async_commit();
  }

  for (int64_t n = 0; n < items; ++n) {
    const int pass = static_cast<int>(n % passes);
    const int64_t unit_n = n / passes;
    const int slot = static_cast<int>(unit_n % 3);
    const bool has_next = n + 1 < items;
    const bool next_is_new_unit = pass == passes - 1;
    const int next_slot = next_is_new_unit ? (slot == 2 ? 0 : slot + 1) : slot;
    const int next_pass = next_is_new_unit ? 0 : pass + 1;
    if (!tma) cp_async_wait_all();
    // (A): the previous item is done everywhere (its stage, db partials and units may be
    // reused); this item's cp.async copies landed (bulk copies: waited on below).
    __syncthreads();

    // The previous unit's db (its last item ended before (A)).
    if (pass == 0 && db_thread) finish_db<Tr>(p, dbpart, db_row, db);
    // Unit unit_n + 2, resolved while the others compute; first read after a later (A).
    if (pass == 0 && warp == Tr::kWarps - 1 && unit_n + 2 < my_units) {
      const IntraUnit w = resolve_unit(p, first + (unit_n + 2) * step, Tr::kBT, lane);
      if (lane == 0) units[(unit_n + 2) % 3] = w;
    }

    const IntraUnit u = units[slot];
    const int cur = stages == 2 ? static_cast<int>(n % 2) : 0;
    unsigned char* stage = smem + cur * Tr::kMap.bytes;
    uint32_t beta_next = 0;
    bool beta_next_pending = false;
    if (stages == 2 && has_next) {
      // The other stage was last read by item n - 1, before (A).
      const IntraUnit un = units[next_slot];
      if (un.valid) {
        beta_next = issue(un, next_pass, cur ^ 1);
        beta_next_pending = true;
      }
      cp_async_commit();
    }
    if (tma && u.valid) {
      tma::barrier_wait(bars + cur, (phases >> cur) & 1u);
      phases ^= 1u << cur;
      if (u.len < Tr::kBT) {
        zero_rows_past<Tr>(stage, u.len, tid);
        __syncthreads();
      }
    }
    const bool last_pass = pass == passes - 1;
    if (u.valid) {
      if (p.l2_prefetch) {
        if constexpr (kIncomingLate || kIncomingMid) {
          // prefetched later: during or after the issuer's phase 1 (below)
        } else if constexpr (Tr::kBulk) {
          if (tid == Tr::kIssuer) prefetch_incoming_tma<Tr>(p, u, pass);
        } else if (p.fast_prefetch) {
          prefetch_incoming_fast<Tr>(p, u, pass, tid);
        } else {
          prefetch_item<Tr>(p, u, pass, false, true, tid);
        }
        if (stages == 1 && has_next && units[next_slot].valid) {
          prefetch_item<Tr>(p, units[next_slot], next_pass, true, false, tid);
        }
      }
      if (last_pass && db_thread && db_row < u.len) {
        db.pending = true;
        db.buffer = static_cast<int>(unit_n % 2);
        db.at = (u.batch * p.T + u.t0 + db_row) * p.HV + u.hv;
        db.db_in = load_float<float>(p.db.data, origin(p.db, u) + db_row * p.db.stride_token);
      }
      // At most one task per warp: (sub-chunk, channel group) pairs <= NC x 4 = warps.
      const Stage<Tr> st{stage};
      const int groups = pass_channels(p, pass).padded / 32;
      const bool has_task = warp < (u.len + 15) / 16 * groups;
      const int t = warp / groups;
      const int cg = warp % groups;
      float acc_q[4][4] = {};
      float acc_r[4][4] = {};
      float acc_c[4][4] = {};
      // The tensor-core kernel's late prefetch: when the issuer's off-diagonal products are done
      // (before its diagonal block), since its phase 1 is longer and its phase 2 shorter.
      const bool mid_prefetch = kIncomingMid && p.l2_prefetch && tid == Tr::kIssuer;
      auto before_diagonal = [&] {
        if (mid_prefetch) prefetch_incoming_tma<Tr>(p, u, pass);
      };
      if (has_task) {
        off_diagonal_phase(st, u.len, t, cg, lane, acc_q, acc_r, acc_c, before_diagonal);
      } else {
        before_diagonal();
      }
      if (kIncomingLate && p.l2_prefetch && tid == Tr::kIssuer) {
        prefetch_incoming_tma<Tr>(p, u, pass);
      }
      __syncthreads();  // (C): the tiles of other tasks are read no more
      if (has_task) {
        float* parts = dbpart + static_cast<int>(unit_n % 2) * Tr::kMaxGroups * Tr::kBT;
        const bool full = u.len - 16 * t >= 16;
        if constexpr (Tr::kDiagTc) {
          if (full) {
            diagonal_phase_tc<Tr, true>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                        parts, lane);
          } else {
            diagonal_phase_tc<Tr, false>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                         parts, lane);
          }
        } else if (full) {
          diagonal_phase<Tr, true>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                   parts, lane);
        } else {
          diagonal_phase<Tr, false>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                    parts, lane);
        }
      }
    }
    if (beta_next_pending && tid < Tr::kBT) {
      store_beta<Tr>(p, smem + (cur ^ 1) * Tr::kMap.bytes, beta_next, tid);
    }
    // This item's ordinary writes into its stage (dqa over G, zeros, β) before the bulk copies
    // that will overwrite it, after the next (A) (or (B)).
    if (tma) tma::fence_proxy_async_shared();

    if (stages == 1 && has_next) {
      __syncthreads();  // (B): one stage: every task is done with it before it is refilled
      const IntraUnit un = units[next_slot];
      if (un.valid) {
        const uint32_t beta = issue(un, next_pass, 0);
        if (tid < Tr::kBT) store_beta<Tr>(p, smem, beta, tid);
      }
      cp_async_commit();
    }
  }
  // The last unit's db.
  __syncthreads();
  if (db_thread) finish_db<Tr>(p, dbpart, db_row, db);
}

}  // namespace kda::cuda::intra
