#pragma once
// dA_log [HV] and ddt_bias [HV, K] from the epilogue's dg, a cluster of CTAs per value head, in a
// fixed order (the same bits on every run): ddt_bias = Σ_tokens dg; dA_log = Σ_tokens,channels dg ·
// (d gate / d A_log) / (d gate / d x), the ratio taken in closed form so that the fused kernel
// needs no per-unit partials in memory: with lower_bound, x (the gate's raw input g + dt_bias);
// without, softplus(x) / sigmoid(x). Both are 0 where the parameter does not enter the layer.

#include <cooperative_groups.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_epilogue/cuda/tiles.cuh"

namespace kda::cuda::epilogue {

constexpr int kReduceThreads = 512;
constexpr int kReduceWarps = kReduceThreads / 32;
constexpr int kMaxChannelBlocks = 4;  // K <= 128: 32 channels per CTA
constexpr int kReduceSplits = 2;      // token halves
constexpr int kReduceCluster = kMaxChannelBlocks * kReduceSplits;
constexpr int kReduceUnroll = 8;  // tokens a warp has in flight

// What dA_log sums besides Σ dg: nothing (no A_log), or dg · (d gate / d A_log) / (d gate / d x)
// in one of the gate's forms.
enum class RatioForm { kNone, kLowerBound, kSoftplus };

template <RatioForm kForm>
__device__ __forceinline__ float A_log_ratio_of(float x) {
  static_assert(kForm != RatioForm::kNone, "without A_log there is no ratio to take");
  if constexpr (kForm == RatioForm::kLowerBound) {
    return x;
  } else {
    // softplus(x) / sigmoid(x) = softplus(x) (1 + e^-x); for x << 0 both are e^x and the ratio
    // 1 + e^x / 2 to float32 precision.
    return x < -15.0f ? 1.0f + 0.5f * __expf(x) : softplusf(x) * (1.0f + __expf(-x));
  }
}

// The same at raw input x, the form read from the problem.
__device__ __forceinline__ float A_log_ratio(const EpilogueParams& p, float x) {
  return p.has_lower_bound ? A_log_ratio_of<RatioForm::kLowerBound>(x)
                           : A_log_ratio_of<RatioForm::kSoftplus>(x);
}

// The tokens [first, last) (flattened b · T + t) the epilogue wrote dg for: every row, or
// cu_seqlens' span when varlen (clamped to [0, T], so that inconsistent index tensors cannot lead
// out of bounds).
__device__ __forceinline__ void dg_token_range(const EpilogueParams& p, int64_t* first,
                                               int64_t* last) {
  *first = 0;
  *last = p.B * p.T;
  if (p.chunks.varlen) {
    const IndexView& cu = p.chunks.cu_seqlens;
    const int64_t a = load_index(cu, 0), b = load_index(cu, p.chunks.num_seqs * cu.stride0);
    *first = a < 0 ? 0 : (a > p.T ? p.T : a);
    *last = b < *first ? *first : (b > p.T ? p.T : b);
  }
}

// The element offset of flattened token n = b · T + t in g (head and column offsets apart);
// small_index: n and T below 2^31, so that b is a 32-bit division.
__device__ __forceinline__ int64_t g_token_offset(const EpilogueParams& p, int64_t n,
                                                  bool small_index) {
  const int64_t b =
      small_index ? static_cast<int64_t>(static_cast<uint32_t>(n) / static_cast<uint32_t>(p.T))
                  : n / p.T;
  return b * p.g.stride_batch + (n - b * p.T) * p.g.stride_token;
}

// Σ dg and Σ dg · A_log_ratio(x) of channel c over tokens [begin, end) (flattened b · T + t),
// kReduceUnroll tokens at a time: every load of a group is issued before the sums (the last
// token's index repeats past `end`, masked in the sums), so a group costs one memory latency.
// G: g's dtype; kWithRatio: dA_log's sum too (g read).
template <typename G, bool kWithRatio>
__device__ __forceinline__ void sum_token_run(const EpilogueParams& p, int64_t hv, int64_t c,
                                              int64_t begin, int64_t end, double* bias_sum,
                                              double* A_sum) {
  const TokenView& gv = p.g;
  const G* g_column = static_cast<const G*>(gv.data) + hv * gv.stride_head + c * gv.stride_col;
  const float bias = p.dt_bias != nullptr ? p.dt_bias[(hv * p.K + c) * p.dt_bias_stride] : 0.0f;
  const float* dg_column = p.dg + hv * p.K + c;
  const int64_t dg_step = p.HV * p.K;
  const bool small_index = end <= (int64_t{1} << 31) && p.T <= (int64_t{1} << 31);
  for (int64_t n0 = begin; n0 < end; n0 += kReduceUnroll) {
    float dg[kReduceUnroll], x[kReduceUnroll];
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) {
      const int64_t n = n0 + u < end ? n0 + u : end - 1;
      dg[u] = dg_column[n * dg_step];
      if constexpr (kWithRatio) x[u] = to_float(g_column[g_token_offset(p, n, small_index)]) + bias;
    }
    float bias_group = 0.0f, A_group = 0.0f;
#pragma unroll
    for (int u = 0; u < kReduceUnroll; ++u) {
      const float d = n0 + u < end ? dg[u] : 0.0f;
      bias_group += d;
      if constexpr (kWithRatio) A_group = fmaf(d, A_log_ratio(p, x[u]), A_group);
    }
    *bias_sum += bias_group;
    *A_sum += A_group;
  }
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
  int64_t first, last;
  dg_token_range(p, &first, &last);
  // This warp's run of tokens [begin, end).
  const int64_t runs = static_cast<int64_t>(kReduceSplits) * kReduceWarps;
  const int64_t per_run = (last - first + runs - 1) / runs;
  const int64_t run = static_cast<int64_t>(split) * kReduceWarps + warp;
  const int64_t begin = first + run * per_run;
  const int64_t end = begin + per_run < last ? begin + per_run : last;
  double bias_sum = 0.0, A_sum = 0.0;
  if (c < p.K && begin < end) {
    if (!has_A_log) {
      sum_token_run<float, false>(p, hv, c, begin, end, &bias_sum, &A_sum);
    } else if (p.g_is_f32) {
      sum_token_run<float, true>(p, hv, c, begin, end, &bias_sum, &A_sum);
    } else {
      sum_token_run<X, true>(p, hv, c, begin, end, &bias_sum, &A_sum);
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

// The same sums for the common layout (rows_kernel_takes): lane l takes channels 4 l .. 4 l + 3
// with one 16-byte load of dg and one load of 4 gate inputs per token, so that a warp reads whole
// rows; the kReduceCluster CTAs of a value head split the tokens, warp w of each a contiguous run,
// a group of tokens at a time with the next group's rows prefetched into L2. The gate's form is a
// template argument and g's tokens are one stride apart, so that a group runs no branch and no
// division: the loop is the loads and a few FMAs per element. Two CTAs per SM (64 registers).
// The sums meet in a fixed order: warps in the CTA, then the CTAs through distributed shared
// memory in CTA 0.
constexpr int kRowsLanesChannels = 4;

// Whether gate_params_rows_kernel reads this problem: K a multiple of 4 up to 128, g's columns
// contiguous with every 4-channel group aligned for one load, its tokens one stride apart across
// the batch (flattened token n at n · stride_token), dg 16-byte aligned.
inline bool rows_kernel_takes(const EpilogueParams& p) {
  const int64_t g_bytes = p.g_is_f32 ? 4 : 2;
  const int64_t group = kRowsLanesChannels * g_bytes;
  const auto aligned = [](const void* ptr, int64_t to) {
    return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(to) == 0;
  };
  return p.K % kRowsLanesChannels == 0 && p.K <= 32 * kRowsLanesChannels && p.g.stride_col == 1 &&
         (p.B == 1 || p.g.stride_batch == p.T * p.g.stride_token) && aligned(p.g.data, group) &&
         (p.g.stride_token * g_bytes) % group == 0 && (p.g.stride_head * g_bytes) % group == 0 &&
         aligned(p.dg, 16);
}

__device__ __forceinline__ void prefetch_l2(const void* at) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
}

template <typename G>
__device__ __forceinline__ void load_four(const G* at, float (&x)[4]) {
  if constexpr (std::is_same_v<G, float>) {
    const float4 v = *reinterpret_cast<const float4*>(at);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    const uint2 v = *reinterpret_cast<const uint2*>(at);
    G e[4];
    memcpy(e, &v, sizeof(v));
#pragma unroll
    for (int m = 0; m < 4; ++m) x[m] = to_float(e[m]);
  }
}

template <typename G, RatioForm kForm>
__global__ void __cluster_dims__(kReduceCluster, 1, 1) __launch_bounds__(kReduceThreads, 2)
    gate_params_rows_kernel(const EpilogueParams p) {
  constexpr bool kWithRatio = kForm != RatioForm::kNone;
  // Tokens per group: softplus's ratio needs more registers per token (two CTAs per SM).
  constexpr int kUnroll = kForm == RatioForm::kSoftplus ? kReduceUnroll / 2 : kReduceUnroll;
  __shared__ double bias_part[kReduceWarps][32 * kRowsLanesChannels];
  __shared__ double A_part[kReduceWarps];
  __shared__ double bias_block[32 * kRowsLanesChannels];
  __shared__ double A_block;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int64_t hv = blockIdx.x / kReduceCluster;
  const int rank = static_cast<int>(blockIdx.x % kReduceCluster);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid % 32, warp = tid / 32;
  const int64_t c0 = kRowsLanesChannels * lane;
  const bool active = c0 < p.K;
  int64_t first, last;
  dg_token_range(p, &first, &last);
  const int64_t runs = static_cast<int64_t>(kReduceCluster) * kReduceWarps;
  const int64_t per_run = (last - first + runs - 1) / runs;
  const int64_t begin = first + (static_cast<int64_t>(rank) * kReduceWarps + warp) * per_run;
  const int64_t end = begin + per_run < last ? begin + per_run : last;
  double bias_sum[kRowsLanesChannels] = {}, A_sum = 0.0;
  if (active && begin < end) {
    const int64_t g_step = p.g.stride_token, dg_step = p.HV * p.K;
    const G* g_run = static_cast<const G*>(p.g.data) + hv * p.g.stride_head + c0 + begin * g_step;
    const float* dg_run = p.dg + hv * p.K + c0 + begin * dg_step;
    float bias[kRowsLanesChannels] = {};
    if (p.dt_bias != nullptr) {
#pragma unroll
      for (int m = 0; m < kRowsLanesChannels; ++m)
        bias[m] = p.dt_bias[(hv * p.K + c0 + m) * p.dt_bias_stride];
    }
    // A token's dg and gate inputs into the group's float sums; flush_group adds them to the run's
    // double sums (a fixed order: the same bits on every run).
    float bias_group[kRowsLanesChannels] = {}, A_group = 0.0f;
    const auto add_token = [&](const float4& dg4, const float(&x)[kRowsLanesChannels]) {
      const float d[kRowsLanesChannels] = {dg4.x, dg4.y, dg4.z, dg4.w};
#pragma unroll
      for (int m = 0; m < kRowsLanesChannels; ++m) {
        bias_group[m] += d[m];
        if constexpr (kWithRatio)
          A_group = fmaf(d[m], A_log_ratio_of<kForm>(x[m] + bias[m]), A_group);
      }
    };
    const auto flush_group = [&] {
#pragma unroll
      for (int m = 0; m < kRowsLanesChannels; ++m) bias_sum[m] += bias_group[m], bias_group[m] = 0;
      A_sum += A_group;
      A_group = 0.0f;
    };
    const int64_t count = end - begin;
    int64_t n0 = 0;
    for (; n0 + kUnroll <= count; n0 += kUnroll) {
      // The next group's rows into L2 first: the compiler issues a group's loads close to their
      // use, so that a warp has few of them in flight; prefetches hold no registers.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t next = n0 + kUnroll + u < count ? n0 + kUnroll + u : count - 1;
        prefetch_l2(dg_run + next * dg_step);
        if constexpr (kWithRatio) prefetch_l2(g_run + next * g_step);
      }
      float4 dg[kUnroll];
      float x[kUnroll][kRowsLanesChannels] = {};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        dg[u] = *reinterpret_cast<const float4*>(dg_run + (n0 + u) * dg_step);
        if constexpr (kWithRatio) load_four(g_run + (n0 + u) * g_step, x[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) add_token(dg[u], x[u]);
      flush_group();
    }
#pragma unroll 1
    for (; n0 < count; ++n0) {  // the run's last tokens, one at a time
      float x[kRowsLanesChannels] = {};
      if constexpr (kWithRatio) load_four(g_run + n0 * g_step, x);
      add_token(*reinterpret_cast<const float4*>(dg_run + n0 * dg_step), x);
    }
    flush_group();
  }
#pragma unroll
  for (int m = 0; m < kRowsLanesChannels; ++m) bias_part[warp][c0 + m] = bias_sum[m];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)  // the same tree on every run
    A_sum += __shfl_xor_sync(0xffffffffu, A_sum, offset);
  if (lane == 0) A_part[warp] = A_sum;
  __syncthreads();
  if (tid < 32 * kRowsLanesChannels) {
    double sum = 0.0;
    for (int w = 0; w < kReduceWarps; ++w) sum += bias_part[w][tid];
    bias_block[tid] = sum;
  }
  if (tid == 0) {
    double sum = 0.0;
    for (int w = 0; w < kReduceWarps; ++w) sum += A_part[w];
    A_block = sum;
  }
  cluster.sync();
  if (rank == 0 && tid < p.K) {
    double sum = 0.0;
    for (int r = 0; r < kReduceCluster; ++r) sum += cluster.map_shared_rank(bias_block, r)[tid];
    p.ddt_bias[hv * p.K + tid] = p.dt_bias != nullptr ? static_cast<float>(sum) : 0.0f;
  }
  if (rank == 0 && tid == 0) {
    double sum = 0.0;
    for (int r = 0; r < kReduceCluster; ++r) sum += *cluster.map_shared_rank(&A_block, r);
    p.dA_log[hv] = kWithRatio ? static_cast<float>(sum) : 0.0f;
  }
  cluster.sync();  // every CTA's sums stay readable until they have been read
}

}  // namespace kda::cuda::epilogue
