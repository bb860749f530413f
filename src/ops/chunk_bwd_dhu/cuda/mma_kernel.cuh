#pragma once
// chunk_bwd_dhu's tensor-core kernel, for 16-bit X, chunks of 64, K <= 128 and V a multiple of
// 8, every tile row copyable in 16-byte pieces (mma_kernel_takes in cuda.cu). One CTA of 8 warps
// per (sequence, value head, slice of 32 value columns) walks the sequence's chunks from the
// last to the first. Its slice of the state gradient D (128 x 32, K zero-padded) stays in
// registers as mma accumulators, warp w holding rows 16 w .. 16 w + 15. Each step:
//   D -> shared memory in X (the k·D operand, and dh's store)
//   dv2 = dv + 2^(g_last - g) kg·D        warp w: rows 16 (w % 4), columns 16 (w / 4)
//   D   = decay ⊙ D + scale qgᵀ·do − wᵀ·dv2
// qgᵀ·do does not depend on D and is issued before the chain's products. The next chunk's
// tiles are copied (cp.async) while the current one runs, two stages.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "ops/chunk_bwd_dhu/cuda/params.hpp"
#include "ops/chunk_bwd_dhu/cuda/sequence.cuh"

namespace kda::cuda::dhu::mma16 {

using mma::ALayout;
using mma::BLayout;

constexpr int kL = 64;      // chunk size
constexpr int kKPad = 128;  // K, zero-padded
constexpr int kBV = 32;     // value columns per CTA
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kPitchK = kKPad + 8;  // tile pitches (elements): conflict-free ldmatrix rows
constexpr int kPitchV = kBV + 8;

// One stage of a chunk's tiles (element offsets into the X region of a stage).
constexpr int kQ = 0;
constexpr int kKg = kQ + kL * kPitchK;
constexpr int kW = kKg + kL * kPitchK;
constexpr int kDo = kW + kL * kPitchK;
constexpr int kDv = kDo + kL * kPitchV;
constexpr int kStageX = kDv + kL * kPitchV;
// Float region of a stage: gk at the chunk's last token (kKPad) and g per row (kL).
constexpr int kStageFloats = kKPad + kL;
constexpr int kStageBytes = kStageX * 2 + kStageFloats * 4;
// After the two stages: D in X (kKPad x kPitchV) and -dv2 in X (kL x kPitchV).
constexpr int kSmemBytes = 2 * kStageBytes + (kKPad + kL) * kPitchV * 2;

__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(mma::smem_u32(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ int64_t at(const TokenView& v, int64_t b, int64_t t, int64_t head) {
  return b * v.stride_batch + t * v.stride_token + head * v.stride_head;
}

// Rows [0, kL) of `cols` (a multiple of 8) 16-bit columns from src + row * stride_token (rows at
// or past `len`, and columns past `valid_cols`, zero-filled) into dst (pitch `pitch`).
template <typename X>
__device__ __forceinline__ void copy_rows(X* dst, int pitch, const X* src, int64_t stride_token,
                                          int len, int cols, int valid_cols) {
  const int pieces = cols / 8;
  for (int e = static_cast<int>(threadIdx.x); e < kL * pieces; e += kThreads) {
    const int r = e / pieces, c = (e % pieces) * 8;
    const bool inside = r < len && c < valid_cols;
    mma::cp_async_16(dst + r * pitch + c, inside ? src + r * stride_token + c : src,
                     inside ? 16 : 0);
  }
}

template <typename X>
struct Stage {
  X* x;
  float* gk_last;
  float* g;
  __device__ Stage(unsigned char* base, int index) {
    unsigned char* s = base + index * kStageBytes;
    x = reinterpret_cast<X*>(s);
    gk_last = reinterpret_cast<float*>(s + kStageX * 2);
    g = gk_last + kKPad;
  }
};

// Issues the copies of chunk [t0, t0 + len) of sequence row b into `st`.
template <typename X>
__device__ __forceinline__ void prefetch(const DhuParams& p, const Stage<X>& st, int64_t b,
                                         int64_t t0, int len, int64_t h, int64_t hv, int64_t v0) {
  const int K = static_cast<int>(p.K);
  const int valid_v = static_cast<int>(p.V - v0 < kBV ? p.V - v0 : kBV);
  copy_rows<X>(st.x + kQ, kPitchK, static_cast<const X*>(p.q.data) + at(p.q, b, t0, h),
               p.q.stride_token, len, kKPad, K);
  copy_rows<X>(st.x + kKg, kPitchK, static_cast<const X*>(p.k.data) + at(p.k, b, t0, h),
               p.k.stride_token, len, kKPad, K);
  copy_rows<X>(st.x + kW, kPitchK, static_cast<const X*>(p.w.data) + at(p.w, b, t0, hv),
               p.w.stride_token, len, kKPad, K);
  copy_rows<X>(st.x + kDo, kPitchV, static_cast<const X*>(p.do_.data) + at(p.do_, b, t0, hv) + v0,
               p.do_.stride_token, len, kBV, valid_v);
  copy_rows<X>(st.x + kDv, kPitchV, static_cast<const X*>(p.dv.data) + at(p.dv, b, t0, hv) + v0,
               p.dv.stride_token, len, kBV, valid_v);
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t last = t0 + len - 1;
  // The gates only when given (the kernel reads them only then).
  if (tid < kKPad && p.gk.data != nullptr) {
    const bool inside = tid < K;
    const float* src = static_cast<const float*>(p.gk.data) + at(p.gk, b, last, hv);
    cp_async_4(st.gk_last + tid, inside ? src + tid * p.gk.stride_col : src, inside ? 4 : 0);
  } else if (tid >= kKPad && tid < kKPad + kL && p.g.data != nullptr) {
    const int r = tid - kKPad;
    const bool inside = r < len;
    const float* src = static_cast<const float*>(p.g.data) + b * p.g.stride_batch +
                       t0 * p.g.stride_token + hv * p.g.stride_head;
    cp_async_4(st.g + r, inside ? src + r * p.g.stride_token : src, inside ? 4 : 0);
  }
}

template <typename X>
__global__ void __launch_bounds__(kThreads, 1) chunk_bwd_dhu_mma_kernel(const DhuParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t n = blockIdx.x / p.HV, hv = blockIdx.x % p.HV, h = hv / p.heads_per_group;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * kBV;
  const SequenceSpan seq = resolve_sequence(p, n);
  if (!seq.valid) return;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g8 = lane / 4, tq = lane % 4;
  X* D_x = reinterpret_cast<X*>(smem + 2 * kStageBytes);  // kKPad x kPitchV
  X* dv2_neg = D_x + kKPad * kPitchV;                     // kL x kPitchV
  const bool use_g = p.g.data != nullptr;
  const int64_t b = seq.batch;

  // D's fragment: rows 16 warp + g8 (+ 8), columns 8 nt + 2 tq (+ 1).
  float D[4][4];
  const int row0 = 16 * warp;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t k = row0 + g8 + 8 * (e / 2), v = v0 + 8 * nt + 2 * tq + (e & 1);
      float x = 0.0f;
      if (p.dht.data != nullptr && k < p.K && v < p.V) {
        const int64_t o =
            n * p.dht.stride_seq + hv * p.dht.stride_head + k * p.dht.stride_k + v * p.dht.stride_v;
        x = p.dht_is_f32 ? load_float<float>(p.dht.data, o) : load_float<X>(p.dht.data, o);
      }
      D[nt][e] = x;
    }
  }

  auto chunk_len = [&](int64_t c) {
    const int64_t t0 = seq.bos + c * kL;
    return static_cast<int>(seq.eos - t0 < kL ? seq.eos - t0 : kL);
  };
  if (seq.chunks > 0) {
    const int64_t c = seq.chunks - 1;
    prefetch<X>(p, Stage<X>(smem, 0), b, seq.bos + c * kL, chunk_len(c), h, hv, v0);
  }
  mma::cp_async_commit();
  const int valid_v = static_cast<int>(p.V - v0 < kBV ? p.V - v0 : kBV);
  for (int64_t i = 0; i < seq.chunks; ++i) {
    const int64_t c = seq.chunks - 1 - i;
    const int64_t t0 = seq.bos + c * kL;
    const int len = chunk_len(c);
    // D in X for k·D and dh (the last step's reads of D_x ended at its middle barrier).
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row0 + g8 + 8 * half, col = 8 * nt + 2 * tq;
        *reinterpret_cast<uint32_t*>(D_x + r * kPitchV + col) =
            mma::pack2<X>(D[nt][2 * half], D[nt][2 * half + 1]);
      }
    }
    mma::cp_async_wait<0>();
    __syncthreads();
    // Every warp is past the last step, so its stage can take the next chunk's tiles.
    if (i + 1 < seq.chunks) {
      prefetch<X>(p, Stage<X>(smem, static_cast<int>((i + 1) & 1)), b, t0 - kL, kL, h, hv, v0);
    }
    mma::cp_async_commit();
    const Stage<X> st(smem, static_cast<int>(i & 1));
    const float g_last = use_g ? st.g[len - 1] : 0.0f;

