#pragma once
// chunk_bwd_epilogue's fused kernel: one CTA of 256 threads per (chunk, query/key head), its value
// heads in turn, every intermediate in shared memory (no float32 partial goes through HBM). Per
// value head (docs/design.md, "The fused backward epilogue"; chunk_math.cpp is the float64 form
// of the same steps):
//   phase A, over V blocks: dAqk = scale · do v_newᵀ; dvb = Akkᵀ dv (dv's output β dvb, dβ's
//     v term); U = v − KG S; D = dv Uᵀ (SPEC.md steps 11-12 reordered: dw kgᵀ = −dv (KG S)ᵀ), so
//     that dAkk = −Akkᵀ (D ⊙ β_j, strictly lower) Akkᵀ is final before the K blocks;
//   phase B, over K blocks of 32 channels: SPEC.md steps 1-10 (dq, dk0, dw from do, v_new, dv
//     against h and dh; dkgb = Akkᵀ dw), SPEC-chunk-bwd-intra.md steps 1-8 with every pair's decay
//     taken exactly, dg's chunk-local reverse cumsum and the gate's backward; dq, dk summed over
//     the value heads in shared memory;
// then l2norm's backward on whole rows and the stores. The dense products run on the TF32 tensor
// cores (block_gemm; 3xTF32 for float32 X). dA_log and ddt_bias are reduced afterwards from dg by
// gate_params_kernel (reduce.cuh).

#include <cstdint>

#include "cuda/common/block_gemm.cuh"
#include "cuda/common/chunk_units.cuh"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"

namespace kda::cuda::epilogue {

using mma::ALayout;
using mma::BLayout;
using mma::block_gemm;

constexpr float kLog2e = 1.4426950408889634f;

// Phase A for value head hv: Pq (dAqk, lower-inclusive, scaled), Pk (dAkk, strictly lower), dv's
// output and dβ's v and dv terms (in db).
template <typename X, int kL, typename Split>
__device__ __forceinline__ void phase_a(float* smem, const SmemPlan& s, const EpilogueParams& p,
                                        const ChunkSpan& span, int64_t h, int64_t hv, float A_log) {
  const int len = span.len;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t k_blocks = (p.K + 31) / 32, v_blocks = (p.V + 31) / 32;
  float* Akk = smem + s.akk;
  float* Pq = smem + s.pq;
  float* Pk = smem + s.pk;
  float* KG = smem + s.a_kg;
  const float* beta = smem + s.beta;
  float* db = smem + s.db;

  // KG = k̂ ⊙ exp(G) over all K channels (the G and k̂ blocks staged in the u and do blocks).
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    load_block<X, kL>(smem + s.a_do, p.k, span.batch, span.t0, h, 32 * kb, len, p.K - 32 * kb,
                      smem + s.k_inv);
    gate_block<X, kL>(smem + s.a_u, p, span.batch, span.t0, hv, 32 * kb, len, A_log);
    for (int e = tid; e < kL * 32; e += kThreads) {
      const int i = e / 32, c = e % 32;
      KG[i * s.ld_k + 32 * kb + c] =
          smem[s.a_do + i * kPitch + c] * expf(smem[s.a_u + i * kPitch + c]);
    }
    __syncthreads();
  }

