#pragma once
// chunk_bwd_prep's kernel: one CTA of 256 threads per (chunk, value head). It reads the chunk's
// Akk and Aqk (on and below the diagonal, inside the chunk), beta and the rows' inverse norms
// once, then walks blocks of 32 channels:
//   over K: G, the cumulative natural-log decay (the gate's activation first, when it is in the
//     kernel); gk = G / ln 2, qg = q̂ e^G, kg = k̂ e^(G_last − G); w = Akk (β k̂ e^G);
//   over V: u = Akk (β v) and the intra-chunk dv = Aqkᵀ do.
// Every tile is float32 in shared memory; the three products run on the TF32 tensor cores
// (block_gemm; 3xTF32 for float32 X). Outputs are stored from there, one row per warp.

#include <cstdint>
#include <type_traits>

#include "cuda/common/block_gemm.cuh"
#include "cuda/common/chunk_units.cuh"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"
#include "ops/chunk_bwd_prep/cuda/params.hpp"

namespace kda::cuda::prep {

using epilogue::kPitch;
using epilogue::kThreads;
using mma::ALayout;
using mma::BLayout;
using mma::block_gemm;

constexpr float kLog2e = 1.4426950408889634f;

// e^x: the fast approximation (a few ulp, and an error growing with |x|) for 16-bit X, whose
// outputs round far coarser; expf for float32 X, held to float32's bar.
template <typename X>
__device__ __forceinline__ float exp_of(float x) {
  if constexpr (std::is_same_v<X, float>) {
    return expf(x);
  } else {
    return __expf(x);
  }
}

// The shared-memory plan for chunks of kL rows (float offsets): the two kL x kL matrices, beta
// and the inverse norms, and four kL x 32 blocks.
template <int kL>
struct Smem {
  static constexpr int kLdL = kL + 4;
  static constexpr int kSquare = kL * kLdL;
  static constexpr int kBlock = kL * kPitch;
  static constexpr int akk = 0;
  static constexpr int aqk = akk + kSquare;
  static constexpr int beta = aqk + kSquare;
  static constexpr int q_inv = beta + kL;
  static constexpr int k_inv = q_inv + kL;
  static constexpr int block0 = k_inv + kL;
  static constexpr int floats = block0 + 4 * kBlock;
  static constexpr int bytes = floats * 4;
};

// out(b, t0 + i, hv, col0 + c) = tile[i][c] for i < rows, c < cols (out contiguous [.., heads,
// width]).
template <typename T, int kL>
__device__ __forceinline__ void store_block(T* out, const float* tile, const PrepParams& p,
                                            int64_t b, int64_t t0, int64_t hv, int64_t width,
                                            int64_t col0, int rows, int64_t cols) {
  for (int e = static_cast<int>(threadIdx.x); e < kL * 32; e += kThreads) {
    const int i = e / 32, c = e % 32;
    if (i < rows && c < cols)
      out[((b * p.T + t0 + i) * p.HV + hv) * width + col0 + c] =
          from_float<T>(tile[i * kPitch + c]);
  }
}

template <typename X, int kL, typename Split>
__global__ void __launch_bounds__(kThreads) chunk_bwd_prep_kernel(const PrepParams p) {
  using S = Smem<kL>;
  extern __shared__ float4 smem_words[];
  float* smem = reinterpret_cast<float*>(smem_words);
  __shared__ ChunkSpan span;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) / p.HV;
  const int64_t hv = static_cast<int64_t>(blockIdx.x) % p.HV;
  const int64_t h = hv / p.heads_per_group;
  if (warp == 0) {
    const ChunkSpan found = resolve_chunk(p.chunks, chunk, p.chunk_size, lane);
    if (lane == 0) span = found;
  }
  __syncthreads();
  if (!span.valid) return;
  const int len = span.len;
  const int64_t b = span.batch, t0 = span.t0;
  float* const akk = smem + S::akk;
  float* const aqk = smem + S::aqk;
  float* const beta = smem + S::beta;
  float* const q_inv = smem + S::q_inv;
  float* const k_inv = smem + S::k_inv;
  float* const G = smem + S::block0;
  float* const X0 = G + S::kBlock;
  float* const X1 = X0 + S::kBlock;
  float* const Y = X1 + S::kBlock;

