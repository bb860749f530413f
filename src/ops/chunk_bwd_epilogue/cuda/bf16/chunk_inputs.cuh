#pragma once
// What the bf16 per-chunk kernels (the epilogue's, bf16/kernel.cuh, and chunk_bwd_prep's,
// ../../chunk_bwd_prep/cuda/bf16_kernel.cuh) read of a chunk the same way: the rows of a token
// or state tensor, the gate's raw inputs and its cumulative decay over the chunk, the rows'
// inverse norms. They take any parameter block with the epilogue's field names for g and the
// gate's options, and run in CTAs of kThreads (plan.cuh): thread t owns channel t % kD of the
// 16-row segment t / kD.

#include <cstdint>

#include "cuda/common/chunk_units.cuh"
#include "cuda/common/views.hpp"
#include "ops/chunk_bwd_epilogue/cuda/bf16/warp_ops.cuh"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"

namespace kda::cuda::epilogue::bf16 {

constexpr float kLog2e = 1.4426950408889634f;
static_assert(kThreads == 4 * kD && kL == 4 * 16, "a thread per (channel, 16-row segment)");

// The dynamic shared memory, addressed by the byte offsets of a kernel's map.
struct Smem {
  char* base;
  __device__ Bf16* bf(int offset) const { return reinterpret_cast<Bf16*>(base + offset); }
  __device__ float* f32(int offset) const { return reinterpret_cast<float*>(base + offset); }
};

// The span of `chunk`, resolved by warp 0 into the CTA's shared `slot` and read by every thread.
__device__ __forceinline__ ChunkSpan shared_chunk_span(const ChunkLayout& chunks, int64_t chunk,
                                                       int chunk_size, ChunkSpan* slot) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (warp == 0) {
    const ChunkSpan found = resolve_chunk(chunks, chunk, chunk_size, lane);
    if (lane == 0) *slot = found;
  }
  __syncthreads();
  return *slot;
}

__device__ __forceinline__ const Bf16* token_rows(const TokenView& t, const ChunkSpan& s,
                                                  int64_t head) {
  return static_cast<const Bf16*>(t.data) + s.batch * t.stride_batch + s.t0 * t.stride_token +
         head * t.stride_head;
}

__device__ __forceinline__ const Bf16* state_rows(const StateView& v, const ChunkSpan& s,
                                                  int64_t head) {
  return static_cast<const Bf16*>(v.data) + s.batch * v.stride_batch +
         s.chunk_in_row * v.stride_chunk + head * v.stride_head;
}

// Raw gate inputs (g + dt_bias with the gate in the kernel, else g) of rows 16 seg .. 16 seg + 15
// of channel c; rows past the chunk read its last row, so that every load is issued up front.
template <typename Params>
__device__ __forceinline__ void load_gate_inputs(float (&x)[16], const Params& p,
                                                 const ChunkSpan& s, int64_t hv, int c, int seg) {
  const TokenView& g = p.g;
  const int64_t origin =
      s.batch * g.stride_batch + s.t0 * g.stride_token + hv * g.stride_head + c * g.stride_col;
  if (p.g_is_f32) {
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      x[r] = load_float<float>(g.data, origin + min(16 * seg + r, s.len - 1) * g.stride_token);
    }
  } else {
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      x[r] = load_float<Bf16>(g.data, origin + min(16 * seg + r, s.len - 1) * g.stride_token);
    }
  }
  if (p.gate_in_kernel && p.dt_bias != nullptr) {
    const float bias = p.dt_bias[(hv * p.K + c) * p.dt_bias_stride];
#pragma unroll
    for (int r = 0; r < 16; ++r) x[r] += bias;
  }
}

// The thread's segment of the cumulative natural-log decay: x (load_gate_inputs of its rows)
// becomes the running sum of the activated gate over its 16 rows (rows past the chunk add 0);
// totals[seg][c] = the segment's sum. The caller synchronizes before reading totals.
template <typename Params>
__device__ __forceinline__ void gate_segment_cumsum(float (&x)[16], float* totals, const Params& p,
                                                    int len, float A_log) {
  const int c = static_cast<int>(threadIdx.x) % kD, seg = static_cast<int>(threadIdx.x) / kD;
  float run = 0.0f;
  with_gate_form(p, A_log, [&](auto gate) {
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      run += 16 * seg + r < len ? gate(x[r]).value : 0.0f;
      x[r] = run;
    }
  });
  totals[seg * kD + c] = run;
}

// The sum of the segments' totals before `seg` (before) and of all of them (the decay at the
// chunk's last row) for channel c.
__device__ __forceinline__ float2 segment_offsets(const float* totals, int c, int seg) {
  float before = 0.0f, all = 0.0f;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    if (b < seg) before += totals[b * kD + c];
    all += totals[b * kD + c];
  }
  return make_float2(before, all);
}

// G2 = log2e · the cumulative decay over the chunk's rows (rows past the chunk repeat the last):
// thread (c, segment) takes 16 rows of channel c, then adds the segments before it.
// x: load_gate_inputs of the thread's rows.
template <typename Params>
__device__ __forceinline__ void build_gate(float* G2, float* totals, float (&x)[16],
                                           const Params& p, const ChunkSpan& s, float A_log) {
  const int c = static_cast<int>(threadIdx.x) % kD, seg = static_cast<int>(threadIdx.x) / kD;
  gate_segment_cumsum(x, totals, p, s.len, A_log);
  __syncthreads();
  const float before = segment_offsets(totals, c, seg).x;
#pragma unroll
  for (int r = 0; r < 16; ++r) G2[(16 * seg + r) * kPitchF + c] = (before + x[r]) * kLog2e;
}

// inv[i] = 1 / ||x_i|| (1 without l2norm, 0 past the chunk) of raw rows x; one warp per row.
__device__ __forceinline__ void row_inv_norms(float* inv, const Bf16* x, int len, bool l2norm,
                                              int warp, int lane) {
  for (int i = warp; i < kL; i += kWarps) {
    const float2 a = load_pair(x + i * kPitchD + 2 * lane);
    const float2 b = load_pair(x + i * kPitchD + 64 + 2 * lane);
    const float sum = warp_sum(fmaf(a.x, a.x, fmaf(a.y, a.y, fmaf(b.x, b.x, b.y * b.y))));
    if (lane == 0) inv[i] = i < len ? (l2norm ? 1.0f / sqrtf(sum + 1e-6f) : 1.0f) : 0.0f;
  }
}

}  // namespace kda::cuda::epilogue::bf16
