#pragma once
// chunk_bwd_epilogue's bf16 kernel (plan.cuh: the shapes it takes, its shared-memory map): one
// CTA of 16 warps per (chunk, head), every input tile copied once with cp.async, every product
// on mma.sync m16n8k16 with bf16 operands read by ldmatrix: the stored inputs as they are (their
// products are exact), the operands the kernel derives split into two bf16 terms. The order of
// work (docs/design.md, "The fused backward epilogue"; ../kernel.cuh is the general kernel):
//   t = Akkᵀ dv (dv's output β t, dβ's v term); KG = k̂ ⊙ 2^G2; U = v − KG S;
//   one pass over V: dQ = do Sᵀ, dkgb = −t Sᵀ (= Akkᵀ dw), dAqk = do v_newᵀ, D = dv Uᵀ;
//   X = D ⊙ β_j (strictly lower), dAkk = −Akkᵀ X Akkᵀ; dK0 = v_new dSᵀ, Σ_v S ⊙ dS;
//   SPEC.md's elementwise steps in registers, the intra-chunk terms (intra.cuh), then dG's
//   reverse cumsum, the gate's backward, l2norm's backward and the stores.

#include <cstdint>

#include "cuda/common/chunk_units.cuh"
#include "ops/chunk_bwd_epilogue/cuda/bf16/chunk_inputs.cuh"
#include "ops/chunk_bwd_epilogue/cuda/bf16/intra.cuh"
#include "ops/chunk_bwd_epilogue/cuda/params.hpp"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"

namespace kda::cuda::epilogue::bf16 {

// Sum over the 4 lanes of a C-fragment row (lanes 4g .. 4g + 3).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Sum over the 8 lanes of a C-fragment column (lanes tq, tq + 4, ..).
__device__ __forceinline__ float column_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  x += __shfl_xor_sync(0xffffffffu, x, 8);
  return x + __shfl_xor_sync(0xffffffffu, x, 16);
}

