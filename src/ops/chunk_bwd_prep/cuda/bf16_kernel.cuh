#pragma once
// chunk_bwd_prep's bf16 kernel for the model's shape (bf16 inputs, chunks of 64 tokens,
// K = V = 128, any head grouping; rows copyable in 16-byte pieces): every other problem runs the
// general kernel (kernel.cuh). One CTA of 16 warps per (chunk, value head), two CTAs per SM:
//   - every input tile is copied once with cp.async (q and k first, for the norms), the gate's
//     inputs go to registers, thread (c, segment) holding 16 rows of channel c;
//   - the elementwise pass writes gk, qg and kg from there and leaves the w operand
//     k̂ ⊙ e^G in place of k and q (split into bf16 hi and lo terms);
//   - w = A' (k̂ ⊙ e^G) and u = A' v with A' = Akk diag(β) (split), dv = Aqkᵀ do (exact bf16
//     operands), on mma.sync m16n8k16; warp w owns rows 16 (w % 4) and columns 32 (w / 4) of
//     each product, and skips the k steps where the triangular matrix is zero;
//   - w, u and dv go back through shared memory so that every store is a whole 16-byte piece.

#include <cstdint>

#include "cuda/common/chunk_units.cuh"
#include "cuda/common/fast_math.cuh"
#include "ops/chunk_bwd_epilogue/cuda/bf16/chunk_inputs.cuh"
#include "ops/chunk_bwd_epilogue/cuda/bf16/warp_ops.cuh"
#include "ops/chunk_bwd_prep/cuda/params.hpp"

namespace kda::cuda::prep::bf16 {

// The shapes, tile copies and warp pieces of the bf16 kernels (declared here, so that they hide
// the general kernel's names of namespace prep).
using epilogue::bf16::Bf16;
using epilogue::bf16::copy_tile;
using epilogue::bf16::for_each_pair;
using epilogue::bf16::gate_segment_cumsum;
using epilogue::bf16::kD;
using epilogue::bf16::kL;
using epilogue::bf16::kLog2e;
using epilogue::bf16::kPitchD;
using epilogue::bf16::kPitchL;
using epilogue::bf16::kThreads;
using epilogue::bf16::kTileD;
using epilogue::bf16::kTileL;
using epilogue::bf16::Lane;
using epilogue::bf16::load_gate_inputs;
using epilogue::bf16::load_pair;
using epilogue::bf16::mma3;
using epilogue::bf16::row_inv_norms;
using epilogue::bf16::segment_offsets;
using epilogue::bf16::shared_chunk_span;
using epilogue::bf16::Smem;
using epilogue::bf16::split2;
using epilogue::bf16::token_rows;
using epilogue::bf16::zero_acc;
using mma::ALayout;
using mma::BLayout;

// The shared-memory map (byte offsets); regions are reused as the CTA goes on.
constexpr int kAkk = 0;               // Akk as copied, then A' = Akk diag(β) (hi)
constexpr int kAkkLo = kTileL;        // A' (lo)
constexpr int kAqk = 2 * kTileL;      // Aqk, masked to j <= i < len
constexpr int kQ = 3 * kTileL;        // q, then the w operand (lo), then w
constexpr int kK = kQ + kTileD;       // k, then the w operand (hi), then u
constexpr int kV = kK + kTileD;       // v, then dv
constexpr int kDo = kV + kTileD;      // do
constexpr int kSmall = kDo + kTileD;  // float32 vectors (offsets below, in floats)
constexpr int kBeta = 0;
constexpr int kInvQ = kBeta + kL;
constexpr int kInvK = kInvQ + kL;
constexpr int kTotals = kInvK + kL;  // [4 segments][kD] the gate's segment sums
constexpr int kSmemBytes = kSmall + (kTotals + 4 * kD) * 4;
static_assert(2 * (kSmemBytes + 1024) <= 228 * 1024, "two CTAs per SM");

// out rows 0 .. len - 1 (row r at out + r * row_stride) = the 64 x 128 bf16 tile, in 16-byte
// pieces.
__device__ __forceinline__ void store_tile(Bf16* out, int64_t row_stride, const Bf16* tile,
                                           int len) {
  constexpr int kPieces = kD / 8;
#pragma unroll
  for (int m = 0; m < kL * kPieces / kThreads; ++m) {
    const int e = static_cast<int>(threadIdx.x) + m * kThreads;
    const int r = e / kPieces, c = (e % kPieces) * 8;
    if (r < len) {
      *reinterpret_cast<uint4*>(out + r * row_stride + c) =
          *reinterpret_cast<const uint4*>(tile + r * kPitchD + c);
    }
  }
}

// A 16 x 32 accumulator tile rounded to bf16 at (row0, col0) of a kPitchD tile.
__device__ __forceinline__ void store_acc(Bf16* tile, const float (&acc)[4][4], int row0, int col0,
                                          const Lane& l) {
  for_each_pair<4>(l, row0, col0, [&](int nt, int half, int row, int col) {
    *reinterpret_cast<__nv_bfloat162*>(tile + row * kPitchD + col) =
        __floats2bfloat162_rn(acc[nt][2 * half], acc[nt][2 * half + 1]);
  });
}

__global__ void __launch_bounds__(kThreads, 2) chunk_bwd_prep_bf16_kernel(const PrepParams p) {
  extern __shared__ float4 smem_words[];
  const Smem sm{reinterpret_cast<char*>(smem_words)};
  __shared__ ChunkSpan span_shared;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32;
  const Lane l(tid % 32);
  const int rs = warp % 4, cq = warp / 4;  // the warp's row slice and column quarter
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) / p.HV;
  const int64_t hv = static_cast<int64_t>(blockIdx.x) % p.HV;
  const int64_t h = hv / p.heads_per_group;
  const ChunkSpan span = shared_chunk_span(p.chunks, chunk, p.chunk_size, &span_shared);
  if (!span.valid) return;
  const int len = span.len;
  float* const small = sm.f32(kSmall);
  Bf16* const sA = sm.bf(kAkk);
  Bf16* const sAlo = sm.bf(kAkkLo);
  Bf16* const sAqk = sm.bf(kAqk);
  Bf16* const sQ = sm.bf(kQ);
  Bf16* const sK = sm.bf(kK);
  Bf16* const sV = sm.bf(kV);
  Bf16* const sDo = sm.bf(kDo);
  const float A_log = p.A_log != nullptr ? p.A_log[hv * p.A_log_stride] : 0.0f;

