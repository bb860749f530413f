#pragma once
// dA_log [HV] and ddt_bias [HV, K] from the epilogue's dg, one CTA per value head, in a fixed
// order (the same bits on every run): ddt_bias = Σ_tokens dg; dA_log = Σ_tokens,channels dg ·
// (d gate / d A_log) / (d gate / d x), the ratio taken in closed form so that the fused kernel
// needs no per-unit partials in memory: with lower_bound, x (the gate's raw input g + dt_bias);
// without, softplus(x) / sigmoid(x). Both are 0 where the parameter does not enter the layer.

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"

namespace kda::cuda::epilogue {

constexpr int kReduceThreads = 1024;
constexpr int kReduceStripes = kReduceThreads / 32;
constexpr int kMaxChannelBlocks = 4;  // K <= 128

// (d gate / d A_log) / (d gate / d x) at raw input x.
__device__ __forceinline__ float A_log_ratio(const EpilogueParams& p, float x) {
  if (p.has_lower_bound) return x;
  // softplus(x) / sigmoid(x) = softplus(x) (1 + e^-x); for x << 0 both are e^x and the ratio
  // 1 + e^x / 2 to float32 precision.
  if (x < -15.0f) return 1.0f + 0.5f * expf(x);
  return softplusf(x) * (1.0f + expf(-x));
}

template <typename X>
__global__ void __launch_bounds__(kReduceThreads) gate_params_kernel(const EpilogueParams p) {
  __shared__ double bias_part[kReduceStripes][32 * kMaxChannelBlocks];
  __shared__ double A_part[kReduceThreads];
  const int64_t hv = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, stripe = tid / 32;
  const bool has_bias = p.gate_in_kernel && p.dt_bias != nullptr;
  const bool has_A_log = p.gate_in_kernel && p.A_log != nullptr;
  if (!has_bias && !has_A_log) {
    for (int64_t c = tid; c < p.K; c += kReduceThreads) p.ddt_bias[hv * p.K + c] = 0.0f;
    if (tid == 0) p.dA_log[hv] = 0.0f;
    return;
  }
  // The tokens the epilogue wrote dg for: every row, or cu_seqlens' span when varlen (clamped
  // to [0, T], so that inconsistent index tensors cannot lead out of bounds).
  int64_t first = 0, last = p.B * p.T;
  if (p.chunks.varlen) {
    const IndexView& cu = p.chunks.cu_seqlens;
    first = load_index(cu, 0);
    last = load_index(cu, p.chunks.num_seqs * cu.stride0);
    first = first < 0 ? 0 : (first > p.T ? p.T : first);
    last = last < first ? first : (last > p.T ? p.T : last);
  }
  const int64_t k_blocks = (p.K + 31) / 32;
  double bias_sum[kMaxChannelBlocks] = {};
  double A_sum = 0.0;
  for (int64_t n = first + stripe; n < last; n += kReduceStripes) {
    const int64_t b = n / p.T, t = n % p.T;
#pragma unroll
    for (int kb = 0; kb < kMaxChannelBlocks; ++kb) {
      const int64_t c = 32 * kb + lane;
      if (kb >= k_blocks || c >= p.K) continue;
      const float dg = p.dg[(n * p.HV + hv) * p.K + c];
      bias_sum[kb] += dg;
      if (has_A_log)
        A_sum += static_cast<double>(dg) * A_log_ratio(p, gate_input<X>(p, b, t, hv, c));
    }
  }
#pragma unroll
  for (int kb = 0; kb < kMaxChannelBlocks; ++kb) bias_part[stripe][32 * kb + lane] = bias_sum[kb];
  A_part[tid] = A_sum;
  __syncthreads();
  for (int64_t c = tid; c < p.K; c += kReduceThreads) {
    double sum = 0.0;
    for (int w = 0; w < kReduceStripes; ++w) sum += bias_part[w][c];
    p.ddt_bias[hv * p.K + c] = has_bias ? static_cast<float>(sum) : 0.0f;
  }
  if (tid == 0) {
    double sum = 0.0;
    for (int w = 0; w < kReduceThreads; ++w) sum += A_part[w];
    p.dA_log[hv] = has_A_log ? static_cast<float>(sum) : 0.0f;
  }
}

}  // namespace kda::cuda::epilogue
