#pragma once
// The intra-chunk terms of the bf16 epilogue kernel (SPEC-chunk-bwd-intra.md steps 1-8) for one
// warp's 16 x 32 tile: rows i of sub-chunk rs (16 rows), channels c of column quarter cq.
//   dqa[i] = Σ_{j<=i} Pq[i,j] k̂[j] d(i,j),  r[i] = Σ_{j<i} Pk[i,j] k̂[j] d(i,j),
//   dkc[j] = Σ_{i>=j} (Pq[i,j] q̂[i] + Pk[i,j] β_i k̂[i]) d(i,j),  d(i,j) = 2^(G2[i] − G2[j]).
// They run on the tensor cores through an anchor row a: d(i,j) = 2^(G2[i] − G2[a]) ·
// 2^(G2[a] − G2[j]), the operands built in registers and split into bf16 hi + lo (three
// products). Pairs in different sub-chunks take a = the first row of the target sub-chunk (dqa,
// r) or the last row of the source sub-chunk (dkc), so every exponent is <= 0 for a
// non-increasing G. The diagonal 16 x 16 block joins them with a = its row 8 when every channel
// of the warp decays by at most kDiagonalSpan (log2) between row 8 and either end of the block,
// so that the factors stay far inside float32's range (always so with lower_bound >= -5: 8 rows
// of at most 7.2); otherwise its pairs take their exact decay on the CUDA cores.

#include "ops/chunk_bwd_epilogue/cuda/bf16/warp_ops.cuh"

namespace kda::cuda::epilogue::bf16 {

constexpr float kDiagonalSpan = 100.0f;

struct IntraInputs {
  const Bf16 *pq_hi, *pq_lo, *pk_hi, *pk_lo;  // [64][kPitchL]: scale · dAqk and dAkk, masked
  const Bf16 *q, *k;                          // raw rows [64][kPitchD]
  const float* G2;                            // [64][kPitchF]
  const float *inv_q, *inv_k, *beta;          // per row
};

// The warp's per-element gradients, updated in place: dq, dk, dG by the cumulative gate, and
// the row partials of dβ (rows g and g + 8 of the tile, summed over this lane's columns).
struct TileGradients {
  float dq[4][4], dk[4][4], dG[4][4];
  float db[2];
};

__device__ __forceinline__ float pair_value(const Bf16* hi, const Bf16* lo, int at) {
  return __bfloat162float(hi[at]) + __bfloat162float(lo[at]);
}

// x̂ = x · inv of row `row`, channel c.
__device__ __forceinline__ float normed(const Bf16* x, const float* inv, int row, int c) {
  return __bfloat162float(x[row * kPitchD + c]) * inv[row];
}

// Whether the diagonal block of sub-chunk rs runs on the tensor cores for the warp's channels.
__device__ __forceinline__ bool diagonal_on_tensor_cores(const IntraInputs& in, int rs, int cq,
                                                         const Lane& l) {
  const int c = 32 * cq + l.lane;
  const float before = in.G2[16 * rs * kPitchF + c] - in.G2[(16 * rs + 8) * kPitchF + c];
  const float after = in.G2[(16 * rs + 8) * kPitchF + c] - in.G2[(16 * rs + 15) * kPitchF + c];
  return __all_sync(0xffffffffu, fabsf(before) <= kDiagonalSpan && fabsf(after) <= kDiagonalSpan);
}

// B fragment (16 source rows from row0, 8 channels from c0 - g) of value(row, c) split in two.
template <typename Value>
__device__ __forceinline__ void build_b(uint32_t (&hi)[2], uint32_t (&lo)[2], int row0, int c,
                                        const Lane& l, Value value) {
  split2(value(l.b_row(row0, 0), c), value(l.b_row(row0, 1), c), hi[0], lo[0]);
  split2(value(l.b_row(row0, 2), c), value(l.b_row(row0, 3), c), hi[1], lo[1]);
}

// Rows: dqa (from Pq) and r (from Pk) of sub-chunk rs from the sub-chunks before it, and from
// its own with `diagonal`. Both products share their B operand, k̂ ⊙ 2^(G2[f] − G2[j]).
__device__ __forceinline__ void intra_rows(TileGradients& t, const IntraInputs& in, int rs, int cq,
                                           const Lane& l, bool diagonal) {
  const int blocks = diagonal ? rs + 1 : rs;
  if (blocks == 0) return;
  const int f = diagonal ? 16 * rs + 8 : 16 * rs;  // the anchor row
  float acc_q[4][4], acc_k[4][4];
  zero_acc(acc_q);
  zero_acc(acc_k);
  for (int sp = 0; sp < blocks; ++sp) {
    const int at = 16 * rs * kPitchL + 16 * sp;
    uint32_t q_hi[4], q_lo[4], k_hi[4], k_lo[4];
    mma::load_a<ALayout::kMK>(q_hi, in.pq_hi + at, kPitchL, l.lane);
    mma::load_a<ALayout::kMK>(q_lo, in.pq_lo + at, kPitchL, l.lane);
    mma::load_a<ALayout::kMK>(k_hi, in.pk_hi + at, kPitchL, l.lane);
    mma::load_a<ALayout::kMK>(k_lo, in.pk_lo + at, kPitchL, l.lane);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = l.b_col(32 * cq, nt);
      const float g_anchor = in.G2[f * kPitchF + c];
      uint32_t b_hi[2], b_lo[2];
      build_b(b_hi, b_lo, 16 * sp, c, l, [&](int j, int cc) {
        return normed(in.k, in.inv_k, j, cc) * ex2(g_anchor - in.G2[j * kPitchF + cc]);
      });
      mma3(acc_q[nt], q_hi, q_lo, b_hi, b_lo);
      mma3(acc_k[nt], k_hi, k_lo, b_hi, b_lo);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = l.row(16 * rs, e), c = l.col(32 * cq, nt, e);
      const float scale = ex2(in.G2[i * kPitchF + c] - in.G2[f * kPitchF + c]);
      const float dqa = acc_q[nt][e] * scale, r = acc_k[nt][e] * scale;
      const float qn = normed(in.q, in.inv_q, i, c), kn = normed(in.k, in.inv_k, i, c);
      const float b = in.beta[i];
      t.dq[nt][e] += dqa;
      t.dk[nt][e] += b * r;
      t.dG[nt][e] += qn * dqa + kn * b * r;
      t.db[e / 2] += r * kn;
    }
  }
}

