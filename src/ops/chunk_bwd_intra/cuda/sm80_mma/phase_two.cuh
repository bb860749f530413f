#pragma once
// Phase 2 of a chunk_bwd_intra task: the exact diagonal triangles on the CUDA cores (or only the
// hand-over when the tensor cores took the diagonal), the stores of dq, dk, dg and the db
// partials.
#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_intra/cuda/params.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/c_tile.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/device.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/traits.cuh"

namespace kda::cuda::intra {

// db partials of a task: row i's sum of the scratch tile's r·Kk terms over this warp's 32
// channels, lanes 2i and 2i + 1 taking 16 each (a fixed order: deterministic), instead of a 5-step
// shuffle reduction per row.
template <typename Tr>
__device__ __forceinline__ void store_db_partials(const float* scratch, float* dbpart, int pass,
                                                  int t, int cg, int rows, int lane) {
  __syncwarp();
  const int i = lane / 2;
  const float4* half =
      reinterpret_cast<const float4*>(scratch + i * 32 + 16 * (lane % 2));  // physical slots
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const float4 x = half[v];
    sum += (x.x + x.y) + (x.z + x.w);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  const int group = pass * Tr::kGroupsPerPass + cg;
  if (lane % 2 == 0 && i < rows) dbpart[group * Tr::kBT + 16 * t + i] = sum;
}

// Where a task stands in phase 2: the rows of its sub-chunk t (Ls), its channel within the pass
// (cl), whether that channel exists (ch_ok) and the channel its addresses use (c: 0 past K, so
// that they stay inside the tensors).
struct PhaseTwoTask {
  int Ls;
  int cl;
  bool ch_ok;
  int64_t c;
};

template <bool kFull>
__device__ __forceinline__ PhaseTwoTask phase_two_task(const IntraParams& p, const IntraUnit& u,
                                                       int pass, int t, int cg, int lane) {
  const int cl = 32 * cg + lane;
  const int64_t ch = static_cast<int64_t>(pass) * IntraSmemLayout::kMaxPassChannels + cl;
  const bool ch_ok = ch < p.K;
  return {kFull ? 16 : (u.len - 16 * t < 16 ? u.len - 16 * t : 16), cl, ch_ok, ch_ok ? ch : 0};
}

// A task's first rows (row 16 t of the unit's chunk, channel c) in the incoming dq, dk, dg and the
// element offset of its first output row; output rows are out_pitch elements apart.
struct TaskRows {
  const float* dq_in;
  const float* dk_in;
  const float* dg_in;
  int64_t out;
  int64_t out_pitch;
};

__device__ __forceinline__ TaskRows task_rows(const IntraParams& p, const IntraUnit& u, int64_t c,
                                              int r0) {
  return {static_cast<const float*>(p.dq.data) + origin(p.dq, u, u.hv, c) + r0 * p.dq.stride_token,
          static_cast<const float*>(p.dk.data) + origin(p.dk, u, u.hv, c) + r0 * p.dk.stride_token,
          static_cast<const float*>(p.dg.data) + origin(p.dg, u, u.hv, c) + r0 * p.dg.stride_token,
          ((u.batch * p.T + u.t0 + r0) * p.HV + u.hv) * p.K + c, p.HV * p.K};
}

// dkc from the mma C layout to one channel per lane (row i in dkc[i]) through the warp's scratch
// tile, which is free again afterwards.
__device__ __forceinline__ void take_dkc(float* scratch, const float (&acc_c)[4][4], int lane,
                                         float (&dkc)[16]) {
  write_c_tile(scratch, 32, true, acc_c, lane);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) dkc[i] = read_c_tile(scratch, 32, true, i, lane);
  __syncwarp();
}

