#pragma once
// chunk_bwd_dhu's general kernel: any X, chunk size, K and V. One CTA per (sequence, value head,
// slice of 32 value columns) walks the sequence's chunks from the last to the first with its
// slice of the state gradient D (K x 32, float32) in shared memory, in the order of cpu-ref
// (reference.cpp): dh[c] = D; dv2 = dv + 2^(g_last - g) k·D; D = decay ⊙ D + scale (2^g q)ᵀ do
// − wᵀ dv2. D enters k·D rounded to X and dv2 enters wᵀ dv2 as stored, as fla's kernel and the
// cpu backend do. For the problems the tensor-core kernel does not take (mma_kernel.cuh).

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_dhu/cuda/params.hpp"
#include "ops/chunk_bwd_dhu/cuda/sequence.cuh"

namespace kda::cuda::dhu {

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

// Dynamic shared memory: D (K x kSlice) and the chunk's dv2 as stored (BT x kSlice), float32.
inline int simt_smem_bytes(int64_t K, int chunk_size) {
  return static_cast<int>((K + chunk_size) * kSlice * sizeof(float));
}

template <typename X>
__global__ void __launch_bounds__(kSimtThreads) chunk_bwd_dhu_simt_kernel(const DhuParams p) {
  extern __shared__ float smem[];
  const int64_t n = blockIdx.x / p.HV, hv = blockIdx.x % p.HV, h = hv / p.heads_per_group;
  const int64_t v0 = static_cast<int64_t>(blockIdx.y) * kSlice;
  const SequenceSpan seq = resolve_sequence(p, n);
  if (!seq.valid) return;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t K = p.K, cells = K * kSlice;
  float* D = smem;
  float* dv2_tile = smem + cells;
  for (int64_t e = tid; e < cells; e += kSimtThreads) {
    const int64_t k = e / kSlice, v = v0 + e % kSlice;
    float x = 0.0f;
    if (p.dht.data != nullptr && v < p.V) {
      const int64_t o = at(p.dht, n, hv, k, v);
      x = p.dht_is_f32 ? load_float<float>(p.dht.data, o) : load_float<X>(p.dht.data, o);
    }
    D[e] = x;
  }
  __syncthreads();
  const int64_t b = seq.batch;
  for (int64_t c = seq.chunks - 1; c >= 0; --c) {
    const int64_t t0 = seq.bos + c * p.chunk_size;
    const int64_t len = seq.eos - t0 < p.chunk_size ? seq.eos - t0 : p.chunk_size;
    const int64_t last = t0 + len - 1, chunk = seq.chunk0 + c;
    X* dh = static_cast<X*>(const_cast<void*>(p.dh.data)) + b * p.dh.stride_batch +
            chunk * p.dh.stride_chunk + hv * p.dh.stride_head;
    for (int64_t e = tid; e < cells; e += kSimtThreads) {
      const int64_t k = e / kSlice, v = v0 + e % kSlice;
      if (v < p.V) dh[k * p.dh.stride_k + v * p.dh.stride_v] = from_float<X>(D[e]);
    }
    const float g_last =
        p.g.data != nullptr ? load_float<float>(p.g.data, at(p.g, b, last, hv)) : 0.0f;
    for (int64_t e = tid; e < len * kSlice; e += kSimtThreads) {
      const int64_t r = e / kSlice, j = e % kSlice, v = v0 + j, t = t0 + r;
      float stored = 0.0f;
      if (v < p.V) {
        float x = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          x = fmaf(load_float<X>(p.k.data, at(p.k, b, t, h, k)), round_to<X>(D[k * kSlice + j]), x);
        }
        if (p.g.data != nullptr)
          x *= exp2f(g_last - load_float<float>(p.g.data, at(p.g, b, t, hv)));
        const X total = from_float<X>(load_float<X>(p.dv.data, at(p.dv, b, t, hv, v)) + x);
        static_cast<X*>(p.dv2)[((b * p.T + t) * p.HV + hv) * p.V + v] = total;
        stored = to_float(total);
      }
      dv2_tile[e] = stored;
    }
    __syncthreads();
    for (int64_t e = tid; e < cells; e += kSimtThreads) {
      const int64_t k = e / kSlice, j = e % kSlice, v = v0 + j;
      if (v >= p.V) continue;
      float decay = p.g.data != nullptr ? exp2f(g_last) : 1.0f;
      if (p.gk.data != nullptr)
        decay *= exp2f(load_float<float>(p.gk.data, at(p.gk, b, last, hv, k)));
      float from_q = 0.0f, from_w = 0.0f;
      for (int64_t r = 0; r < len; ++r) {
        const int64_t t = t0 + r;
        float q = load_float<X>(p.q.data, at(p.q, b, t, h, k));
        if (p.g.data != nullptr)
          q = round_to<X>(q * exp2f(load_float<float>(p.g.data, at(p.g, b, t, hv))));
        from_q = fmaf(q, load_float<X>(p.do_.data, at(p.do_, b, t, hv, v)), from_q);
        from_w =
            fmaf(load_float<X>(p.w.data, at(p.w, b, t, hv, k)), dv2_tile[r * kSlice + j], from_w);
      }
      D[e] = decay * D[e] + (p.scale * from_q - from_w);
    }
    __syncthreads();
  }
  for (int64_t e = tid; e < cells; e += kSimtThreads) {
    const int64_t k = e / kSlice, v = v0 + e % kSlice;
    if (v < p.V) static_cast<float*>(const_cast<void*>(p.dh0.data))[at(p.dh0, n, hv, k, v)] = D[e];
  }
}

}  // namespace kda::cuda::dhu
