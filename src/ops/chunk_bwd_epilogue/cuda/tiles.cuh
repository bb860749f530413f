#pragma once
// The epilogue kernel's reads of its inputs into shared memory and its elementwise activations
// (chunk_bwd_prep's kernel reads its inputs with them too: the activations take any parameter
// block with the epilogue's field names for g, beta and the gate's options):
// L x 32 blocks of the per-token tensors, 32 x 32 blocks of the states, the gate's cumulative
// natural-log decay for a block of channels, beta. Every function is called by the whole block
// of 256 threads; thread t takes column t % 32 of rows t / 32, t / 32 + 8, ... (a warp one row
// at a time), and zero-fills what lies outside the valid box.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/fast_math.cuh"
#include "ops/chunk_bwd_epilogue/cuda/params.hpp"

namespace kda::cuda::epilogue {

constexpr int kThreads = 256;
constexpr int kPitch = SmemPlan::kBlockPitch;

// x of a tensor of dtype X, or float32 where `is_f32`.
template <typename X>
__device__ __forceinline__ float load_x_or_f32(const void* data, int64_t offset, bool is_f32) {
  return is_f32 ? load_float<float>(data, offset) : load_float<X>(data, offset);
}

// dst[n][i][c] = src[n](b, t0 + i, head, col0 + c) · (row_scale ? row_scale[i] : 1) for
// i < rows, c < cols; 0 elsewhere in each kL x 32 block. Every load of the kN blocks is issued
// before the first store (registers in between), so that one call costs one memory latency,
// not one per element row.
template <typename T, int kL, int kN>
__device__ __forceinline__ void load_blocks(float* const (&dst)[kN],
                                            const TokenView* const (&src)[kN], int64_t b,
                                            int64_t t0, int64_t head, int64_t col0, int rows,
                                            int64_t cols, const float* row_scale = nullptr) {
  constexpr int kPerThread = kL * 32 / kThreads;
  static_assert(kPerThread * kThreads == kL * 32, "whole blocks per thread");
  float x[kN][kPerThread];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const TokenView& t = *src[n];
    const int64_t origin =
        b * t.stride_batch + t0 * t.stride_token + head * t.stride_head + col0 * t.stride_col;
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int e = static_cast<int>(threadIdx.x) + m * kThreads;
      const int i = e / 32, c = e % 32;
      x[n][m] = i < rows && c < cols
                    ? load_float<T>(t.data, origin + i * t.stride_token + c * t.stride_col)
                    : 0.0f;
    }
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int e = static_cast<int>(threadIdx.x) + m * kThreads;
      const int i = e / 32, c = e % 32;
      dst[n][i * kPitch + c] = row_scale != nullptr ? x[n][m] * row_scale[i] : x[n][m];
    }
  }
}

template <typename T, int kL>
__device__ __forceinline__ void load_block(float* dst, const TokenView& t, int64_t b, int64_t t0,
                                           int64_t head, int64_t col0, int rows, int64_t cols,
                                           const float* row_scale = nullptr) {
  float* const dsts[1] = {dst};
  const TokenView* const srcs[1] = {&t};
  load_blocks<T, kL, 1>(dsts, srcs, b, t0, head, col0, rows, cols, row_scale);
}

// dst[n][kk][vv] = S_n[k0 + kk][v0 + vv] of states n (h, dh: the same strides) at (batch,
// chunk, head), 32 x 32 blocks; the lanes walk whichever of k and v is contiguous in memory.
// All loads are issued before the first store, as in load_blocks.
template <typename X, int kN>
__device__ __forceinline__ void load_state_blocks(float* const (&dst)[kN],
                                                  const StateView* const (&src)[kN], bool is_f32,
                                                  int64_t batch, int64_t chunk, int64_t head,
                                                  int64_t k0, int64_t v0, int64_t K, int64_t V) {
  constexpr int kPerThread = 32 * 32 / kThreads;
  const StateView& s0 = *src[0];
  const bool lanes_along_k = s0.stride_k == 1 && s0.stride_v != 1;
  float x[kN][kPerThread];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const StateView& s = *src[n];
    const int64_t origin = batch * s.stride_batch + chunk * s.stride_chunk + head * s.stride_head +
                           k0 * s.stride_k + v0 * s.stride_v;
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int e = static_cast<int>(threadIdx.x) + m * kThreads;
      const int kk = lanes_along_k ? e % 32 : e / 32;
      const int vv = lanes_along_k ? e / 32 : e % 32;
      x[n][m] = k0 + kk < K && v0 + vv < V
                    ? load_x_or_f32<X>(s.data, origin + kk * s.stride_k + vv * s.stride_v, is_f32)
                    : 0.0f;
    }
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int e = static_cast<int>(threadIdx.x) + m * kThreads;
      const int kk = lanes_along_k ? e % 32 : e / 32;
      const int vv = lanes_along_k ? e / 32 : e % 32;
      dst[n][kk * kPitch + vv] = x[n][m];
    }
  }
}

// One channel's natural-log decay from the gate's raw input x = g + dt_bias, and its derivative
// by x (SPEC-chunk-kda.md; activations.hpp has the float64 form).
struct GateValue {
  float value;
  float d_x;
};