  for (int64_t vb = 0; vb < v_blocks; ++vb) {
    const int64_t v0 = 32 * vb, v_cols = p.V - v0;
    {
      float* const dst[4] = {smem + s.a_do, smem + s.a_vn, smem + s.a_dv, smem + s.a_u};
      const TokenView* const src[4] = {&p.do_, &p.v_new, &p.dv, &p.v};
      load_blocks<X, kL, 4>(dst, src, span.batch, span.t0, hv, v0, len, v_cols);
    }
    __syncthreads();
    block_gemm<ALayout::kMK, BLayout::kNK, kL, kL, 32, Split>(Pq, s.ld_l, smem + s.a_do, kPitch,
                                                              smem + s.a_vn, kPitch, 1.0f, vb > 0);
    block_gemm<ALayout::kKM, BLayout::kKN, kL, 32, kL, Split>(smem + s.a_t, kPitch, Akk, s.ld_l,
                                                              smem + s.a_dv, kPitch, 1.0f, false);
    __syncthreads();
    // dv = β ⊙ dvb; dβ += Σ_v dvb ⊙ v.
    X* dv_out = static_cast<X*>(p.dv_out);
    for (int e = tid; e < kL * 32; e += kThreads) {
      const int i = e / 32, c = e % 32;
      const float t = smem[s.a_t + i * kPitch + c];
      if (i < len && c < v_cols) {
        const int64_t row = (span.batch * p.T + span.t0 + i) * p.HV + hv;
        dv_out[row * p.V + v0 + c] = from_float<X>(beta[i] * t);
      }
      const float part = warp_sum(t * smem[s.a_u + i * kPitch + c]);
      if (c == 0) db[i] += part;
    }
    __syncthreads();
    // U = v − KG S over the K blocks.
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      float* const dst[1] = {smem + s.a_s};
      const StateView* const src[1] = {&p.h};
      load_state_blocks<X, 1>(dst, src, p.h_is_f32, span.batch, span.chunk_in_row, hv, 32 * kb, v0,
                              p.K, p.V);
      __syncthreads();
      block_gemm<ALayout::kMK, BLayout::kKN, kL, 32, 32, Split>(
          smem + s.a_u, kPitch, KG + 32 * kb, s.ld_k, smem + s.a_s, kPitch, -1.0f, true);
      __syncthreads();
    }
    // D += dv Uᵀ (held in Pk until it becomes dAkk).
    block_gemm<ALayout::kMK, BLayout::kNK, kL, kL, 32, Split>(Pk, s.ld_l, smem + s.a_dv, kPitch,
                                                              smem + s.a_u, kPitch, 1.0f, vb > 0);
    __syncthreads();
  }

  // X = D ⊙ β_j strictly below the diagonal; dAqk scaled, lower-inclusive.
  for (int e = tid; e < kL * kL; e += kThreads) {
    const int i = e / kL, j = e % kL;
    Pk[i * s.ld_l + j] = j < i ? Pk[i * s.ld_l + j] * beta[j] : 0.0f;
    Pq[i * s.ld_l + j] = j <= i ? Pq[i * s.ld_l + j] * p.scale : 0.0f;
  }
  __syncthreads();
  // dAkk = −Akkᵀ X Akkᵀ, strictly lower (Akkᵀ X in the do and v_new blocks).
  float* AX = smem + s.a_do;
  block_gemm<ALayout::kKM, BLayout::kKN, kL, kL, kL, Split>(AX, s.ld_l, Akk, s.ld_l, Pk, s.ld_l,
                                                            1.0f, false);
  __syncthreads();
  block_gemm<ALayout::kMK, BLayout::kNK, kL, kL, kL, Split>(Pk, s.ld_l, AX, s.ld_l, Akk, s.ld_l,
                                                            -1.0f, false);
  __syncthreads();
  for (int e = tid; e < kL * kL; e += kThreads) {
    const int i = e / kL, j = e % kL;
    if (j >= i) Pk[i * s.ld_l + j] = 0.0f;
  }
  __syncthreads();
}

