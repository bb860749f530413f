#pragma once
// dA_log [HV] and ddt_bias [HV, K] from the epilogue's dg, a cluster of CTAs per value head, in a
// fixed order (the same bits on every run): ddt_bias = Σ_tokens dg; dA_log = Σ_tokens,channels dg ·
// (d gate / d A_log) / (d gate / d x), the ratio taken in closed form so that the fused kernel
// needs no per-unit partials in memory: with lower_bound, x (the gate's raw input g + dt_bias);
// without, softplus(x) / sigmoid(x). Both are 0 where the parameter does not enter the layer.

#include <cooperative_groups.h>

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"

namespace kda::cuda::epilogue {

constexpr int kReduceThreads = 1024;
constexpr int kReduceWarps = kReduceThreads / 32;
constexpr int kMaxChannelBlocks = 4;  // K <= 128: a cluster of 4 CTAs of 32 channels per head
constexpr int kReduceUnroll = 8;      // tokens a warp has in flight

// (d gate / d A_log) / (d gate / d x) at raw input x.
__device__ __forceinline__ float A_log_ratio(const EpilogueParams& p, float x) {
  if (p.has_lower_bound) return x;
  // softplus(x) / sigmoid(x) = softplus(x) (1 + e^-x); for x << 0 both are e^x and the ratio
  // 1 + e^x / 2 to float32 precision.
  if (x < -15.0f) return 1.0f + 0.5f * expf(x);
  return softplusf(x) * (1.0f + expf(-x));
}

// One cluster of kMaxChannelBlocks CTAs per value head; CTA kb sums channels 32 kb .. 32 kb + 31
// over every token (warp w takes tokens w, w + 32, ..), in double, in a fixed order; dA_log adds
// the CTAs' sums in rank order through distributed shared memory.
template <typename X>
__global__ void __cluster_dims__(kMaxChannelBlocks, 1, 1) __launch_bounds__(kReduceThreads)
    gate_params_kernel(const EpilogueParams p) {
  __shared__ double bias_part[kReduceWarps][32];
  __shared__ double A_part[kReduceThreads];
  __shared__ double A_block;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int64_t hv = blockIdx.x / kMaxChannelBlocks;
  const int kb = static_cast<int>(blockIdx.x % kMaxChannelBlocks);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int64_t c = 32 * kb + lane;
  const bool has_bias = p.gate_in_kernel && p.dt_bias != nullptr;
  const bool has_A_log = p.gate_in_kernel && p.A_log != nullptr;
  if (!has_bias && !has_A_log) {  // uniform over the cluster
    if (warp == 0 && c < p.K) p.ddt_bias[hv * p.K + c] = 0.0f;
    if (tid == 0 && kb == 0) p.dA_log[hv] = 0.0f;
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
  double bias_sum = 0.0, A_sum = 0.0;
  const bool small_index = last < (int64_t{1} << 31);  // 32-bit division per token
  if (c < p.K) {
    for (int64_t n0 = first + warp; n0 < last; n0 += kReduceWarps * kReduceUnroll) {
      float dg[kReduceUnroll], x[kReduceUnroll];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {  // every load of the group first
        const int64_t n = n0 + u * kReduceWarps;
        const bool inside = n < last;
        dg[u] = inside ? p.dg[(n * p.HV + hv) * p.K + c] : 0.0f;
        const int64_t b =
            small_index ? static_cast<int32_t>(n) / static_cast<int32_t>(p.T) : n / p.T;
        x[u] = inside && has_A_log ? gate_input<X>(p, b, n - b * p.T, hv, c) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {
        bias_sum += dg[u];
        if (has_A_log && n0 + u * kReduceWarps < last)
          A_sum += static_cast<double>(dg[u]) * A_log_ratio(p, x[u]);
      }
    }
  }
  bias_part[warp][lane] = bias_sum;
  A_part[tid] = A_sum;
  __syncthreads();
  if (warp == 0) {
    double sum = 0.0;
    for (int w = 0; w < kReduceWarps; ++w) sum += bias_part[w][lane];
    if (c < p.K) p.ddt_bias[hv * p.K + c] = has_bias ? static_cast<float>(sum) : 0.0f;
  }
  if (tid == 0) {
    double sum = 0.0;
    for (int t = 0; t < kReduceThreads; ++t) sum += A_part[t];
    A_block = sum;
  }
  cluster.sync();
  if (tid == 0 && kb == 0) {
    double sum = 0.0;
    for (int r = 0; r < kMaxChannelBlocks; ++r) sum += *cluster.map_shared_rank(&A_block, r);
    p.dA_log[hv] = has_A_log ? static_cast<float>(sum) : 0.0f;
  }
  cluster.sync();  // the other CTAs' A_block stays readable until rank 0 has read it
}

}  // namespace kda::cuda::epilogue