// Phase 2 of a task, after a CTA barrier (no warp reads another task's G tile any more): the two
// 8 x 8 triangles of the diagonal block (pairs j <= i inside rows 8h .. 8h + 7) on the CUDA cores
// with the exact D = exp2(G[i] − G[j]) per pair and channel, each D used for dqa, r and dkc; then
// the stores of the rows, one channel per lane (channel ch0 + 32 cg + lane of K).
//   The task's own G tile is read into registers and then reused to hand over the mma's dqa; r and
//   dkc go through the warp's scratch tile. Rows are finished from the last to the first, so
//   dkc[i] is complete when row i is stored. kFull: the sub-chunk has all 16 rows (every task but
//   those of a sequence's last chunk), so no row needs a bounds test.
//   Addresses of the incoming and output rows move by one row pitch per row (a 64-bit add) rather
//   than being recomputed (a 64-bit multiply each).
template <typename Tr, bool kFull>
__device__ __forceinline__ void diagonal_phase(const IntraParams& p, unsigned char* stage,
                                               const Stage<Tr>& st, const IntraUnit& u, int pass,
                                               int t, int cg, const float (&acc_q)[4][4],
                                               const float (&acc_r)[4][4],
                                               const float (&acc_c)[4][4], float* scratch,
                                               float* dbpart, int lane) {
  const PhaseTwoTask k = phase_two_task<kFull>(p, u, pass, t, cg, lane);
  const int Ls = k.Ls;
  auto row_ok = [&](int i) { return kFull || i < Ls; };
  const int cl = k.cl;
  const bool ch_ok = k.ch_ok;
  const int64_t c = k.c;
  const int r0 = 16 * t;

  float dkc[16];
  take_dkc(scratch, acc_c, lane, dkc);
  float* dqa_tile = reinterpret_cast<float*>(stage + Tr::kMap.g_off) + r0 * Tr::kLdG + 32 * cg;
  // Own G rows first: dqa_tile overwrites them.
  float Gr[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) Gr[i] = st.g(r0 + i, cl);
  __syncwarp();
  write_c_tile(dqa_tile, Tr::kLdG, false, acc_q, lane);
  write_c_tile(scratch, 32, true, acc_r, lane);
  __syncwarp();

  const TaskRows rows = task_rows(p, u, c, r0);
  const float* dq_in = rows.dq_in;
  const float* dk_in = rows.dk_in;
  const float* dg_in = rows.dg_in;
  const int64_t out_pitch = rows.out_pitch;
  const int64_t out0 = rows.out;
  const int ld = Tr::a_ld(t);

#pragma unroll
  for (int h = 1; h >= 0; --h) {
    const int base = 8 * h;  // rows base .. base + 7 of t
    if (kFull || base < Ls) {
      float Kr[8];
#pragma unroll
      for (int m = 0; m < 8; ++m) Kr[m] = st.k(r0 + base + m, cl);
      const float* aq = st.aq_row(r0 + base) + r0 + base;  // row base + i at + i * ld
      const float* ak = st.ak_row(r0 + base) + r0 + base;
      // The half's incoming rows, all loaded before its first row is computed: a load issued at
      // the row that adds it left its latency exposed (ncu: long-scoreboard stalls).
      float in_q[8], in_k[8], in_g[8];
      {
        const float* q_at = dq_in + base * p.dq.stride_token;
        const float* k_at = dk_in + base * p.dk.stride_token;
        const float* g_at = dg_in + base * p.dg.stride_token;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const bool load = ch_ok && row_ok(base + i);
          in_q[i] = load ? __ldcs(q_at) : 0.0f;
          in_k[i] = load ? __ldcs(k_at) : 0.0f;
          in_g[i] = load ? __ldcs(g_at) : 0.0f;
          q_at += p.dq.stride_token;
          k_at += p.dk.stride_token;
          g_at += p.dg.stride_token;
        }
      }
      // Output rows from the half's last row down.
      float* dq_out = p.dq_out + out0 + (base + 7) * out_pitch;
      float* dk_out = p.dk_out + out0 + (base + 7) * out_pitch;
      float* dg_out = p.dg_out + out0 + (base + 7) * out_pitch;
#pragma unroll
      for (int i = 7; i >= 0; --i) {
        if (row_ok(base + i)) {
          const int row = r0 + base + i;
          const float gi = Gr[base + i];
          const float qi = st.q(row, cl);
          const float bi = st.beta(row);
          const float bki = bi * Kr[i];
          float dq_acc = read_c_tile(dqa_tile, Tr::kLdG, false, base + i, lane);
          float r_acc = read_c_tile(scratch, 32, true, base + i, lane);
          // Fixed trip counts (resolved once the outer loops are unrolled): with a bound of
          // i / 4 the inner loop would be unrolled first, at an unknown i, and dkc[] indexed at
          // run time would go to local memory.
#pragma unroll
          for (int j4 = 0; j4 < 2; ++j4) {
            if (4 * j4 > i) break;
            const float4 pq4 = *reinterpret_cast<const float4*>(aq + i * ld + 4 * j4);
            const float4 pk4 = *reinterpret_cast<const float4*>(ak + i * ld + 4 * j4);
            const float pq[4] = {pq4.x, pq4.y, pq4.z, pq4.w};
            const float pk[4] = {pk4.x, pk4.y, pk4.z, pk4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int j = 4 * j4 + e;
              if (j <= i) {
                const float D = j == i ? 1.0f : ex2(gi - Gr[base + j]);  // exactly 1 at j = i
                const float kd = Kr[j] * D;
                dq_acc = fmaf(pq[e], kd, dq_acc);
                r_acc = fmaf(pk[e], kd, r_acc);
                dkc[base + j] = fmaf(fmaf(pq[e], qi, pk[e] * bki), D, dkc[base + j]);
              }
            }
          }
          // Row base + i is complete (dkc took its last term, from j = i, just now). Its db
          // term r·Kk for this lane's channel takes r's place in the scratch tile (this lane's
          // own slot); the rows are summed over the lanes once, below.
          write_c_tile_at(scratch, base + i, lane, ch_ok ? r_acc * Kr[i] : 0.0f);
          if (ch_ok) {
            const float dkr = bi * r_acc;
            const float dkc_i = dkc[base + i];
            __stcs(dq_out, in_q[i] + dq_acc);
            __stcs(dk_out, in_k[i] + dkr + dkc_i);
            __stcs(dg_out, in_g[i] + qi * dq_acc + Kr[i] * (dkr - dkc_i));
          }
        }
        dq_out -= out_pitch;
        dk_out -= out_pitch;
        dg_out -= out_pitch;
      }
    }
  }
  store_db_partials<Tr>(scratch, dbpart, pass, t, cg, Ls, lane);
}