// Phase B for value head hv, K block kb: the WY and intra-chunk terms of channels 32 kb ..
// 32 kb + 31, dg through the reverse cumsum and the gate (stored), dq and dk added to the unit's
// accumulators, dβ's k terms into db.
template <typename X, int kL, typename Split>
__device__ __forceinline__ void phase_b(float* smem, const SmemPlan& s, const EpilogueParams& p,
                                        const ChunkSpan& span, int64_t h, int64_t hv, int64_t kb,
                                        float A_log) {
  const int len = span.len;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int64_t k0 = 32 * kb, k_cols = p.K - k0, v_blocks = (p.V + 31) / 32;
  const float* Akk = smem + s.akk;
  const float* Pq = smem + s.pq;
  const float* Pk = smem + s.pk;
  const float* beta = smem + s.beta;
  float* db = smem + s.db;
  float* G = smem + s.b_g;
  float* Qn = smem + s.b_q;
  float* Kn = smem + s.b_k;
  float* dQ = smem + s.b_dq;    // do Sᵀ, then dq of the block
  float* dK0 = smem + s.b_dk0;  // v_new dSᵀ
  float* dW = smem + s.b_dw;    // dv Sᵀ, then dk of the block
  float* dkgb = smem + s.b_do;  // after the V loop
  float* dG = smem + s.b_vn;    // after the V loop: dg by the cumulative gate
  float* s_dot = smem + s.s_dot;
  float* col_part = smem + s.col_part;

  load_block<X, kL>(Qn, p.q, span.batch, span.t0, h, k0, len, k_cols, smem + s.q_inv);
  load_block<X, kL>(Kn, p.k, span.batch, span.t0, h, k0, len, k_cols, smem + s.k_inv);
  gate_block<X, kL>(G, p, span.batch, span.t0, hv, k0, len, A_log);  // synchronizes

  for (int64_t vb = 0; vb < v_blocks; ++vb) {
    const int64_t v0 = 32 * vb, v_cols = p.V - v0;
    {
      float* const dst[3] = {smem + s.b_do, smem + s.b_vn, smem + s.b_dv};
      const TokenView* const src[3] = {&p.do_, &p.v_new, &p.dv};
      load_blocks<X, kL, 3>(dst, src, span.batch, span.t0, hv, v0, len, v_cols);
      float* const states[2] = {smem + s.b_s, smem + s.b_ds};
      const StateView* const state_src[2] = {&p.h, &p.dh};
      load_state_blocks<X, 2>(states, state_src, p.h_is_f32, span.batch, span.chunk_in_row, hv, k0,
                              v0, p.K, p.V);
    }
    __syncthreads();
    block_gemm<ALayout::kMK, BLayout::kNK, kL, 32, 32, Split>(dQ, kPitch, smem + s.b_do, kPitch,
                                                              smem + s.b_s, kPitch, 1.0f, vb > 0);
    block_gemm<ALayout::kMK, BLayout::kNK, kL, 32, 32, Split>(dK0, kPitch, smem + s.b_vn, kPitch,
                                                              smem + s.b_ds, kPitch, 1.0f, vb > 0);
    block_gemm<ALayout::kMK, BLayout::kNK, kL, 32, 32, Split>(dW, kPitch, smem + s.b_dv, kPitch,
                                                              smem + s.b_s, kPitch, 1.0f, vb > 0);
    if (tid < 32) {  // Σ_v S ⊙ dS of channel k0 + tid (step 8's state term)
      float sum = vb > 0 ? s_dot[tid] : 0.0f;
      for (int vv = 0; vv < 32; ++vv) {
        sum = fmaf(smem[s.b_s + tid * kPitch + vv], smem[s.b_ds + tid * kPitch + vv], sum);
      }
      s_dot[tid] = sum;
    }
    __syncthreads();
  }
  // dkgb = Akkᵀ dw = −Akkᵀ (dv Sᵀ) (step 5).
  block_gemm<ALayout::kKM, BLayout::kKN, kL, 32, kL, Split>(dkgb, kPitch, Akk, s.ld_l, dW, kPitch,
                                                            -1.0f, false);
  __syncthreads();

  // SPEC.md steps 1, 2, 5-9 elementwise; step 8's column sum of k̂ ⊙ dk0 per warp.
  float col_sum = 0.0f;
  for (int e = tid; e < kL * 32; e += kThreads) {
    const int i = e / 32, c = e % 32;
    const int at = i * kPitch + c;
    const float g = G[at], E = expf(g), to_end = expf(G[(len - 1) * kPitch + c] - g);
    const float dq = p.scale * dQ[at] * E;
    const float dk0 = dK0[at] * to_end;
    const float kg = Kn[at] * E, b = beta[i], dkgb_ = dkgb[at];
    dQ[at] = dq;
    dW[at] = dk0 + b * dkgb_ * E;
    dG[at] = Qn[at] * dq - Kn[at] * dk0 + b * kg * dkgb_;
    col_sum = fmaf(Kn[at], dk0, col_sum);
    const float part = warp_sum(dkgb_ * kg);
    if (lane == 0) db[i] += part;
  }
  col_part[warp * 32 + lane] = col_sum;
  __syncthreads();
  if (tid < 32) {
    float keys = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) keys += col_part[w * 32 + tid];
    const float gn = G[(len - 1) * kPitch + tid];
    dG[(len - 1) * kPitch + tid] += fmaf(expf(gn), s_dot[tid], keys);
  }
  __syncthreads();

  // SPEC-chunk-bwd-intra.md steps 1-8: by rows i (dq's and r's sums over j <= i), then by rows j
  // (dkc's sum over i >= j); a thread owns the same rows in both, so no barrier between them.
  for (int e = tid; e < kL * 32; e += kThreads) {
    const int i = e / 32, c = e % 32;
    if (i >= len) continue;  // warp-uniform
    const float gi = G[i * kPitch + c];
    float dqa = 0.0f, r = 0.0f;
    for (int j = 0; j <= i; ++j) {
      const float d = ex2((gi - G[j * kPitch + c]) * kLog2e);
      const float kd = Kn[j * kPitch + c] * d;
      dqa = fmaf(Pq[i * s.ld_l + j], kd, dqa);
      r = fmaf(Pk[i * s.ld_l + j], kd, r);
    }
    const int at = i * kPitch + c;
    const float dkr = beta[i] * r;
    dQ[at] += dqa;
    dW[at] += dkr;
    dG[at] += Qn[at] * dqa + Kn[at] * dkr;
    const float part = warp_sum(r * Kn[at]);
    if (lane == 0) db[i] += part;
  }
  for (int e = tid; e < kL * 32; e += kThreads) {
    const int j = e / 32, c = e % 32;
    if (j >= len) continue;
    const float gj = G[j * kPitch + c];
    float dkc = 0.0f;
    for (int i = j; i < len; ++i) {
      const float d = ex2((G[i * kPitch + c] - gj) * kLog2e);
      const float w = fmaf(Pq[i * s.ld_l + j], Qn[i * kPitch + c],
                           Pk[i * s.ld_l + j] * beta[i] * Kn[i * kPitch + c]);
      dkc = fmaf(w, d, dkc);
    }
    const int at = j * kPitch + c;
    dW[at] += dkc;
    dG[at] -= Kn[at] * dkc;
  }
  __syncthreads();

  // The reverse cumsum: dg by the cumulative gate becomes dg by each token's decay.
  if (tid < 32) {
    float suffix = 0.0f;
    for (int i = len - 1; i >= 0; --i) {
      suffix += dG[i * kPitch + tid];
      dG[i * kPitch + tid] = suffix;
    }
  }
  __syncthreads();
  // Through the gate; dq and dk into the unit's sums over value heads.
  for (int e = tid; e < kL * 32; e += kThreads) {
    const int i = e / 32, c = e % 32;
    if (i >= len || c >= k_cols) continue;
    const int at = i * kPitch + c;
    float dg = dG[at];
    if (p.gate_in_kernel) {
      dg *= gate_value(p, gate_input<X>(p, span.batch, span.t0 + i, hv, k0 + c), A_log).d_x;
    }
    p.dg[((span.batch * p.T + span.t0 + i) * p.HV + hv) * p.K + k0 + c] = dg;
    smem[s.dq_acc + i * s.ld_k + k0 + c] += dQ[at];
    smem[s.dk_acc + i * s.ld_k + k0 + c] += dW[at];
  }
  __syncthreads();
}