    // With the per-head gate, do's rows take 2^g (the q side of fla's qg).
    if (use_g) {
      for (int e = tid; e < kL * kBV / 2; e += kThreads) {
        const int r = e / (kBV / 2), col = 2 * (e % (kBV / 2));
        uint32_t* pair = reinterpret_cast<uint32_t*>(st.x + kDo + r * kPitchV + col);
        const float2 x = mma::unpack2<X>(*pair);
        const float f = exp2f(st.g[r]);
        *pair = mma::pack2<X>(x.x * f, x.y * f);
      }
      __syncthreads();
    }

    // dh[c] = D (in X), from D_x: whole 16-byte pieces along the stored order.
    {
      X* dh = static_cast<X*>(const_cast<void*>(p.dh.data)) + b * p.dh.stride_batch +
              (seq.chunk0 + c) * p.dh.stride_chunk + hv * p.dh.stride_head;
      const int K = static_cast<int>(p.K);
      if (p.dh.stride_v == 1) {  // [.., K, V]: rows k, 32 columns
        for (int e = tid; e < K * (kBV / 8); e += kThreads) {
          const int k = e / (kBV / 8), col = 8 * (e % (kBV / 8));
          if (col < valid_v) {
            *reinterpret_cast<uint4*>(dh + k * p.dh.stride_k + v0 + col) =
                *reinterpret_cast<const uint4*>(D_x + k * kPitchV + col);
          }
        }
      } else {  // [.., V, K]: rows v, K columns gathered from D_x's column (a warp's lanes
                // take adjacent columns j, so its shared loads are conflict-free)
        for (int e = tid; e < valid_v * (K / 8); e += kThreads) {
          const int j = e % valid_v, k0 = 8 * (e / valid_v);
          alignas(16) X piece[8];
#pragma unroll
          for (int u = 0; u < 8; ++u) piece[u] = D_x[(k0 + u) * kPitchV + j];
          *reinterpret_cast<uint4*>(dh + (v0 + j) * p.dh.stride_v + k0) =
              *reinterpret_cast<const uint4*>(piece);
        }
      }
    }