// The activations in fast float32 math (__expf, __fdividef: a few ulp): exact division and expf
// took most of the bf16 kernel's gate steps (branchy slow paths), and a few ulp of the gate's
// value is far below every output's bar.
__device__ __forceinline__ float sigmoidf(float x) {
  return __fdividef(1.0f, 1.0f + __expf(-x));
}

__device__ __forceinline__ float softplusf(float x) {
  if (x > 20.0f) return x;
  const float e = __expf(x);
  return x < -15.0f ? e : log1pf(e);
}

// Calls fn(gate) once with gate(x) -> GateValue for the problem's gate form (identity without
// the gate in the kernel, the safe gate with a lower bound, else softplus), e^A_log taken once:
// a loop inside fn is compiled once per form and runs one form's code only.
template <typename Params, typename Fn>
__device__ __forceinline__ void with_gate_form(const Params& p, float A_log, Fn fn) {
  const float s = p.A_log != nullptr ? __expf(A_log) : 1.0f;
  if (!p.gate_in_kernel) {
    fn([](float x) { return GateValue{x, 1.0f}; });
  } else if (p.has_lower_bound) {
    const float lb = p.lower_bound;
    fn([=](float x) {
      const float sg = sigmoidf(s * x);
      return GateValue{lb * sg, lb * sg * (1.0f - sg) * s};
    });
  } else {
    fn([=](float x) { return GateValue{-s * softplusf(x), -s * sigmoidf(x)}; });
  }
}

template <typename Params>
__device__ __forceinline__ GateValue gate_value(const Params& p, float x, float A_log) {
  const float s = p.A_log != nullptr ? __expf(A_log) : 1.0f;
  if (p.has_lower_bound) {
    const float sg = sigmoidf(s * x);
    return {p.lower_bound * sg, p.lower_bound * sg * (1.0f - sg) * s};
  }
  return {-s * softplusf(x), -s * sigmoidf(x)};
}

// β of token t (activated: m · sigmoid(raw) with the sigmoid in the kernel, m = 2 with
// allow_neg_eigval) and dβ / d(raw input).
struct BetaValue {
  float value;
  float d_raw;
};

template <typename X, typename Params>
__device__ __forceinline__ BetaValue beta_value(const Params& p, int64_t b, int64_t t, int64_t hv) {
  const BetaView& bv = p.beta;
  const float raw = load_x_or_f32<X>(
      bv.data, b * bv.stride_batch + t * bv.stride_token + hv * bv.stride_head, bv.is_f32);
  if (!p.beta_sigmoid) return {raw, 1.0f};
  const float m = p.neg_eigval ? 2.0f : 1.0f, sg = sigmoidf(raw);
  return {m * sg, m * sg * (1.0f - sg)};
}

// The gate's raw input (g + dt_bias) or, without the gate in the kernel, the decay itself.
template <typename X, typename Params>
__device__ __forceinline__ float gate_input(const Params& p, int64_t b, int64_t t, int64_t hv,
                                            int64_t col) {
  const TokenView& g = p.g;
  float x = load_x_or_f32<X>(
      g.data, b * g.stride_batch + t * g.stride_token + hv * g.stride_head + col * g.stride_col,
      p.g_is_f32);
  if (p.gate_in_kernel && p.dt_bias != nullptr) x += p.dt_bias[(hv * p.K + col) * p.dt_bias_stride];
  return x;
}

// dst = the cumulative natural-log decay G of channels col0 .. col0 + 31 over the chunk's rows
// (rows past `rows` repeat the last one, so that every decay the kernel takes stays finite;
// channels past K are 0).
template <typename X, int kL, typename Params>
__device__ __forceinline__ void gate_block(float* dst, const Params& p, int64_t b, int64_t t0,
                                           int64_t hv, int64_t col0, int rows, float A_log) {
  constexpr int kPerThread = kL * 32 / kThreads;
  float x[kPerThread];
#pragma unroll
  for (int m = 0; m < kPerThread; ++m) {  // the loads first, as in load_blocks
    const int e = static_cast<int>(threadIdx.x) + m * kThreads;
    const int i = e / 32, c = e % 32;
    x[m] = i < rows && col0 + c < p.K ? gate_input<X>(p, b, t0 + i, hv, col0 + c) : 0.0f;
  }
#pragma unroll
  for (int m = 0; m < kPerThread; ++m) {
    const int e = static_cast<int>(threadIdx.x) + m * kThreads;
    const int i = e / 32, c = e % 32;
    const bool inside = i < rows && col0 + c < p.K;
    dst[i * kPitch + c] = inside && p.gate_in_kernel ? gate_value(p, x[m], A_log).value : x[m];
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int c = static_cast<int>(threadIdx.x);
    float sum = 0.0f;
    for (int i = 0; i < kL; ++i) {
      if (i < rows) sum += dst[i * kPitch + c];
      dst[i * kPitch + c] = sum;
    }
  }
  __syncthreads();
}

// Sum over the warp's lanes, the same order on every lane (bitwise reproducible).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace kda::cuda::epilogue