template <bool kVFirst>
__global__ void __launch_bounds__(kThreads, 1)
    chunk_bwd_epilogue_bf16_kernel(const EpilogueParams p) {
  extern __shared__ float4 smem_words[];
  const Smem sm{reinterpret_cast<char*>(smem_words)};
  __shared__ ChunkSpan span_shared;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  const Lane l(tid % 32);
  const int rs = warp % 4, cq = warp / 4;  // the warp's row slice and column quarter
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) / p.H;
  const int64_t h = static_cast<int64_t>(blockIdx.x) % p.H, hv = h;
  const ChunkSpan span = shared_chunk_span(p.chunks, chunk, p.chunk_size, &span_shared);
  if (!span.valid) return;
  const int len = span.len, last = len - 1;
  float* small = sm.f32(kSmall);
  const float A_log = p.A_log != nullptr ? p.A_log[hv * p.A_log_stride] : 0.0f;
  const int64_t h_rows = kVFirst ? p.h.stride_v : p.h.stride_k;
  const int64_t dh_rows = kVFirst ? p.dh.stride_v : p.dh.stride_k;
  // B operands of S: B(k, v) for KG·S, B(v, k) for do·Sᵀ (a tile of rows k, or of rows v).
  constexpr BLayout kS_KV = kVFirst ? BLayout::kNK : BLayout::kKN;
  constexpr BLayout kS_VK = kVFirst ? BLayout::kKN : BLayout::kNK;
  const int s_vk_cols = kVFirst ? 32 * cq : 32 * cq * kPitchD;  // the warp's k columns

  Bf16* const sA = sm.bf(kA);
  Bf16* const sDo = sm.bf(kDo);
  Bf16* const sDv = sm.bf(kDv);
  Bf16* const sVn = sm.bf(kVn);
  Bf16* const sH = sm.bf(kH);
  float* const G2 = sm.f32(kG);

  // The gate's inputs first (the first values the unit needs), then the copies in the order of
  // use: (Akk, dv, k, v), h, (do, v_new).
  float gate_x[16];
  load_gate_inputs(gate_x, p, span, hv, tid % kD, tid / kD);
  copy_tile<kL, kL, kPitchL>(sA, token_rows(p.A, span, hv), p.A.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sDv, token_rows(p.dv, span, hv), p.dv.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sm.bf(kKV), token_rows(p.k, span, h), p.k.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sm.bf(kKV + kTileD), token_rows(p.v, span, hv), p.v.stride_token, len);
  mma::cp_async_commit();
  copy_tile<kD, kD, kPitchD>(sH, state_rows(p.h, span, hv), h_rows, kD);
  mma::cp_async_commit();
  copy_tile<kL, kD, kPitchD>(sDo, token_rows(p.do_, span, hv), p.do_.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sVn, token_rows(p.v_new, span, hv), p.v_new.stride_token, len);
  mma::cp_async_commit();

  if (tid < kL) {
    const BetaValue b =
        tid < len ? beta_value<Bf16>(p, span.batch, span.t0 + tid, hv) : BetaValue{0.0f, 0.0f};
    small[kBeta + tid] = b.value;
    small[kBetaRawGrad + tid] = b.d_raw;
  }
  for (int e = tid; e < 4 * kL; e += kThreads) small[kDbPart + e] = 0.0f;
  build_gate(G2, small + kSegment, gate_x, p, span, A_log);
  mma::cp_async_wait<2>();
  __syncthreads();
  if (len < kL) {  // Akk's columns past a short chunk are not read
    for (int e = tid; e < kL * kL; e += kThreads) {
      if (e % kL >= len) sA[(e / kL) * kPitchL + e % kL] = __float2bfloat16(0.0f);
    }
  }
  row_inv_norms(small + kInvK, sm.bf(kKV), len, p.l2norm, warp, l.lane);
  __syncthreads();

  const float* beta = small + kBeta;
  float* db_part = small + kDbPart + cq * kL;
  // t = Akkᵀ dv; dv's output β t; dβ += Σ_v t ⊙ v.
  float t[4][4];
  zero_acc(t);
  mma::warp_mma<Bf16, ALayout::kKM, BLayout::kKN, 4, 4>(t, sA + 16 * rs, kPitchL, sDv + 32 * cq,
                                                        kPitchD, l.lane);
  {
    const Bf16* v = sm.bf(kKV + kTileD);
    auto* dv_out = static_cast<Bf16*>(p.dv_out);
    float db[2] = {0.0f, 0.0f};
    for_each_pair<4>(l, 16 * rs, 32 * cq, [&](int nt, int half, int i, int c) {
      const float2 v2 = load_pair(v + i * kPitchD + c);
      const float t0 = t[nt][2 * half], t1 = t[nt][2 * half + 1];
      db[half] = fmaf(t0, v2.x, fmaf(t1, v2.y, db[half]));
      if (i < len) {
        const int64_t row = (span.batch * p.T + span.t0 + i) * p.HV + hv;
        *reinterpret_cast<__nv_bfloat162*>(dv_out + row * p.V + c) =
            __floats2bfloat162_rn(beta[i] * t0, beta[i] * t1);
      }
    });
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = quad_sum(db[half]);
      if (l.tq == 0) db_part[l.row(16 * rs, 2 * half)] += sum;
    }
  }
  // KG = k̂ ⊙ 2^G2, split.
  {
    const Bf16* k = sm.bf(kKV);
    const float* inv_k = small + kInvK;
    for (int e = tid; e < kL * kD / 2; e += kThreads) {
      const int i = e / (kD / 2), c = 2 * (e % (kD / 2));
      const float2 k2 = load_pair(k + i * kPitchD + c);
      const float2 g2 = *reinterpret_cast<const float2*>(G2 + i * kPitchF + c);
      uint32_t hi, lo;
      split2(k2.x * inv_k[i] * ex2(g2.x), k2.y * inv_k[i] * ex2(g2.y), hi, lo);
      *reinterpret_cast<uint32_t*>(sm.bf(kKGU) + i * kPitchD + c) = hi;
      *reinterpret_cast<uint32_t*>(sm.bf(kKGU + kTileD) + i * kPitchD + c) = lo;
    }
  }
  mma::cp_async_wait<1>();
  __syncthreads();
  // U = v − KG S.
  float u[4][4];
  zero_acc(u);
  mma_split_a<ALayout::kMK, kS_KV, 8, 4>(
      u, sm.bf(kKGU) + 16 * rs * kPitchD, sm.bf(kKGU + kTileD) + 16 * rs * kPitchD, kPitchD,
      kVFirst ? sH + 32 * cq * kPitchD : sH + 32 * cq, kPitchD, l.lane);
  for_each_pair<4>(l, 16 * rs, 32 * cq, [&](int nt, int half, int i, int c) {
    const float2 v2 = load_pair(sm.bf(kKV + kTileD) + i * kPitchD + c);
    u[nt][2 * half] = v2.x - u[nt][2 * half];
    u[nt][2 * half + 1] = v2.y - u[nt][2 * half + 1];
  });
  __syncthreads();  // KG, k and v read
  store_split<4>(sm.bf(kKGU), sm.bf(kKGU + kTileD), kPitchD, u, 16 * rs, 32 * cq, l);
  store_split<4>(sm.bf(kKV), sm.bf(kKV + kTileD), kPitchD, t, 16 * rs, 32 * cq, l);
  mma::cp_async_wait<0>();
  __syncthreads();

  // The pass over V. dAqk and D only where the tile has pairs j <= i.
  const bool lower_tile = cq <= rs;
  float dQ[4][4], dKgb[4][4], dAqk[2][4], D[2][4];
  zero_acc(dQ);
  zero_acc(dKgb);
  zero_acc(dAqk);
  zero_acc(D);
  {
    const Bf16* t_hi = sm.bf(kKV) + 16 * rs * kPitchD;
    const Bf16* t_lo = sm.bf(kKV + kTileD) + 16 * rs * kPitchD;
    const Bf16* u_hi = sm.bf(kKGU) + 16 * cq * kPitchD;
    const Bf16* u_lo = sm.bf(kKGU + kTileD) + 16 * cq * kPitchD;
#pragma unroll 2
    for (int s = 0; s < kD / 16; ++s) {
      uint32_t a_do[4], a_hi[4], a_lo[4];
      mma::load_a<ALayout::kMK>(a_do, sDo + 16 * rs * kPitchD + 16 * s, kPitchD, l.lane);
      mma::load_a<ALayout::kMK>(a_hi, t_hi + 16 * s, kPitchD, l.lane);
      mma::load_a<ALayout::kMK>(a_lo, t_lo + 16 * s, kPitchD, l.lane);
      uint32_t b_s[4][2];
      mma::load_b<kS_VK, 4>(b_s,
                            kVFirst ? sH + 16 * s * kPitchD + s_vk_cols : sH + s_vk_cols + 16 * s,
                            kPitchD, l.lane);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        mma::mma_16816<Bf16>(dQ[nt], a_do, b_s[nt]);
        mma::mma_16816<Bf16>(dKgb[nt], a_hi, b_s[nt]);
        mma::mma_16816<Bf16>(dKgb[nt], a_lo, b_s[nt]);
      }
      if (lower_tile) {
        uint32_t a_dv[4], b_vn[2][2], b_uh[2][2], b_ul[2][2];
        mma::load_a<ALayout::kMK>(a_dv, sDv + 16 * rs * kPitchD + 16 * s, kPitchD, l.lane);
        mma::load_b<BLayout::kNK, 2>(b_vn, sVn + 16 * cq * kPitchD + 16 * s, kPitchD, l.lane);
        mma::load_b<BLayout::kNK, 2>(b_uh, u_hi + 16 * s, kPitchD, l.lane);
        mma::load_b<BLayout::kNK, 2>(b_ul, u_lo + 16 * s, kPitchD, l.lane);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          mma::mma_16816<Bf16>(dAqk[nt], a_do, b_vn[nt]);
          mma::mma_16816<Bf16>(D[nt], a_dv, b_uh[nt]);
          mma::mma_16816<Bf16>(D[nt], a_dv, b_ul[nt]);
        }
      }
    }
  }
  __syncthreads();  // do, dv, U and t read
  copy_tile<kD, kD, kPitchD>(sm.bf(kKGU), state_rows(p.dh, span, hv), dh_rows, kD);
  copy_tile<kL, kD, kPitchD>(sm.bf(kKV), token_rows(p.q, span, h), p.q.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sm.bf(kKV + kTileD), token_rows(p.k, span, h), p.k.stride_token, len);
  mma::cp_async_commit();

  // X = D ⊙ β_j strictly below the diagonal; Pq = scale · dAqk on and below it.
  Bf16* const x_hi = sDo;
  Bf16* const x_lo = sm.bf(kDo + kTileL);
  Bf16* const s_hi = sm.bf(kS);
  Bf16* const s_lo = sm.bf(kS + kTileL);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = l.row(16 * rs, e), j = l.col(16 * cq, nt, e);
      D[nt][e] = lower_tile && j < i ? D[nt][e] * beta[j] : 0.0f;
      dAqk[nt][e] = lower_tile && j <= i ? dAqk[nt][e] * p.scale : 0.0f;
    }
  }
  store_split<2>(x_hi, x_lo, kPitchL, D, 16 * rs, 16 * cq, l);
  __syncthreads();
  // Akkᵀ X, then dAkk = −(Akkᵀ X) Akkᵀ strictly below the diagonal.
  {
    float ax[2][4];
    zero_acc(ax);
    mma_split_b<ALayout::kKM, BLayout::kKN, 4, 2>(ax, sA + 16 * rs, kPitchL, x_hi + 16 * cq,
                                                  x_lo + 16 * cq, kPitchL, l.lane);
    store_split<2>(s_hi, s_lo, kPitchL, ax, 16 * rs, 16 * cq, l);
  }
  __syncthreads();
  float pk[2][4];
  zero_acc(pk);
  mma_split_a<ALayout::kMK, BLayout::kNK, 4, 2>(pk, s_hi + 16 * rs * kPitchL,
                                                s_lo + 16 * rs * kPitchL, kPitchL,
                                                sA + 16 * cq * kPitchL, kPitchL, l.lane);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = l.row(16 * rs, e), j = l.col(16 * cq, nt, e);
      pk[nt][e] = j < i ? -pk[nt][e] : 0.0f;
    }
  }
  __syncthreads();                                                 // X and Akkᵀ X read
  store_split<2>(x_hi, x_lo, kPitchL, pk, 16 * rs, 16 * cq, l);    // Pk
  store_split<2>(s_hi, s_lo, kPitchL, dAqk, 16 * rs, 16 * cq, l);  // Pq
  mma::cp_async_wait<0>();
  __syncthreads();

  // dK0 = v_new dSᵀ; Σ_v S ⊙ dS per channel; 1 / ||q||.
  float dK0[4][4];
  zero_acc(dK0);
  const Bf16* sDh = sm.bf(kKGU);
  mma::warp_mma<Bf16, ALayout::kMK, kS_VK, 8, 4>(dK0, sVn + 16 * rs * kPitchD, kPitchD,
                                                 sDh + s_vk_cols, kPitchD, l.lane);
  if constexpr (kVFirst) {  // tile rows are v: thread (k, quarter) walks 32 rows of column k
    const int k = tid % kD, quarter = tid / kD;
    float sum = 0.0f;
#pragma unroll 8
    for (int vv = 32 * quarter; vv < 32 * quarter + 32; ++vv) {
      sum = fmaf(__bfloat162float(sH[vv * kPitchD + k]), __bfloat162float(sDh[vv * kPitchD + k]),
                 sum);
    }
    small[kSegment + quarter * kD + k] = sum;
  } else {  // tile rows are k: four threads share row k
    const int k = tid / 4, part = tid % 4;
    float sum = 0.0f;
    for (int vv = 32 * part; vv < 32 * part + 32; vv += 2) {
      const float2 a = load_pair(sH + k * kPitchD + vv), b = load_pair(sDh + k * kPitchD + vv);
      sum = fmaf(a.x, b.x, fmaf(a.y, b.y, sum));
    }
    sum = quad_sum(sum);
    if (part == 0) small[kSDot + k] = sum;
  }
  row_inv_norms(small + kInvQ, sm.bf(kKV), len, p.l2norm, warp, l.lane);
  __syncthreads();
  if (kVFirst && tid < kD) {
    small[kSDot + tid] = small[kSegment + tid] + small[kSegment + kD + tid] +
                         small[kSegment + 2 * kD + tid] + small[kSegment + 3 * kD + tid];
  }

  // SPEC.md steps 1, 2, 5-9 per element.
  const Bf16* q_raw = sm.bf(kKV);
  const Bf16* k_raw = sm.bf(kKV + kTileD);
  const float* inv_q = small + kInvQ;
  const float* inv_k = small + kInvK;
  TileGradients tg;
  tg.db[0] = tg.db[1] = 0.0f;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    float keys[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = l.row(16 * rs, e), c = l.col(32 * cq, nt, e);
      const float g2 = G2[i * kPitchF + c];
      const float E = ex2(g2), to_end = ex2(G2[last * kPitchF + c] - g2);
      const float qn = __bfloat162float(q_raw[i * kPitchD + c]) * inv_q[i];
      const float kn = __bfloat162float(k_raw[i * kPitchD + c]) * inv_k[i];
      const float b = beta[i];
      const float dq = p.scale * dQ[nt][e] * E;
      const float dk0 = dK0[nt][e] * to_end;
      const float kg = kn * E, dkgb = -dKgb[nt][e];
      tg.dq[nt][e] = dq;
      tg.dk[nt][e] = fmaf(b * dkgb, E, dk0);
      tg.dG[nt][e] = qn * dq - kn * dk0 + b * kg * dkgb;
      keys[e & 1] = fmaf(kn, dk0, keys[e & 1]);
      tg.db[e / 2] = fmaf(dkgb, kg, tg.db[e / 2]);
    }
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
      const float sum = column_sum(keys[e2]);
      if (l.g == 0) small[kKeysPart + rs * kD + l.col(32 * cq, nt, e2)] = sum;
    }
  }
  const IntraInputs in{s_hi, s_lo, x_hi, x_lo, q_raw, k_raw, G2, inv_q, inv_k, beta};
  const bool diagonal = diagonal_on_tensor_cores(in, rs, cq, l);
  intra_rows(tg, in, rs, cq, l, diagonal);
  intra_columns(tg, in, rs, cq, l, diagonal);
  if (!diagonal) intra_diagonal(tg, in, rs, cq, l);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = quad_sum(tg.db[half]);
    if (l.tq == 0) db_part[l.row(16 * rs, 2 * half)] += sum;
  }
  __syncthreads();  // Pq, Pk, S and dS read

  float* const dG = sm.f32(kDo);
  float* const dq_rows = sm.f32(kKGU);
  float* const dk_rows = sm.f32(kH);
  for_each_pair<4>(l, 16 * rs, 32 * cq, [&](int nt, int half, int i, int c) {
    const int at = i * kPitchF + c;
    *reinterpret_cast<float2*>(dG + at) = make_float2(tg.dG[nt][2 * half], tg.dG[nt][2 * half + 1]);
    *reinterpret_cast<float2*>(dq_rows + at) =
        make_float2(tg.dq[nt][2 * half], tg.dq[nt][2 * half + 1]);
    *reinterpret_cast<float2*>(dk_rows + at) =
        make_float2(tg.dk[nt][2 * half], tg.dk[nt][2 * half + 1]);
  });
  __syncthreads();
  if (tid < kD) {  // step 8's state and key terms at the chunk's last row
    float keys = 0.0f;
    for (int r = 0; r < 4; ++r) keys += small[kKeysPart + r * kD + tid];
    dG[last * kPitchF + tid] += fmaf(ex2(G2[last * kPitchF + tid]), small[kSDot + tid], keys);
  }
  __syncthreads();
  // The reverse cumsum over rows (dg by the cumulative gate becomes dg by each token's decay),
  // then through the gate: thread (c, segment) takes 16 rows of channel c.
  {
    const int c = tid % kD, seg = tid / kD;
    float x[16], suffix[16];
    load_gate_inputs(x, p, span, hv, c, seg);
    float run = 0.0f;
#pragma unroll
    for (int r = 15; r >= 0; --r) {
      run += dG[(16 * seg + r) * kPitchF + c];
      suffix[r] = run;
    }
    small[kSegment + seg * kD + c] = run;
    __syncthreads();
    float after = 0.0f;
    for (int b = seg + 1; b < 4; ++b) after += small[kSegment + b * kD + c];
    float* dg_out = p.dg + ((span.batch * p.T + span.t0 + 16 * seg) * p.HV + hv) * p.K + c;
    with_gate_form(p, A_log, [&](auto gate) {
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        if (16 * seg + r >= len) break;
        dg_out[r * p.HV * p.K] = (suffix[r] + after) * gate(x[r]).d_x;
      }
    });
  }
  // l2norm's backward, dx = (dx̂ − x̂ (x̂ · dx̂)) / ||x||, and the stores of dq and dk.
  for (int i = warp; i < len; i += kWarps) {
#pragma unroll
    for (int which = 0; which < 2; ++which) {
      const float* d = (which == 0 ? dq_rows : dk_rows) + i * kPitchF + 4 * l.lane;
      const Bf16* x = (which == 0 ? q_raw : k_raw) + i * kPitchD + 4 * l.lane;
      const float inv = (which == 0 ? inv_q : inv_k)[i];
      const float4 d4 = *reinterpret_cast<const float4*>(d);
      const float2 x01 = load_pair(x), x23 = load_pair(x + 2);
      float out[4] = {d4.x, d4.y, d4.z, d4.w};
      if (p.l2norm) {
        const float xs[4] = {x01.x * inv, x01.y * inv, x23.x * inv, x23.y * inv};
        const float dot =
            warp_sum(fmaf(xs[0], out[0], fmaf(xs[1], out[1], fmaf(xs[2], out[2], xs[3] * out[3]))));
#pragma unroll
        for (int m = 0; m < 4; ++m) out[m] = inv * (out[m] - xs[m] * dot);
      }
      Bf16* dst = static_cast<Bf16*>(which == 0 ? p.dq : p.dk) +
                  ((span.batch * p.T + span.t0 + i) * p.H + h) * p.K + 4 * l.lane;
      const __nv_bfloat162 lo = __floats2bfloat162_rn(out[0], out[1]);
      const __nv_bfloat162 hi = __floats2bfloat162_rn(out[2], out[3]);
      *reinterpret_cast<uint2*>(dst) = make_uint2(bits_of(lo), bits_of(hi));
    }
  }
  if (tid < len) {
    float db = 0.0f;
    for (int part = 0; part < 4; ++part) db += small[kDbPart + part * kL + tid];
    p.dbeta[(span.batch * p.T + span.t0 + tid) * p.HV + hv] = db * small[kBetaRawGrad + tid];
  }
}

}  // namespace kda::cuda::epilogue::bf16
