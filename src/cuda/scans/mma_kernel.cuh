#pragma once
// The state scans' tensor-core kernel, both directions, for 16-bit X, chunks of 64, K <= 128 and
// V a multiple of 8, every tile row copyable in 16-byte pieces (mma_kernel_takes). One CTA of 8
// warps per (sequence, value head, slice of 32 value columns) walks the sequence's chunks (the
// reverse scan from the last, the forward scan from the first). Its slice of the state S
// (128 x 32, K zero-padded) stays in registers as mma accumulators, warp w holding rows
// 16 w .. 16 w + 15. Each step (simt_kernel.cuh has the math in full):
//   S -> shared memory in X (the per-token product's operand, and the states' store)
//   values = the per-token product (reverse dv + f kg·S, forward u − w·S), warp w: rows
//            16 (w % 4), columns 16 (w / 4); stored, and as they enter the update to shared memory
//   S = decay ⊙ S (+ scale qgᵀ·do, reverse) + Aᵀ·entering (reverse A = w and −dv2, forward kg)
// qgᵀ·do does not depend on S and is issued after the per-token product. The next chunk's tiles
// are copied at the step's start, so that they have the whole step to land (two stages): the
// K-wide ones (reverse kg, w, q: 48 KB; forward w, kg) by six or four bulk tensor copies from one
// thread, which keep the load pipe free for the step's ldmatrix, the 32-column ones (do, the
// values) by cp.async.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/mma_fragments.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/scans/params.hpp"
#include "cuda/scans/sequence.cuh"

namespace kda::cuda::scans::mma16 {

using mma::ALayout;
using mma::BLayout;

constexpr int kL = 64;      // chunk size
constexpr int kKPad = 128;  // K, zero-padded
constexpr int kBV = 32;     // value columns per CTA
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
// Pitches (elements) of the padded tiles, whose ldmatrix rows are conflict-free: K-wide rows (the
// transposed state) and 32-column rows (do, the values, the state, the entering values).
constexpr int kPitchK = kKPad + 8;
constexpr int kPitchV = kBV + 8;

// One stage of a chunk's tiles (element offsets into the X region of a stage). The K-wide tiles
// arrive by bulk tensor copies (TMA) with the 128-byte swizzle, as two halves of 64 columns
// (kL rows of 128 bytes each, swizzled_at): the per-token product's A (reverse kg, forward w),
// the update's A (reverse w, forward kg) and q (reverse). The value-wide tiles arrive by
// cp.async at pitch kPitchV: do (reverse) and the values (reverse dv, forward u).
constexpr int kHalfCols = 64;
constexpr int kKTileElems = kL * kKPad;
constexpr int kFirst = 0;
constexpr int kSecond = kFirst + kKTileElems;
constexpr int kQ = kSecond + kKTileElems;
constexpr int kDo = kQ + kKTileElems;
constexpr int kValues = kDo + kL * kPitchV;
constexpr int kStageX = kValues + kL * kPitchV;
// Float region of a stage: gk at the chunk's last token (kKPad) and g per row (kL).
constexpr int kStageFloats = kKPad + kL;
// Stages start 1024-byte aligned (the swizzle's period).
constexpr int kStageBytes = (kStageX * 2 + kStageFloats * 4 + 1023) / 1024 * 1024;
// After the two stages, in X: S twice (kKPad x kPitchV, one per step parity, so that a step's
// states store can trail its products), S transposed twice for [.., V, K] states (kBV x
// kPitchK), and the entering values (kL x kPitchV); then one barrier per stage, whose phase
// completes when the stage's tensor copies have landed.
constexpr int kSx = 2 * kStageBytes;
constexpr int kSt = kSx + 2 * kKPad * kPitchV * 2;
constexpr int kEntering = kSt + 2 * kBV * kPitchK * 2;
constexpr int kBarriers = kEntering + kL * kPitchV * 2;
// The launch asks for 1024 bytes more: the kernel aligns its base to 1024.
constexpr int kSmemBytes = kBarriers + 2 * 8 + 1024;

// The K-wide tiles the tensor copies bring per chunk (reverse kg, w, q; forward w, kg).
template <bool kReverse>
constexpr int kTensorTiles = kReverse ? 3 : 2;

// Element (row, col) of a swizzled K-wide tile: half col / 64, row `row` of 128 bytes in it, its
// 16-byte chunk (col % 64) / 8 stored at chunk ^ (row % 8), so that the 8 rows an ldmatrix reads
// at one column hit 8 different bank groups.
template <typename X>
__device__ __forceinline__ const X* swizzled_at(const X* tile, int row, int col) {
  const int chunk = (col % kHalfCols) / 8;
  return tile + (col / kHalfCols) * (kL * kHalfCols) + row * kHalfCols + ((chunk ^ (row % 8)) * 8) +
         col % 8;
}

// acc[nt] += A (16 x 16 kKSteps) · B (16 kKSteps x 8 kNTiles) for one warp, A from a swizzled
// K-wide tile: kMK, A(m, k) = tile(row0 + m, col0 + k); kKM, A(m, k) = tile(row0 + k, col0 + m).
// B at `b_origin` (pitch b_ld) as in mma::warp_mma.
template <typename X, ALayout kA, BLayout kB, int kKSteps, int kNTiles>
__device__ __forceinline__ void warp_mma_swizzled_a(float (&acc)[kNTiles][4], const X* a_tile,
                                                    int row0, int col0, const X* b_origin, int b_ld,
                                                    int lane) {
  const int q = lane / 8, r = lane % 8;
#pragma unroll
  for (int s = 0; s < kKSteps; ++s) {
    uint32_t a[4];
    if constexpr (kA == ALayout::kMK) {
      // matrices: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
      mma::ldmatrix_x4(a, swizzled_at(a_tile, row0 + r + (q % 2) * 8, col0 + 16 * s + (q / 2) * 8));
    } else {
      // stored rows are k: (k 0-7, m 0-7), (k 0-7, m 8-15), (k 8-15, m 0-7), (k 8-15, m 8-15)
      mma::ldmatrix_x4_trans(
          a, swizzled_at(a_tile, row0 + 16 * s + r + (q / 2) * 8, col0 + (q % 2) * 8));
    }
    uint32_t b[kNTiles][2];
    mma::load_b<kB, kNTiles>(b, kB == BLayout::kNK ? b_origin + 16 * s : b_origin + 16 * s * b_ld,
                             b_ld, lane);
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) mma::mma_16816<X>(acc[nt], a, b[nt]);
  }
}

