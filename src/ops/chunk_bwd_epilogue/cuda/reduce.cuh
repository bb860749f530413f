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

constexpr int kReduceThreads = 512;
constexpr int kReduceWarps = kReduceThreads / 32;
constexpr int kMaxChannelBlocks = 4;  // K <= 128: 32 channels per CTA
constexpr int kReduceSplits = 2;      // token halves
constexpr int kReduceCluster = kMaxChannelBlocks * kReduceSplits;
constexpr int kReduceUnroll = 8;  // tokens a warp has in flight

// (d gate / d A_log) / (d gate / d x) at raw input x.
__device__ __forceinline__ float A_log_ratio(const EpilogueParams& p, float x) {
  if (p.has_lower_bound) return x;
  // softplus(x) / sigmoid(x) = softplus(x) (1 + e^-x); for x << 0 both are e^x and the ratio
  // 1 + e^x / 2 to float32 precision.
  if (x < -15.0f) return 1.0f + 0.5f * __expf(x);
  return softplusf(x) * (1.0f + __expf(-x));
}

// One cluster of kReduceCluster CTAs per value head: CTA (kb, split) sums channels 32 kb .. 32 kb +
// 31 over its half of the tokens, warp w a contiguous run of them, kReduceUnroll tokens at a time
// summed in float and added to a double. The CTAs' sums are added in a fixed order through
// distributed shared memory: ddt_bias's by split in CTA (kb, 0), dA_log's by rank in CTA 0.
template <typename X>
__global__ void __cluster_dims__(kReduceCluster, 1, 1) __launch_bounds__(kReduceThreads)
    gate_params_kernel(const EpilogueParams p) {
  __shared__ double bias_part[kReduceWarps][32];
  __shared__ double A_part[kReduceThreads];
  __shared__ double bias_block[32];
  __shared__ double A_block;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int64_t hv = blockIdx.x / kReduceCluster;
  const int rank = static_cast<int>(blockIdx.x % kReduceCluster);
  const int kb = rank % kMaxChannelBlocks, split = rank / kMaxChannelBlocks;
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int64_t c = 32 * kb + lane;
  const bool has_bias = p.gate_in_kernel && p.dt_bias != nullptr;
  const bool has_A_log = p.gate_in_kernel && p.A_log != nullptr;
  if (!has_bias && !has_A_log) {  // uniform over the cluster
    if (split == 0 && warp == 0 && c < p.K) p.ddt_bias[hv * p.K + c] = 0.0f;
    if (tid == 0 && rank == 0) p.dA_log[hv] = 0.0f;
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
  // This warp's run of tokens [begin, end).
  const int64_t runs = static_cast<int64_t>(kReduceSplits) * kReduceWarps;
  const int64_t per_run = (last - first + runs - 1) / runs;
  const int64_t run = static_cast<int64_t>(split) * kReduceWarps + warp;
  const int64_t begin = first + run * per_run;
  const int64_t end = begin + per_run < last ? begin + per_run : last;
  double bias_sum = 0.0, A_sum = 0.0;
  if (c < p.K && begin < end) {
    int64_t b = begin / p.T, t = begin - b * p.T;  // the token of n, stepped along
    for (int64_t n0 = begin; n0 < end; n0 += kReduceUnroll) {
      float dg[kReduceUnroll], x[kReduceUnroll];
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {  // every load of the group first
        const bool inside = n0 + u < end;
        dg[u] = inside ? p.dg[((n0 + u) * p.HV + hv) * p.K + c] : 0.0f;
        x[u] = inside && has_A_log ? gate_input<X>(p, b, t, hv, c) : 0.0f;
        if (++t == p.T) {
          t = 0;
          ++b;
        }
      }
      float bias_group = 0.0f, A_group = 0.0f;
#pragma unroll
      for (int u = 0; u < kReduceUnroll; ++u) {
        bias_group += dg[u];
        if (has_A_log) A_group = fmaf(dg[u], A_log_ratio(p, x[u]), A_group);
      }
      bias_sum += bias_group;
      A_sum += A_group;
    }
  }
  bias_part[warp][lane] = bias_sum;
  A_part[tid] = A_sum;
  __syncthreads();
  if (warp == 0) {
    double sum = 0.0;
    for (int w = 0; w < kReduceWarps; ++w) sum += bias_part[w][lane];
    bias_block[lane] = sum;
  }
  if (tid == 0) {
    double sum = 0.0;
    for (int i = 0; i < kReduceThreads; ++i) sum += A_part[i];
    A_block = sum;
  }
  cluster.sync();
  if (split == 0 && warp == 0 && c < p.K) {
    double sum = 0.0;
    for (int s = 0; s < kReduceSplits; ++s)
      sum += cluster.map_shared_rank(bias_block, s * kMaxChannelBlocks + kb)[lane];
    p.ddt_bias[hv * p.K + c] = has_bias ? static_cast<float>(sum) : 0.0f;
  }
  if (tid == 0 && rank == 0) {
    double sum = 0.0;
    for (int r = 0; r < kReduceCluster; ++r) sum += *cluster.map_shared_rank(&A_block, r);
    p.dA_log[hv] = has_A_log ? static_cast<float>(sum) : 0.0f;
  }
  cluster.sync();  // every CTA's sums stay readable until they have been read
}

}  // namespace kda::cuda::epilogue