  const int c = tid % kD, seg = tid / kD;
  float gate[16];
  load_gate_inputs(gate, p, span, hv, c, seg);
  copy_tile<kL, kD, kPitchD>(sQ, token_rows(p.q, span, h), p.q.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sK, token_rows(p.k, span, h), p.k.stride_token, len);
  mma::cp_async_commit();
  copy_tile<kL, kL, kPitchL>(sA, token_rows(p.A, span, hv), p.A.stride_token, len);
  copy_tile<kL, kL, kPitchL>(sAqk, token_rows(p.Aqk, span, hv), p.Aqk.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sV, token_rows(p.v, span, hv), p.v.stride_token, len);
  copy_tile<kL, kD, kPitchD>(sDo, token_rows(p.do_, span, hv), p.do_.stride_token, len);
  mma::cp_async_commit();
  if (tid < kL) {
    small[kBeta + tid] =
        tid < len ? epilogue::beta_value<Bf16>(p, span.batch, span.t0 + tid, hv).value : 0.0f;
  }
  gate_segment_cumsum(gate, small + kTotals, p, len, A_log);
  mma::cp_async_wait<1>();
  __syncthreads();  // q, k, β and the segment sums
  row_inv_norms(small + kInvQ, sQ, len, p.l2norm, warp, l.lane);
  row_inv_norms(small + kInvK, sK, len, p.l2norm, warp, l.lane);
  __syncthreads();

