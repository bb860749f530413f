#pragma once
// The state scans' general kernel: any X, chunk size, K and V, both directions. One CTA per
// (sequence, value head, slice of 32 value columns) walks the sequence's chunks with its slice of
// the state S (K x 32, float32) in shared memory, in the order of the cpu-ref backends:
//   forward (kReverse = false), chunks first to last, S from initial_state:
//     h[c] = S;  v_new = u − w·S;  S = decay ⊙ S + kᵀ (2^(g_last − g) v_new)
//   reverse, chunks last to first, S from dht:
//     dh[c] = S;  dv2 = dv + 2^(g_last − g) k·S;  S = decay ⊙ S + scale (2^g q)ᵀ do − wᵀ dv2
// with decay = 2^g_last 2^gk_last (row k by gk_last[k]). S enters the per-token product rounded
// to X, and the values enter the state's update in X (v_new scaled then rounded, dv2 as
// stored), as fla's kernels and the cpu backends do. For the problems the tensor-core kernel
// does not take (mma_kernel.cuh).

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/scans/params.hpp"
#include "cuda/scans/sequence.cuh"

namespace kda::cuda::scans {

constexpr int kSimtThreads = 256;
constexpr int kSlice = 32;  // value columns per CTA

template <typename X>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<X>(x));
}

// The offset of token tensor element (b, t, head, col).
__device__ __forceinline__ int64_t at(const TokenView& v, int64_t b, int64_t t, int64_t head,
                                      int64_t col) {
  return b * v.stride_batch + t * v.stride_token + head * v.stride_head + col * v.stride_col;
}

__device__ __forceinline__ int64_t at(const ColumnView& v, int64_t b, int64_t t, int64_t head) {
  return b * v.stride_batch + t * v.stride_token + head * v.stride_head;
}

__device__ __forceinline__ int64_t at(const SeqStateView& v, int64_t n, int64_t head, int64_t k,
                                      int64_t col) {
  return n * v.stride_seq + head * v.stride_head + k * v.stride_k + col * v.stride_v;
}

// Dynamic shared memory: S (K x kSlice) and the chunk's values as they enter the update
// (BT x kSlice), float32.
inline int simt_smem_bytes(int64_t K, int chunk_size) {
  return static_cast<int>((K + chunk_size) * kSlice * sizeof(float));
}