__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(mma::smem_u32(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ int64_t at(const TokenView& v, int64_t b, int64_t t, int64_t head) {
  return b * v.stride_batch + t * v.stride_token + head * v.stride_head;
}

// Rows [0, kL) of kCols (a multiple of 8) 16-bit columns from src + row * stride_token (rows at or
// past `len`, and columns past `valid_cols`, zero-filled) into dst (pitch `pitch`). Thread t copies
// the 16-byte piece t % (kCols / 8) of rows t / (kCols / 8) + j * (rows per pass): one address
// computed per tile, then a pointer step per pass.
template <typename X, int kCols>
__device__ __forceinline__ void copy_rows(X* dst, int pitch, const X* src, int64_t stride_token,
                                          int len, int valid_cols) {
  constexpr int kPieces = kCols / 8, kRowsPerPass = kThreads / kPieces;
  static_assert(kThreads % kPieces == 0 && kL % kRowsPerPass == 0);
  const int r0 = static_cast<int>(threadIdx.x) / kPieces;
  const int c = (static_cast<int>(threadIdx.x) % kPieces) * 8;
  const bool column_inside = c < valid_cols;
  const X* from = src + r0 * stride_token + c;
  X* to = dst + r0 * pitch + c;
#pragma unroll
  for (int j = 0; j < kL / kRowsPerPass; ++j) {
    const bool inside = column_inside && r0 + j * kRowsPerPass < len;
    mma::cp_async_16(to + j * kRowsPerPass * pitch, inside ? from : src, inside ? 16 : 0);
    from += kRowsPerPass * stride_token;
  }
}

template <typename X>
struct Stage {
  X* x;
  float* gk_last;
  float* g;
  uint64_t* landed;  // the stage's barrier: its tensor copies' bytes
  __device__ Stage(unsigned char* base, int index) {
    unsigned char* s = base + index * kStageBytes;
    x = reinterpret_cast<X*>(s);
    gk_last = reinterpret_cast<float*>(s + kStageX * 2);
    g = gk_last + kKPad;
    landed = reinterpret_cast<uint64_t*>(base + kBarriers) + index;
  }
};

// Issues the copies of chunk [t0, t0 + len) of batch row b into `st`.
template <typename X, bool kReverse>
__device__ __forceinline__ void prefetch(const ScanParams& p, const Stage<X>& st, int64_t b,
                                         int64_t t0, int len, int64_t h, int64_t hv, int64_t v0) {
  const int K = static_cast<int>(p.K);
  const int valid_v = static_cast<int>(p.V - v0 < kBV ? p.V - v0 : kBV);
  // The K-wide tiles, whole boxes of kL rows from t0 (rows past the tensor's end come as
  // zeros; rows past a varlen sequence's end belong to the next one, and the step keeps them
  // out of the update), announced on the stage's barrier first.
  if (threadIdx.x == 0) {
    constexpr int kTiles = kTensorTiles<kReverse>;
    tma::fence_proxy_async_shared();
    tma::barrier_arrive_expect(st.landed, kTiles * kKTileElems * 2);
    const int t = static_cast<int>(t0), bb = static_cast<int>(b);
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile) {
      const TensorMapBytes& map = tile == 0 ? p.first_map : tile == 1 ? p.second_map : p.q_map;
      // Reverse kg and q are per key head, w per value head; forward w per value head, kg per
      // key head.
      const int head = static_cast<int>(kReverse ? (tile == 1 ? hv : h) : (tile == 0 ? hv : h));
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        tma::copy_tile_4d(st.x + tile * kKTileElems + half * kL * kHalfCols, map, st.landed,
                          half * kHalfCols, head, t, bb);
      }
    }
  }
  if constexpr (kReverse) {
    copy_rows<X, kBV>(st.x + kDo, kPitchV,
                      static_cast<const X*>(p.do_.data) + at(p.do_, b, t0, hv) + v0,
                      p.do_.stride_token, len, valid_v);
  }
  copy_rows<X, kBV>(st.x + kValues, kPitchV,
                    static_cast<const X*>(p.values.data) + at(p.values, b, t0, hv) + v0,
                    p.values.stride_token, len, valid_v);
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

// The states' store of chunk `chunk` in whole 16-byte pieces along the stored order: from S_x
// (rows k) for [.., K, V], from S_t (rows v) for [.., V, K]; a warp's pieces are contiguous.
template <typename X>
__device__ __forceinline__ void store_states(const ScanParams& p, const X* S_x, const X* S_t,
                                             int64_t b, int64_t chunk, int64_t hv, int64_t v0,
                                             int valid_v) {
  X* out = static_cast<X*>(const_cast<void*>(p.states.data)) + b * p.states.stride_batch +
           chunk * p.states.stride_chunk + hv * p.states.stride_head;
  const int K = static_cast<int>(p.K), tid = static_cast<int>(threadIdx.x);
  if (p.states.stride_v == 1) {  // [.., K, V]: rows k, 32 columns
    for (int e = tid; e < K * (kBV / 8); e += kThreads) {
      const int k = e / (kBV / 8), col = 8 * (e % (kBV / 8));
      if (col < valid_v) {
        *reinterpret_cast<uint4*>(out + k * p.states.stride_k + v0 + col) =
            *reinterpret_cast<const uint4*>(S_x + k * kPitchV + col);
      }
    }
  } else {  // [.., V, K]: rows v, K columns
    // (Pieces of kKPad columns, so that the division is by a constant.)
    for (int e = tid; e < valid_v * (kKPad / 8); e += kThreads) {
      const int j = e / (kKPad / 8), k0 = 8 * (e % (kKPad / 8));
      if (k0 < K) {
        *reinterpret_cast<uint4*>(out + (v0 + j) * p.states.stride_v + k0) =
            *reinterpret_cast<const uint4*>(S_t + j * kPitchK + k0);
      }
    }
  }
}

// The whole walk of one CTA (the kernels below name the direction, so profiles tell them apart).
template <typename X, bool kReverse>
__device__ __forceinline__ void state_scan_mma(const ScanParams& p, unsigned char* smem) {
  const ScanUnit unit = scan_unit(p, kBV);
  const int64_t n = unit.n, hv = unit.hv, h = hv / p.heads_per_group, v0 = unit.v0;
  const SequenceSpan seq = resolve_sequence(p, n);
  if (!seq.valid) return;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g8 = lane / 4, tq = lane % 4;
  X* entering = reinterpret_cast<X*>(smem + kEntering);  // kL x kPitchV
  const bool use_g = p.g.data != nullptr;
  const bool v_first = p.states.stride_v != 1;
  const int64_t b = seq.batch;
  const int valid_v = static_cast<int>(p.V - v0 < kBV ? p.V - v0 : kBV);
  if (tid == 0) {
    tma::barrier_init(Stage<X>(smem, 0).landed);
    tma::barrier_init(Stage<X>(smem, 1).landed);
    tma::barrier_init_fence();
  }
  __syncthreads();

  // S's fragment: rows 16 warp + g8 (+ 8), columns 8 nt + 2 tq (+ 1).
  float S[4][4];
  const int row0 = 16 * warp;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t k = row0 + g8 + 8 * (e / 2), v = v0 + 8 * nt + 2 * tq + (e & 1);
      float x = 0.0f;
      if (p.state_in.data != nullptr && k < p.K && v < p.V) {
        const int64_t o = n * p.state_in.stride_seq + hv * p.state_in.stride_head +
                          k * p.state_in.stride_k + v * p.state_in.stride_v;
        x = p.state_in_is_f32 ? load_float<float>(p.state_in.data, o)
                              : load_float<X>(p.state_in.data, o);
      }
      S[nt][e] = x;
    }
  }

  auto chunk_of = [&](int64_t i) { return kReverse ? seq.chunks - 1 - i : i; };
  auto chunk_len = [&](int64_t c) {
    const int64_t t0 = seq.bos + c * kL;
    return static_cast<int>(seq.eos - t0 < kL ? seq.eos - t0 : kL);
  };
  if (seq.chunks > 0) {
    const int64_t c = chunk_of(0);
    prefetch<X, kReverse>(p, Stage<X>(smem, 0), b, seq.bos + c * kL, chunk_len(c), h, hv, v0);
  }
  mma::cp_async_commit();
  for (int64_t i = 0; i < seq.chunks; ++i) {
    const int64_t c = chunk_of(i);
    const int64_t t0 = seq.bos + c * kL;
    const int len = chunk_len(c);
    // S in X for the per-token product and the states' store, in this step's buffers (the
    // step before last read them, and every warp finished that step before the last barrier).
    X* S_x = reinterpret_cast<X*>(smem + kSx) + (i & 1) * kKPad * kPitchV;
    X* S_t = reinterpret_cast<X*>(smem + kSt) + (i & 1) * kBV * kPitchK;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row0 + g8 + 8 * half, col = 8 * nt + 2 * tq;
        const uint32_t pair = mma::pack2<X>(S[nt][2 * half], S[nt][2 * half + 1]);
        *reinterpret_cast<uint32_t*>(S_x + r * kPitchV + col) = pair;
        if (v_first) {
          S_t[col * kPitchK + r] = reinterpret_cast<const X*>(&pair)[0];
          S_t[(col + 1) * kPitchK + r] = reinterpret_cast<const X*>(&pair)[1];
        }
      }
    }
    mma::cp_async_wait<0>();
    tma::barrier_wait(Stage<X>(smem, static_cast<int>(i & 1)).landed,
                      static_cast<uint32_t>(i >> 1) & 1);
    __syncthreads();
    // Every warp is past the last step, so its stage can take the next chunk's tiles: issued
    // first, so that they have the whole step to land.
    if (i + 1 < seq.chunks) {
      const int64_t next = chunk_of(i + 1);
      prefetch<X, kReverse>(p, Stage<X>(smem, static_cast<int>((i + 1) & 1)), b,
                            seq.bos + next * kL, chunk_len(next), h, hv, v0);
    }
    mma::cp_async_commit();
    const Stage<X> st(smem, static_cast<int>(i & 1));
    const float g_last = use_g ? st.g[len - 1] : 0.0f;

    // Reverse, with the per-head gate: do's rows take 2^g (the q side of fla's qg).
    if (kReverse && use_g) {
      for (int e = tid; e < kL * kBV / 2; e += kThreads) {
        const int r = e / (kBV / 2), col = 2 * (e % (kBV / 2));
        uint32_t* pair = reinterpret_cast<uint32_t*>(st.x + kDo + r * kPitchV + col);
        const float2 x = mma::unpack2<X>(*pair);
        const float f = exp2f(st.g[r]);
        *pair = mma::pack2<X>(x.x * f, x.y * f);
      }
      __syncthreads();
    }
    // The per-token product: the warp's 16 x 16 tile of (kg or w)·S.
    {
      const int r0 = 16 * (warp % 4), c0 = 16 * (warp / 4);
      // Two accumulators over K's halves: half the dependent chain of mma.sync.
      float acc[2][4] = {}, upper[2][4] = {};
      warp_mma_swizzled_a<X, ALayout::kMK, BLayout::kKN, kKPad / 32, 2>(acc, st.x + kFirst, r0, 0,
                                                                        S_x + c0, kPitchV, lane);
      warp_mma_swizzled_a<X, ALayout::kMK, BLayout::kKN, kKPad / 32, 2>(
          upper, st.x + kFirst, r0, kKPad / 2, S_x + (kKPad / 2) * kPitchV + c0, kPitchV, lane);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] += upper[nt][e];
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int r = r0 + g8 + 8 * half, col = c0 + 8 * nt + 2 * tq;
          const float f = use_g ? exp2f(g_last - st.g[r]) : 1.0f;
          const float2 value = mma::unpack2<X>(
              *reinterpret_cast<const uint32_t*>(st.x + kValues + r * kPitchV + col));
          const float a0 = acc[nt][2 * half], a1 = acc[nt][2 * half + 1];
          const float total0 = kReverse ? value.x + f * a0 : value.x - a0;
          const float total1 = kReverse ? value.y + f * a1 : value.y - a1;
          const uint32_t stored = mma::pack2<X>(total0, total1);
          uint32_t enters;
          if constexpr (kReverse) {
            const float2 s = mma::unpack2<X>(stored);
            enters = mma::pack2<X>(-s.x, -s.y);  // exact: negation does not round
          } else {
            enters = mma::pack2<X>(total0 * f, total1 * f);
          }
          // Rows past the chunk's end (another sequence's tokens, or zeros) enter as zeros.
          *reinterpret_cast<uint32_t*>(entering + r * kPitchV + col) = r < len ? enters : 0u;
          if (r < len && col < valid_v) {
            *reinterpret_cast<uint32_t*>(static_cast<X*>(p.values_out) +
                                         ((b * p.T + t0 + r) * p.HV + hv) * p.V + v0 + col) =
                stored;
          }
        }
      }
    }
    // Reverse: qgᵀ·do, off the chain: issued after the per-token product (which the chain waits
    // for), while other warps reach the barrier. Rows 16 warp of K, 32 columns, over the chunk.
    float from_q[4][4] = {};
    if constexpr (kReverse) {
      warp_mma_swizzled_a<X, ALayout::kKM, BLayout::kKN, kL / 16, 4>(from_q, st.x + kQ, 0, row0,
                                                                     st.x + kDo, kPitchV, lane);
    }
    __syncthreads();
    // S = decay ⊙ S (+ scale qgᵀ·do) + Aᵀ·entering.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = row0 + g8 + 8 * half;
      const float decay = exp2f(g_last) * (p.gk.data != nullptr ? exp2f(st.gk_last[k]) : 1.0f);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int e = 2 * half + u;
          S[nt][e] = kReverse ? fmaf(decay, S[nt][e], p.scale * from_q[nt][e]) : decay * S[nt][e];
        }
      }
    }
    warp_mma_swizzled_a<X, ALayout::kKM, BLayout::kKN, kL / 16, 4>(S, st.x + kSecond, 0, row0,
                                                                   entering, kPitchV, lane);
    // The states' store, off the chain: its buffers stay untouched until the step after next.
    store_states<X>(p, S_x, S_t, b, seq.chunk0 + c, hv, v0, valid_v);
  }
  mma::cp_async_wait<0>();

  // The state after the walk (float32).
  float* out = static_cast<float*>(const_cast<void*>(p.state_out.data));
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t k = row0 + g8 + 8 * (e / 2), v = v0 + 8 * nt + 2 * tq + (e & 1);
      if (k < p.K && v < p.V) {
        out[n * p.state_out.stride_seq + hv * p.state_out.stride_head + k * p.state_out.stride_k +
            v * p.state_out.stride_v] = S[nt][e];
      }
    }
  }
}

template <typename X>
__global__ void __launch_bounds__(kThreads, 1)
    chunk_bwd_dhu_mma_kernel(const __grid_constant__ ScanParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  state_scan_mma<X, true>(p, tma::align_to_swizzle_period(smem));
}

template <typename X>
__global__ void __launch_bounds__(kThreads, 1)
    chunk_fwd_h_mma_kernel(const __grid_constant__ ScanParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  state_scan_mma<X, false>(p, tma::align_to_swizzle_period(smem));
}

}  // namespace kda::cuda::scans::mma16
