#pragma once
// The epilogue kernel's reads of its inputs into shared memory and its elementwise activations:
// L x 32 blocks of the per-token tensors, 32 x 32 blocks of the states, the gate's cumulative
// natural-log decay for a block of channels, beta. Every function is called by the whole block
// of 256 threads; thread t takes column t % 32 of rows t / 32, t / 32 + 8, ... (a warp one row
// at a time), and zero-fills what lies outside the valid box.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_epilogue/cuda/params.hpp"

namespace kda::cuda::epilogue {

constexpr int kThreads = 256;
constexpr int kPitch = SmemPlan::kBlockPitch;

// x of a tensor of dtype X, or float32 where `is_f32`.
template <typename X>
__device__ __forceinline__ float load_x_or_f32(const void* data, int64_t offset, bool is_f32) {
  return is_f32 ? load_float<float>(data, offset) : load_float<X>(data, offset);
}

// dst[i][c] = t(b, t0 + i, head, col0 + c) · (row_scale ? row_scale[i] : 1) for i < rows,
// c < cols; 0 elsewhere in the kL x 32 block.
template <typename T, int kL>
__device__ __forceinline__ void load_block(float* dst, const TokenView& t, int64_t b, int64_t t0,
                                           int64_t head, int64_t col0, int rows, int64_t cols,
                                           const float* row_scale = nullptr) {
  const int64_t origin =
      b * t.stride_batch + t0 * t.stride_token + head * t.stride_head + col0 * t.stride_col;
  for (int e = static_cast<int>(threadIdx.x); e < kL * 32; e += kThreads) {
    const int i = e / 32;
    const int c = e % 32;
    float x = 0.0f;
    if (i < rows && c < cols) {
      x = load_float<T>(t.data, origin + i * t.stride_token + c * t.stride_col);
      if (row_scale != nullptr) x *= row_scale[i];
    }
    dst[i * kPitch + c] = x;
  }
}

// dst[kk][vv] = S[k0 + kk][v0 + vv] of the state at (batch, chunk, head), a 32 x 32 block; the
// lanes walk whichever of k and v is contiguous in memory.
template <typename X>
__device__ __forceinline__ void load_state_block(float* dst, const StateView& s, bool is_f32,
                                                 int64_t batch, int64_t chunk, int64_t head,
                                                 int64_t k0, int64_t v0, int64_t K, int64_t V) {
  const int64_t origin = batch * s.stride_batch + chunk * s.stride_chunk + head * s.stride_head +
                         k0 * s.stride_k + v0 * s.stride_v;
  const bool lanes_along_k = s.stride_k == 1 && s.stride_v != 1;
  for (int e = static_cast<int>(threadIdx.x); e < 32 * 32; e += kThreads) {
    const int kk = lanes_along_k ? e % 32 : e / 32;
    const int vv = lanes_along_k ? e / 32 : e % 32;
    float x = 0.0f;
    if (k0 + kk < K && v0 + vv < V) {
      x = load_x_or_f32<X>(s.data, origin + kk * s.stride_k + vv * s.stride_v, is_f32);
    }
    dst[kk * kPitch + vv] = x;
  }
}

// One channel's natural-log decay from the gate's raw input x = g + dt_bias, and its derivative
// by x (SPEC-chunk-kda.md; activations.hpp has the float64 form).
struct GateValue {
  float value;
  float d_x;
};

__device__ __forceinline__ float sigmoidf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float softplusf(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

__device__ __forceinline__ GateValue gate_value(const EpilogueParams& p, float x, float A_log) {
  const float s = p.A_log != nullptr ? expf(A_log) : 1.0f;
  if (p.has_lower_bound) {
    const float sg = sigmoidf(s * x);
    return {p.lower_bound * sg, p.lower_bound * sg * (1.0f - sg) * s};
  }
  return {-s * softplusf(x), -s * sigmoidf(x)};
}

// The gate's raw input (g + dt_bias) or, without the gate in the kernel, the decay itself.
template <typename X>
__device__ __forceinline__ float gate_input(const EpilogueParams& p, int64_t b, int64_t t,
                                            int64_t hv, int64_t col) {
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
template <typename X, int kL>
__device__ __forceinline__ void gate_block(float* dst, const EpilogueParams& p, int64_t b,
                                           int64_t t0, int64_t hv, int64_t col0, int rows,
                                           float A_log) {
  for (int e = static_cast<int>(threadIdx.x); e < kL * 32; e += kThreads) {
    const int i = e / 32;
    const int c = e % 32;
    float value = 0.0f;
    if (i < rows && col0 + c < p.K) {
      const float x = gate_input<X>(p, b, t0 + i, hv, col0 + c);
      value = p.gate_in_kernel ? gate_value(p, x, A_log).value : x;
    }
    dst[i * kPitch + c] = value;
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

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kda::cuda::epilogue