  // 1 / ||x|| of the chunk's q and k rows (1 without l2norm, 0 past the chunk).
  for (int i = warp; i < kL; i += kThreads / 32) {
    for (int which = 0; which < 2; ++which) {
      const TokenView& x = which == 0 ? p.q : p.k;
      float inv = 0.0f;
      if (i < len) {
        inv = 1.0f;
        if (p.l2norm) {
          const int64_t origin = b * x.stride_batch + (t0 + i) * x.stride_token + h * x.stride_head;
          float sum = 0.0f;
          for (int64_t c = lane; c < p.K; c += 32) {
            const float value = load_float<X>(x.data, origin + c * x.stride_col);
            sum = fmaf(value, value, sum);
          }
          inv = 1.0f / sqrtf(epilogue::warp_sum(sum) + 1e-6f);
        }
      }
      if (lane == 0) (which == 0 ? q_inv : k_inv)[i] = inv;
    }
  }
  // Akk and Aqk on and below the diagonal, inside the chunk; 0 elsewhere.
  for (int e = tid; e < kL * kL; e += kThreads) {
    const int i = e / kL, j = e % kL;
    float a = 0.0f, aq = 0.0f;
    if (j <= i && i < len) {
      const int64_t row = b * p.A.stride_batch + (t0 + i) * p.A.stride_token + hv * p.A.stride_head;
      a = load_float<X>(p.A.data, row + j * p.A.stride_col);
      const int64_t row_q =
          b * p.Aqk.stride_batch + (t0 + i) * p.Aqk.stride_token + hv * p.Aqk.stride_head;
      aq = load_float<X>(p.Aqk.data, row_q + j * p.Aqk.stride_col);
    }
    akk[i * S::kLdL + j] = a;
    aqk[i * S::kLdL + j] = aq;
  }
  if (tid < kL) beta[tid] = tid < len ? epilogue::beta_value<X>(p, b, t0 + tid, hv).value : 0.0f;
  const float A_log = p.A_log != nullptr ? p.A_log[hv * p.A_log_stride] : 0.0f;
  __syncthreads();

  for (int64_t col0 = 0; col0 < p.K; col0 += 32) {
    const int64_t cols = p.K - col0 < 32 ? p.K - col0 : 32;
    {
      float* const dsts[2] = {X0, X1};
      const TokenView* const srcs[2] = {&p.q, &p.k};
      epilogue::load_blocks<X, kL, 2>(dsts, srcs, b, t0, h, col0, len, cols);
    }
    epilogue::gate_block<X, kL>(G, p, b, t0, hv, col0, len, A_log);  // synchronizes
    // gk, qg, kg out; X1 becomes β k̂ e^G (rows past the chunk stay 0).
    for (int e = tid; e < kL * 32; e += kThreads) {
      const int i = e / 32, c = e % 32;
      if (i >= len || c >= cols) continue;
      const float g = G[i * kPitch + c];
      const float decay = exp_of<X>(g);
      const float k_hat = X1[i * kPitch + c] * k_inv[i];
      const int64_t at = ((b * p.T + t0 + i) * p.HV + hv) * p.K + col0 + c;
      p.gk[at] = g * kLog2e;
      static_cast<X*>(p.qg)[at] = from_float<X>(X0[i * kPitch + c] * q_inv[i] * decay);
      static_cast<X*>(p.kg)[at] = from_float<X>(k_hat * exp_of<X>(G[(len - 1) * kPitch + c] - g));
      X1[i * kPitch + c] = beta[i] * k_hat * decay;
    }
    __syncthreads();
    block_gemm<ALayout::kMK, BLayout::kKN, kL, 32, kL, Split>(Y, kPitch, akk, S::kLdL, X1, kPitch,
                                                              1.0f, false);
    __syncthreads();
    store_block<X, kL>(static_cast<X*>(p.w), Y, p, b, t0, hv, p.K, col0, len, cols);
  }

  for (int64_t col0 = 0; col0 < p.V; col0 += 32) {
    const int64_t cols = p.V - col0 < 32 ? p.V - col0 : 32;
    epilogue::load_block<X, kL>(X0, p.v, b, t0, hv, col0, len, cols, beta);
    epilogue::load_block<X, kL>(X1, p.do_, b, t0, hv, col0, len, cols);
    __syncthreads();
    block_gemm<ALayout::kMK, BLayout::kKN, kL, 32, kL, Split>(Y, kPitch, akk, S::kLdL, X0, kPitch,
                                                              1.0f, false);
    block_gemm<ALayout::kKM, BLayout::kKN, kL, 32, kL, Split>(G, kPitch, aqk, S::kLdL, X1, kPitch,
                                                              1.0f, false);
    __syncthreads();
    store_block<X, kL>(static_cast<X*>(p.u), Y, p, b, t0, hv, p.V, col0, len, cols);
    store_block<X, kL>(static_cast<X*>(p.dv), G, p, b, t0, hv, p.V, col0, len, cols);
  }
}

}  // namespace kda::cuda::prep