    // qgᵀ·do, off the chain: rows 16 warp of K, 32 columns, over the chunk's 64 rows.
    float from_q[4][4] = {};
    mma::warp_mma<X, ALayout::kKM, BLayout::kKN, kL / 16, 4>(from_q, st.x + kQ + row0, kPitchK,
                                                             st.x + kDo, kPitchV, lane);
    // dv2 = dv + 2^(g_last - g) kg·D: warp's 16 x 16 tile.
    {
      const int r0 = 16 * (warp % 4), c0 = 16 * (warp / 4);
      float acc[2][4] = {};
      mma::warp_mma<X, ALayout::kMK, BLayout::kKN, kKPad / 16, 2>(acc, st.x + kKg + r0 * kPitchK,
                                                                  kPitchK, D_x + c0, kPitchV, lane);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + g8 + 8 * half, col = c0 + 8 * nt + 2 * tq;
          const float f = use_g ? exp2f(g_last - st.g[r]) : 1.0f;
          const float2 dv =
              mma::unpack2<X>(*reinterpret_cast<const uint32_t*>(st.x + kDv + r * kPitchV + col));
          const uint32_t total =
              mma::pack2<X>(dv.x + f * acc[nt][2 * half], dv.y + f * acc[nt][2 * half + 1]);
          const float2 stored = mma::unpack2<X>(total);
          *reinterpret_cast<uint32_t*>(dv2_neg + r * kPitchV + col) =
              mma::pack2<X>(-stored.x, -stored.y);  // exact: negation does not round
          if (r < len && col < valid_v) {
            *reinterpret_cast<uint32_t*>(static_cast<X*>(p.dv2) +
                                         ((b * p.T + t0 + r) * p.HV + hv) * p.V + v0 + col) = total;
          }
        }
      }
    }
    __syncthreads();
    // D = decay ⊙ D + scale qgᵀ·do − wᵀ·dv2.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = row0 + g8 + 8 * half;
      const float decay = exp2f(g_last) * (p.gk.data != nullptr ? exp2f(st.gk_last[k]) : 1.0f);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int e = 2 * half + u;
          D[nt][e] = fmaf(decay, D[nt][e], p.scale * from_q[nt][e]);
        }
      }
    }
    mma::warp_mma<X, ALayout::kKM, BLayout::kKN, kL / 16, 4>(D, st.x + kW + row0, kPitchK, dv2_neg,
                                                             kPitchV, lane);
  }
  mma::cp_async_wait<0>();

  // dh0 = D after the first chunk (float32).
  float* dh0 = static_cast<float*>(const_cast<void*>(p.dh0.data));
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t k = row0 + g8 + 8 * (e / 2), v = v0 + 8 * nt + 2 * tq + (e & 1);
      if (k < p.K && v < p.V) {
        dh0[n * p.dh0.stride_seq + hv * p.dh0.stride_head + k * p.dh0.stride_k +
            v * p.dh0.stride_v] = D[nt][e];
      }
    }
  }
}

}  // namespace kda::cuda::dhu::mma16