// Columns: dkc of sub-chunk rs's rows (as j) from the sub-chunks after it, and from its own with
// `diagonal`: Pqᵀ (q̂ ⊙ 2^(G2[i] − G2[l])) + Pkᵀ (β k̂ ⊙ the same).
__device__ __forceinline__ void intra_columns(TileGradients& t, const IntraInputs& in, int rs,
                                              int cq, const Lane& l, bool diagonal) {
  const int first = diagonal ? rs : rs + 1;
  if (first == 4) return;
  const int anchor = diagonal ? 16 * rs + 8 : 16 * rs + 15;
  float acc[4][4];
  zero_acc(acc);
  for (int s = first; s < 4; ++s) {
    const int at = 16 * s * kPitchL + 16 * rs;  // A(j, i) = P[i][j]
    uint32_t q_hi[4], q_lo[4], k_hi[4], k_lo[4];
    mma::load_a<ALayout::kKM>(q_hi, in.pq_hi + at, kPitchL, l.lane);
    mma::load_a<ALayout::kKM>(q_lo, in.pq_lo + at, kPitchL, l.lane);
    mma::load_a<ALayout::kKM>(k_hi, in.pk_hi + at, kPitchL, l.lane);
    mma::load_a<ALayout::kKM>(k_lo, in.pk_lo + at, kPitchL, l.lane);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = l.b_col(32 * cq, nt);
      const float g_anchor = in.G2[anchor * kPitchF + c];
      float xq[4], xk[4];  // rows 16 s + 2 tq + {0, 1, 8, 9}
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int i = l.b_row(16 * s, m);
        const float d = ex2(in.G2[i * kPitchF + c] - g_anchor);
        xq[m] = normed(in.q, in.inv_q, i, c) * d;
        xk[m] = in.beta[i] * normed(in.k, in.inv_k, i, c) * d;
      }
      uint32_t bq_hi[2], bq_lo[2], bk_hi[2], bk_lo[2];
      split2(xq[0], xq[1], bq_hi[0], bq_lo[0]);
      split2(xq[2], xq[3], bq_hi[1], bq_lo[1]);
      split2(xk[0], xk[1], bk_hi[0], bk_lo[0]);
      split2(xk[2], xk[3], bk_hi[1], bk_lo[1]);
      mma3(acc[nt], q_hi, q_lo, bq_hi, bq_lo);
      mma3(acc[nt], k_hi, k_lo, bk_hi, bk_lo);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = l.row(16 * rs, e), c = l.col(32 * cq, nt, e);
      const float x = acc[nt][e] * ex2(in.G2[anchor * kPitchF + c] - in.G2[j * kPitchF + c]);
      t.dk[nt][e] += x;
      t.dG[nt][e] -= normed(in.k, in.inv_k, j, c) * x;
    }
  }
}