// Phase 2 of a task whose diagonal block went through the tensor cores (Tr::kDiagTc): the
// accumulators are complete. They move to one channel per lane through shared memory (dkc via the
// warp's scratch tile into registers; dqa into the task's own G tile, which nothing reads any
// more; r via the scratch tile), then the rows are stored: dq, dk, dg (incoming + intra) and the
// db partials. kFull as in diagonal_phase.
template <typename Tr, bool kFull>
__device__ __forceinline__ void diagonal_phase_tc(const IntraParams& p, unsigned char* stage,
                                                  const Stage<Tr>& st, const IntraUnit& u, int pass,
                                                  int t, int cg, const float (&acc_q)[4][4],
                                                  const float (&acc_r)[4][4],
                                                  const float (&acc_c)[4][4], float* scratch,
                                                  float* dbpart, int lane) {
  const PhaseTwoTask k = phase_two_task<kFull>(p, u, pass, t, cg, lane);
  const int Ls = k.Ls;
  auto row_ok = [&](int i) { return kFull || i < Ls; };
  const int cl = k.cl;
  const bool ch_ok = k.ch_ok;
  const int64_t c = k.c;
  const int r0 = 16 * t;

  float dkc[16];
  take_dkc(scratch, acc_c, lane, dkc);
  float* dqa_tile = reinterpret_cast<float*>(stage + Tr::kMap.g_off) + r0 * Tr::kLdG + 32 * cg;
  write_c_tile(dqa_tile, Tr::kLdG, false, acc_q, lane);
  write_c_tile(scratch, 32, true, acc_r, lane);
  __syncwarp();

  const TaskRows rows = task_rows(p, u, c, r0);
  const float* q_at = rows.dq_in;
  const float* k_at = rows.dk_in;
  const float* g_at = rows.dg_in;
  int64_t out = rows.out;
#pragma unroll
  for (int base = 0; base < 16; base += 8) {
    if (kFull || base < Ls) {
      // The half's incoming rows, all loaded before its first row is stored.
      float in_q[8], in_k[8], in_g[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const bool load = ch_ok && row_ok(base + i);
        in_q[i] = load ? __ldcs(q_at) : 0.0f;
        in_k[i] = load ? __ldcs(k_at) : 0.0f;
        in_g[i] = load ? __ldcs(g_at) : 0.0f;
        q_at += p.dq.stride_token;
        k_at += p.dk.stride_token;
        g_at += p.dg.stride_token;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (row_ok(base + i)) {
          const int row = r0 + base + i;
          const float qi = st.q(row, cl);
          const float ki = st.k(row, cl);
          const float bi = st.beta(row);
          const float dq_acc = read_c_tile(dqa_tile, Tr::kLdG, false, base + i, lane);
          const float r_acc = read_c_tile(scratch, 32, true, base + i, lane);
          // Row base + i's db term r·Kk takes r's place in the scratch tile (this lane's own
          // slot); the rows are summed over the lanes once, below.
          write_c_tile_at(scratch, base + i, lane, ch_ok ? r_acc * ki : 0.0f);
          if (ch_ok) {
            const float dkr = bi * r_acc;
            const float dkc_i = dkc[base + i];
            __stcs(p.dq_out + out, in_q[i] + dq_acc);
            __stcs(p.dk_out + out, in_k[i] + dkr + dkc_i);
            __stcs(p.dg_out + out, in_g[i] + qi * dq_acc + ki * (dkr - dkc_i));
          }
        }
        out += rows.out_pitch;
      }
    }
  }
  store_db_partials<Tr>(scratch, dbpart, pass, t, cg, Ls, lane);
}

}  // namespace kda::cuda::intra