// dq (or dk) of one row through l2norm's backward, dx = (dx̂ − x̂ (x̂ · dx̂)) / ||x||, and stored.
// Called by one warp.
template <typename X>
__device__ __forceinline__ void store_row_gradient(const EpilogueParams& p, const TokenView& x,
                                                   const float* d, float inv_norm, X* out,
                                                   int64_t b, int64_t t, int64_t h, int lane) {
  const int64_t origin = b * x.stride_batch + t * x.stride_token + h * x.stride_head;
  float dot = 0.0f;
  if (p.l2norm) {
    for (int64_t c = lane; c < p.K; c += 32) {
      dot = fmaf(load_float<X>(x.data, origin + c * x.stride_col) * inv_norm, d[c], dot);
    }
    dot = warp_sum(dot);
  }
  X* row = out + ((b * p.T + t) * p.H + h) * p.K;
  for (int64_t c = lane; c < p.K; c += 32) {
    float value = d[c];
    if (p.l2norm) {
      const float x_hat = load_float<X>(x.data, origin + c * x.stride_col) * inv_norm;
      value = inv_norm * (value - x_hat * dot);
    }
    row[c] = from_float<X>(value);
  }
}

template <typename X, int kL, typename Split>
__global__ void __launch_bounds__(kThreads, 1) chunk_bwd_epilogue_kernel(const EpilogueParams p) {
  extern __shared__ float4 smem_words[];
  float* smem = reinterpret_cast<float*>(smem_words);
  __shared__ ChunkSpan span;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) / p.H;
  const int64_t h = static_cast<int64_t>(blockIdx.x) % p.H;
  if (warp == 0) {
    const ChunkSpan found = resolve_chunk(p.chunks, chunk, p.chunk_size, lane);
    if (lane == 0) span = found;
  }
  __syncthreads();
  if (!span.valid) return;
  const SmemPlan& s = p.smem;
  const int len = span.len;

  // 1 / ||x|| of the chunk's q and k rows (1 without l2norm, 0 past the chunk).
  for (int i = warp; i < kL; i += kThreads / 32) {
    for (int which = 0; which < 2; ++which) {
      const TokenView& x = which == 0 ? p.q : p.k;
      float inv = 0.0f;
      if (i < len) {
        inv = 1.0f;
        if (p.l2norm) {
          const int64_t origin =
              span.batch * x.stride_batch + (span.t0 + i) * x.stride_token + h * x.stride_head;
          float sum = 0.0f;
          for (int64_t c = lane; c < p.K; c += 32) {
            const float value = load_float<X>(x.data, origin + c * x.stride_col);
            sum = fmaf(value, value, sum);
          }
          inv = 1.0f / sqrtf(warp_sum(sum) + 1e-6f);
        }
      }
      if (lane == 0) smem[(which == 0 ? s.q_inv : s.k_inv) + i] = inv;
    }
  }
  for (int e = tid; e < kL * s.ld_k; e += kThreads) {
    smem[s.dq_acc + e] = 0.0f;
    smem[s.dk_acc + e] = 0.0f;
  }

  const int64_t k_blocks = (p.K + 31) / 32;
  for (int64_t hv = h * p.heads_per_group; hv < (h + 1) * p.heads_per_group; ++hv) {
    __syncthreads();  // the previous value head's last reads of beta, db
    const float A_log = p.A_log != nullptr ? p.A_log[hv * p.A_log_stride] : 0.0f;
    // Akk (as stored, SPEC.md: no mask; columns past the chunk unread) and beta.
    const TokenView& A = p.A;
    const int64_t a_origin =
        span.batch * A.stride_batch + span.t0 * A.stride_token + hv * A.stride_head;
    for (int e = tid; e < kL * kL; e += kThreads) {
      const int i = e / kL, j = e % kL;
      float a = 0.0f;
      if (i < len && j < len)
        a = load_float<X>(A.data, a_origin + i * A.stride_token + j * A.stride_col);
      smem[s.akk + i * s.ld_l + j] = a;
    }
    if (tid < kL) {
      const BetaValue b =
          tid < len ? beta_value<X>(p, span.batch, span.t0 + tid, hv) : BetaValue{0.0f, 0.0f};
      smem[s.beta + tid] = b.value;
      smem[s.d_beta_raw + tid] = b.d_raw;
      smem[s.db + tid] = 0.0f;
    }
    __syncthreads();
    phase_a<X, kL, Split>(smem, s, p, span, h, hv, A_log);
    for (int64_t kb = 0; kb < k_blocks; ++kb)
      phase_b<X, kL, Split>(smem, s, p, span, h, hv, kb, A_log);
    if (tid < len) {
      p.dbeta[(span.batch * p.T + span.t0 + tid) * p.HV + hv] =
          smem[s.db + tid] * smem[s.d_beta_raw + tid];
    }
  }
  __syncthreads();
  for (int i = warp; i < len; i += kThreads / 32) {
    store_row_gradient<X>(p, p.q, smem + s.dq_acc + i * s.ld_k, smem[s.q_inv + i],
                          static_cast<X*>(p.dq), span.batch, span.t0 + i, h, lane);
    store_row_gradient<X>(p, p.k, smem + s.dk_acc + i * s.ld_k, smem[s.k_inv + i],
                          static_cast<X*>(p.dk), span.batch, span.t0 + i, h, lane);
  }
}

}  // namespace kda::cuda::epilogue