// The diagonal 16 x 16 block with every pair's exact decay, channel pair by channel pair (nt).
__device__ __forceinline__ void intra_diagonal(TileGradients& t, const IntraInputs& in, int rs,
                                               int cq, const Lane& l) {
  const int f = 16 * rs;
  const int own[2] = {l.row(f, 0), l.row(f, 2)};  // the lane's rows
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = l.col(32 * cq, nt, 0);
    float2 g_own[2];
    for (int h = 0; h < 2; ++h)
      g_own[h] = *reinterpret_cast<const float2*>(in.G2 + own[h] * kPitchF + c);
    float dqa[2][2] = {}, rr[2][2] = {}, dkc[2][2] = {};
    // Rows: sources j <= i in the block (row g needs j < 8 only).
#pragma unroll 4
    for (int jj = 0; jj < 16; ++jj) {
      const int j = f + jj;
      const float2 gj = *reinterpret_cast<const float2*>(in.G2 + j * kPitchF + c);
      const float2 kj = load_pair(in.k + j * kPitchD + c);
      const float inv = in.inv_k[j];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (jj > own[h] - f) continue;
        const int at = own[h] * kPitchL + j;
        const float pq = pair_value(in.pq_hi, in.pq_lo, at),
                    pk = pair_value(in.pk_hi, in.pk_lo, at);
        const float kd0 = kj.x * inv * ex2(g_own[h].x - gj.x);
        const float kd1 = kj.y * inv * ex2(g_own[h].y - gj.y);
        dqa[h][0] = fmaf(pq, kd0, dqa[h][0]);
        dqa[h][1] = fmaf(pq, kd1, dqa[h][1]);
        rr[h][0] = fmaf(pk, kd0, rr[h][0]);
        rr[h][1] = fmaf(pk, kd1, rr[h][1]);
      }
    }
    // Columns: targets i >= j in the block (row g + 8 needs i >= 8 only).
#pragma unroll 4
    for (int ii = 0; ii < 16; ++ii) {
      const int i = f + ii;
      const float2 gi = *reinterpret_cast<const float2*>(in.G2 + i * kPitchF + c);
      const float2 qi = load_pair(in.q + i * kPitchD + c);
      const float2 ki = load_pair(in.k + i * kPitchD + c);
      const float iq = in.inv_q[i], ik = in.inv_k[i] * in.beta[i];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (ii < own[h] - f) continue;
        const int at = i * kPitchL + own[h];
        const float pq = pair_value(in.pq_hi, in.pq_lo, at),
                    pk = pair_value(in.pk_hi, in.pk_lo, at);
        const float w0 = fmaf(pq * iq, qi.x, pk * ik * ki.x);
        const float w1 = fmaf(pq * iq, qi.y, pk * ik * ki.y);
        dkc[h][0] = fmaf(w0, ex2(gi.x - g_own[h].x), dkc[h][0]);
        dkc[h][1] = fmaf(w1, ex2(gi.y - g_own[h].y), dkc[h][1]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = own[h];
      const float b = in.beta[i];
#pragma unroll
      for (int e2 = 0; e2 < 2; ++e2) {
        const int e = 2 * h + e2;
        const float qn = normed(in.q, in.inv_q, i, c + e2), kn = normed(in.k, in.inv_k, i, c + e2);
        t.dq[nt][e] += dqa[h][e2];
        t.dk[nt][e] += b * rr[h][e2] + dkc[h][e2];
        t.dG[nt][e] += qn * dqa[h][e2] + kn * (b * rr[h][e2] - dkc[h][e2]);
        t.db[h] += rr[h][e2] * kn;
      }
    }
  }
}

}  // namespace kda::cuda::epilogue::bf16