// The whole walk of one CTA (the kernels below name the direction, so profiles tell them apart).
template <typename X, bool kReverse>
__device__ __forceinline__ void state_scan_simt(const ScanParams& p, float* smem) {
  const ScanUnit unit = scan_unit(p, kSlice);
  const int64_t n = unit.n, hv = unit.hv, h = hv / p.heads_per_group, v0 = unit.v0;
  const SequenceSpan seq = resolve_sequence(p, n);
  if (!seq.valid) return;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t K = p.K, cells = K * kSlice;
  const bool use_g = p.g.data != nullptr;
  float* S = smem;
  float* values = smem + cells;  // the chunk's values as they enter the update
  for (int64_t e = tid; e < cells; e += kSimtThreads) {
    const int64_t k = e / kSlice, v = v0 + e % kSlice;
    float x = 0.0f;
    if (p.state_in.data != nullptr && v < p.V) {
      const int64_t o = at(p.state_in, n, hv, k, v);
      x = p.state_in_is_f32 ? load_float<float>(p.state_in.data, o)
                            : load_float<X>(p.state_in.data, o);
    }
    S[e] = x;
  }
  __syncthreads();
  const int64_t b = seq.batch;
  // The per-token product's A (reverse k, forward w) and the update's (reverse w, forward k).
  const TokenView& first = kReverse ? p.k : p.w;
  const TokenView& second = kReverse ? p.w : p.k;
  const int64_t first_head = kReverse ? h : hv, second_head = kReverse ? hv : h;
  for (int64_t i = 0; i < seq.chunks; ++i) {
    const int64_t c = kReverse ? seq.chunks - 1 - i : i;
    const int64_t t0 = seq.bos + c * p.chunk_size;
    const int64_t len = seq.eos - t0 < p.chunk_size ? seq.eos - t0 : p.chunk_size;
    const int64_t last = t0 + len - 1, chunk = seq.chunk0 + c;
    X* states = static_cast<X*>(const_cast<void*>(p.states.data)) + b * p.states.stride_batch +
                chunk * p.states.stride_chunk + hv * p.states.stride_head;
    for (int64_t e = tid; e < cells; e += kSimtThreads) {
      const int64_t k = e / kSlice, v = v0 + e % kSlice;
      if (v < p.V) states[k * p.states.stride_k + v * p.states.stride_v] = from_float<X>(S[e]);
    }
    const float g_last = use_g ? load_float<float>(p.g.data, at(p.g, b, last, hv)) : 0.0f;
    for (int64_t e = tid; e < len * kSlice; e += kSimtThreads) {
      const int64_t r = e / kSlice, j = e % kSlice, v = v0 + j, t = t0 + r;
      float entering = 0.0f;
      if (v < p.V) {
        float x = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          x = fmaf(load_float<X>(first.data, at(first, b, t, first_head, k)),
                   round_to<X>(S[k * kSlice + j]), x);
        }
        const float f =
            use_g ? exp2f(g_last - load_float<float>(p.g.data, at(p.g, b, t, hv))) : 1.0f;
        const float value = load_float<X>(p.values.data, at(p.values, b, t, hv, v));
        const float total = kReverse ? value + f * x : value - x;
        const X stored = from_float<X>(total);
        static_cast<X*>(p.values_out)[((b * p.T + t) * p.HV + hv) * p.V + v] = stored;
        entering = kReverse ? to_float(stored) : round_to<X>(total * f);
      }
      values[e] = entering;
    }
    __syncthreads();
    for (int64_t e = tid; e < cells; e += kSimtThreads) {
      const int64_t k = e / kSlice, j = e % kSlice, v = v0 + j;
      if (v >= p.V) continue;
      float decay = use_g ? exp2f(g_last) : 1.0f;
      if (p.gk.data != nullptr)
        decay *= exp2f(load_float<float>(p.gk.data, at(p.gk, b, last, hv, k)));
      float from_q = 0.0f, from_values = 0.0f;
      for (int64_t r = 0; r < len; ++r) {
        const int64_t t = t0 + r;
        if constexpr (kReverse) {
          float q = load_float<X>(p.q.data, at(p.q, b, t, h, k));
          if (use_g) q = round_to<X>(q * exp2f(load_float<float>(p.g.data, at(p.g, b, t, hv))));
          from_q = fmaf(q, load_float<X>(p.do_.data, at(p.do_, b, t, hv, v)), from_q);
        }
        from_values = fmaf(load_float<X>(second.data, at(second, b, t, second_head, k)),
                           values[r * kSlice + j], from_values);
      }
      S[e] =
          kReverse ? decay * S[e] + (p.scale * from_q - from_values) : decay * S[e] + from_values;
    }
    __syncthreads();
  }
  float* out = static_cast<float*>(const_cast<void*>(p.state_out.data));
  for (int64_t e = tid; e < cells; e += kSimtThreads) {
    const int64_t k = e / kSlice, v = v0 + e % kSlice;
    if (v < p.V) out[at(p.state_out, n, hv, k, v)] = S[e];
  }
}

template <typename X>
__global__ void __launch_bounds__(kSimtThreads) chunk_bwd_dhu_simt_kernel(const ScanParams p) {
  extern __shared__ float smem[];
  state_scan_simt<X, true>(p, smem);
}

template <typename X>
__global__ void __launch_bounds__(kSimtThreads) chunk_fwd_h_simt_kernel(const ScanParams p) {
  extern __shared__ float smem[];
  state_scan_simt<X, false>(p, smem);
}

}  // namespace kda::cuda::scans