  // gk, qg and kg out; the w operand k̂ ⊙ e^G (0 past the chunk) in place of k (hi) and q (lo):
  // each element is read and rewritten by its own thread.
  const int64_t row0 = (span.batch * p.T + span.t0) * p.HV + hv;  // the chunk's first output row
  {
    const float* inv_q = small + kInvQ;
    const float* inv_k = small + kInvK;
    const float2 offsets = segment_offsets(small + kTotals, c, seg);
    const float last2 = offsets.y * kLog2e;
    auto* qg = static_cast<Bf16*>(p.qg);
    auto* kg = static_cast<Bf16*>(p.kg);
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int i = 16 * seg + r;
      const float g2 = (offsets.x + gate[r]) * kLog2e;
      const float decay = ex2(g2);
      const float k_hat = __bfloat162float(sK[i * kPitchD + c]) * inv_k[i];
      if (i < len) {
        const int64_t at = (row0 + i * p.HV) * kD + c;
        p.gk[at] = g2;
        qg[at] = __float2bfloat16_rn(__bfloat162float(sQ[i * kPitchD + c]) * inv_q[i] * decay);
        kg[at] = __float2bfloat16_rn(k_hat * ex2(last2 - g2));
      }
      const float operand = k_hat * decay;
      const Bf16 hi = __float2bfloat16_rn(operand);
      sK[i * kPitchD + c] = hi;
      sQ[i * kPitchD + c] = __float2bfloat16_rn(operand - __bfloat162float(hi));
    }
  }
  mma::cp_async_wait<0>();
  __syncthreads();  // Akk, Aqk, v, do and the w operand

  // A' = Akk diag(β) and Aqk on and below the diagonal, inside the chunk; 0 elsewhere (entries
  // above it are never read: they are replaced, whatever they hold).
  {
    const float* beta = small + kBeta;
    for (int e = tid; e < kL * kL / 2; e += kThreads) {
      const int i = e / (kL / 2), j = 2 * (e % (kL / 2));
      const bool row_in = i < len;
      const float2 a = load_pair(sA + i * kPitchL + j);
      const float2 aq = load_pair(sAqk + i * kPitchL + j);
      uint32_t hi, lo;
      split2(row_in && j <= i ? a.x * beta[j] : 0.0f, row_in && j < i ? a.y * beta[j + 1] : 0.0f,
             hi, lo);
      *reinterpret_cast<uint32_t*>(sA + i * kPitchL + j) = hi;
      *reinterpret_cast<uint32_t*>(sAlo + i * kPitchL + j) = lo;
      *reinterpret_cast<__nv_bfloat162*>(sAqk + i * kPitchL + j) =
          __floats2bfloat162_rn(row_in && j <= i ? aq.x : 0.0f, row_in && j < i ? aq.y : 0.0f);
    }
  }
  __syncthreads();

  const Bf16* const a_rows = sA + 16 * rs * kPitchL;
  const Bf16* const a_lo_rows = sAlo + 16 * rs * kPitchL;
  float acc[4][4];
  // w = A' (k̂ ⊙ e^G): both sides split. A' is lower triangular: k steps s <= rs.
  zero_acc(acc);
  for (int s = 0; s <= rs; ++s) {
    uint32_t a_hi[4], a_lo[4], b_hi[4][2], b_lo[4][2];
    mma::load_a<ALayout::kMK>(a_hi, a_rows + 16 * s, kPitchL, l.lane);
    mma::load_a<ALayout::kMK>(a_lo, a_lo_rows + 16 * s, kPitchL, l.lane);
    mma::load_b<BLayout::kKN, 4>(b_hi, sK + 16 * s * kPitchD + 32 * cq, kPitchD, l.lane);
    mma::load_b<BLayout::kKN, 4>(b_lo, sQ + 16 * s * kPitchD + 32 * cq, kPitchD, l.lane);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) mma3(acc[nt], a_hi, a_lo, b_hi[nt], b_lo[nt]);
  }
  __syncthreads();  // the w operand read
  store_acc(sQ, acc, 16 * rs, 32 * cq, l);

  // u = A' v (A' split, v exact) and dv = Aqkᵀ do (exact operands; Aqkᵀ is upper triangular:
  // k steps s >= rs).
  float dv[4][4];
  zero_acc(acc);
  zero_acc(dv);
#pragma unroll
  for (int s = 0; s < kL / 16; ++s) {
    if (s <= rs) {
      uint32_t a_hi[4], a_lo[4], b[4][2];
      mma::load_a<ALayout::kMK>(a_hi, a_rows + 16 * s, kPitchL, l.lane);
      mma::load_a<ALayout::kMK>(a_lo, a_lo_rows + 16 * s, kPitchL, l.lane);
      mma::load_b<BLayout::kKN, 4>(b, sV + 16 * s * kPitchD + 32 * cq, kPitchD, l.lane);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        mma::mma_16816<Bf16>(acc[nt], a_hi, b[nt]);
        mma::mma_16816<Bf16>(acc[nt], a_lo, b[nt]);
      }
    }
    if (s >= rs) {
      uint32_t a[4], b[4][2];
      mma::load_a<ALayout::kKM>(a, sAqk + 16 * s * kPitchL + 16 * rs, kPitchL, l.lane);
      mma::load_b<BLayout::kKN, 4>(b, sDo + 16 * s * kPitchD + 32 * cq, kPitchD, l.lane);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) mma::mma_16816<Bf16>(dv[nt], a, b[nt]);
    }
  }
  __syncthreads();  // v read
  store_acc(sK, acc, 16 * rs, 32 * cq, l);
  store_acc(sV, dv, 16 * rs, 32 * cq, l);
  __syncthreads();
  const int64_t row_stride = p.HV * kD;
  store_tile(static_cast<Bf16*>(p.w) + row0 * kD, row_stride, sQ, len);
  store_tile(static_cast<Bf16*>(p.u) + row0 * kD, row_stride, sK, len);
  store_tile(static_cast<Bf16*>(p.dv) + row0 * kD, row_stride, sV, len);
}

}  // namespace kda::cuda::prep::bf16
