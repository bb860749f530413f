#pragma once
// The chunk_bwd_intra kernel (SPEC-chunk-bwd-intra.md steps 1..8), sm_90a. README.md in this
// folder walks through one work item and gives the performance model.
//
// Work: unit = (chunk, value head); a persistent CTA takes units blockIdx.x, + gridDim.x, ...
// Each unit is one or two "items" (passes over up to 128 channels). A CTA has 4·NC warps
// (NC = BT / 16 sub-chunks); a warp's task is (sub-chunk t, 32-channel group): 16 rows x 32
// channels of every output. Per task, with f = first row of t and l = last row of t:
//   row part    (sources s' < t):  dqa, r  += Pq|Pk[t, s'] · (Kk[s'] ⊙ exp2(G[f] − G[s']))
//                                  then ⊙ exp2(G[i] − G[f])                  (mma.sync, TF32)
//   column part (sources s > t):   dkc     += Pq|Pkᵀ[s, t] · ((Q | β⊙Kk)[s] ⊙ exp2(G[s] − G[l]))
//                                  then ⊙ exp2(G[l] − G[i])                  (mma.sync, TF32)
//   (every exponent <= 0 for a non-increasing gate: nothing overflows, whatever the decay)
//   the mma accumulators go through a per-warp shared-memory tile to one channel per lane;
//   diagonal block (j <= i inside t): exact D = exp2(G[i] − G[j]) per pair and channel on the
//   CUDA cores, each D used for dqa, r and dkc at once; rows are finished from the last to the
//   first, so dkc[i] is complete when row i is stored: dq, dk, dg rows (incoming + intra) go to
//   global memory, Σ_c r·Kk per row to a shared partial; db = db_in + Σ partials after the next
//   item's first barrier (PendingDb).
// Row i of dq and db reads only rows j <= i (mma rows are independent dot products; anchors f
// <= i), so those outputs are causal bit for bit.
// No atomics; every sum has a fixed order: results are bitwise reproducible.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/tma.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/device.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/params.hpp"

namespace kda::cuda::intra {

template <typename XT_, int kBT_, int kSplit_, int kBulkStages_, bool kDiagTc_ = false>
struct IntraTraits {
  using XT = XT_;
  static constexpr int kBT = kBT_;
  static constexpr int kSplit = kSplit_;  // 1: TF32 products, 3: 3xTF32 (float32-level)
  // 0: tiles by cp.async, the stage count at run time; 1 or 2: tiles by bulk tensor copies
  // (IntraParams::tma_copies) into that many stages, the incoming dq/dk/dg prefetched to L2 by
  // bulk requests. Compile-time choices, so that each kernel holds one copy path: run-time flags
  // kept every path's registers live, and ncu (sixth session) showed ~7% of the stall samples on
  // reloads of the values spilled for them at every item.
  static constexpr int kBulkStages = kBulkStages_;
  static constexpr bool kBulk = kBulkStages > 0;
  // The diagonal 16 x 16 blocks on the tensor cores too (diag_block_tc), factored through anchor
  // rows with exponents of both signs: only for gates bounded as safe_gate promises
  // (IntraParams::diag_tc). Otherwise the 8 x 8 triangles are exact on the CUDA cores.
  static constexpr bool kDiagTc = kDiagTc_;
  static_assert(!kDiagTc || (kSplit == 1 && kBulk), "tensor-core diagonal: TF32, bulk copies");
  static_assert(kBulkStages >= 0 && kBulkStages <= 2, "0 (cp.async), 1 or 2 bulk-copy stages");
  static_assert(kBT == 16 || kBT == 32 || kBT == 64, "chunk size must be 16, 32 or 64");
  static_assert(kSplit == 1 || kSplit == 3, "kSplit is 1 or 3");
  static constexpr int kNC = kBT / 16;                                           // sub-chunks
  static constexpr int kGroupsPerPass = IntraSmemLayout::kMaxPassChannels / 32;  // 4
  static constexpr int kWarps = kNC * kGroupsPerPass;  // one task each at K = 128
  static constexpr int kThreads = 32 * kWarps;         // 512, 256, 128
  static constexpr int kMinBlocks = 4 / kNC;           // -> at most 128 registers per thread
  static constexpr int kMaxGroups = 8;                 // K <= 256
  static constexpr int kScratchFloats = 16 * 32;       // per warp
  // The stage's map: compile-time offsets and pitches (the host's IntraSmemLayout::stage).
  static constexpr IntraStageMap kMap = intra_stage_map(kBT, static_cast<int>(sizeof(XT)));
  static constexpr int kLdG = kMap.ld_g;
  static constexpr int kLdX = kMap.ld_x;

  // dA's packed shared-memory layout (params.hpp).
  __host__ __device__ static constexpr int a_ld(int s) { return intra_a_ld(s); }
  __host__ __device__ static constexpr int a_offset(int s) { return intra_a_offset(s); }
  static constexpr int kAFloats = a_offset(kNC);
  // Bytes one item's bulk tensor copies deliver (whole boxes, zero-filled parts included).
  static constexpr uint32_t kTmaBytes = [] {
    int bytes = kBT * (kLdG * 4 + 2 * kLdX * static_cast<int>(sizeof(XT)));
    for (int s = 0; s < kNC; ++s) bytes += 2 * 16 * intra_a_ld(s) * 4;
    return static_cast<uint32_t>(bytes);
  }();
  // The thread that issues the bulk copies: lane 0 of the last warp (whose task, the last
  // sub-chunk, has no column part: the lightest phase 1).
  static constexpr int kIssuer = kThreads - 32;
  static_assert(kMap.g_off % 128 == 0 && kMap.q_off % 128 == 0 && kMap.k_off % 128 == 0 &&
                    kMap.aq_off % 128 == 0 && kMap.ak_off % 128 == 0 && kMap.bytes % 128 == 0,
                "bulk tensor copies need 128-byte aligned tiles");
};

// One stage's tiles (shared memory), as the compute reads them. Rows >= L and columns past the
// pass's channels are zero. Every offset and pitch is a compile-time constant (Tr::kMap).
template <typename Tr>
struct Stage {
  using XT = typename Tr::XT;
  const unsigned char* base;

  __device__ __forceinline__ const float* G() const {
    return reinterpret_cast<const float*>(base + Tr::kMap.g_off);
  }
  __device__ __forceinline__ const float* Aq() const {
    return reinterpret_cast<const float*>(base + Tr::kMap.aq_off);
  }
  __device__ __forceinline__ const float* Ak() const {
    return reinterpret_cast<const float*>(base + Tr::kMap.ak_off);
  }
  __device__ __forceinline__ float beta(int row) const {
    return reinterpret_cast<const float*>(base + Tr::kMap.beta_off)[row];
  }
  __device__ __forceinline__ float g(int row, int col) const { return G()[row * Tr::kLdG + col]; }
  __device__ __forceinline__ float2 g2(int row, int col) const {
    return *reinterpret_cast<const float2*>(G() + row * Tr::kLdG + col);
  }
  __device__ __forceinline__ float q(int row, int col) const {
    return to_float(reinterpret_cast<const XT*>(base + Tr::kMap.q_off)[row * Tr::kLdX + col]);
  }
  __device__ __forceinline__ float k(int row, int col) const {
    return to_float(reinterpret_cast<const XT*>(base + Tr::kMap.k_off)[row * Tr::kLdX + col]);
  }
  // Row i of dA (columns from 0).
  __device__ __forceinline__ const float* aq_row(int i) const {
    return Aq() + Tr::a_offset(i / 16) + (i % 16) * Tr::a_ld(i / 16);
  }
  __device__ __forceinline__ const float* ak_row(int i) const {
    return Ak() + Tr::a_offset(i / 16) + (i % 16) * Tr::a_ld(i / 16);
  }
};

// --- copies of one work item -------------------------------------------------------------------

// Channels of `pass`: [ch0, ch0 + valid) of K, tiles `padded` wide (a multiple of 32).
struct PassChannels {
  int ch0;
  int valid;
  int padded;
};

__device__ __forceinline__ PassChannels pass_channels(const IntraParams& p, int pass) {
  constexpr int kPass = IntraSmemLayout::kMaxPassChannels;
  const int ch0 = pass * kPass;
  const int left = static_cast<int>(p.K) - ch0;
  const int valid = left < kPass ? left : kPass;
  return {ch0, valid, (valid + 31) / 32 * 32};
}

// This thread's β bits (threads < L; 0 otherwise), loaded with an item's copies and converted
// when they are stored (store_beta).
template <typename Tr>
__device__ __forceinline__ uint32_t beta_bits_of(const IntraParams& p, const IntraUnit& u,
                                                 int tid) {
  using XT = typename Tr::XT;
  if (tid >= u.len) return 0;
  const int64_t at = origin(p.beta, u) + tid * p.beta.stride_token;
  return p.beta_is_f32 || sizeof(XT) == 4 ? static_cast<const uint32_t*>(p.beta.data)[at]
                                          : static_cast<const uint16_t*>(p.beta.data)[at];
}

// Queues the copies of item (u, pass) into `stage`: Q, Kk (head hq), G, the lower part of dAqk and
// dAkk (entries j > i never read), zeros everywhere else of the tiles. Returns this thread's β
// bits as stored (threads < BT; 0 for rows >= L), which the caller hands to store_beta. Not
// inlined: it is called from three places, none of them hot.
template <typename Tr>
__device__ __noinline__ uint32_t issue_item_copies(const IntraParams& p, const IntraUnit& u,
                                                   int pass, unsigned char* stage, int tid) {
  using XT = typename Tr::XT;
  constexpr int kXBytes = static_cast<int>(sizeof(XT));
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int L = u.len;
  const PassChannels pc = pass_channels(p, pass);
  const int64_t hq = u.hv / p.heads_per_group;

  // Q, Kk, G: rows of pc.padded channels; tensor 0, 1, 2.
  for (int which = 0; which < 3; ++which) {
    const IntraRows& t = which == 0 ? p.q : which == 1 ? p.k : p.g;
    const int elem_bytes = which == 2 ? 4 : kXBytes;
    const int ld = which == 2 ? Tr::kLdG : Tr::kLdX;
    const int dst_off = which == 0 ? Tr::kMap.q_off : which == 1 ? Tr::kMap.k_off : Tr::kMap.g_off;
    const auto* base = static_cast<const unsigned char*>(t.data) +
                       origin(t, u, which == 2 ? u.hv : hq, pc.ch0) * elem_bytes;
    const int64_t row_bytes = t.stride_token * elem_bytes;
    copy_tile(
        stage + dst_off, Tr::kBT, [&](int) { return pc.padded; }, elem_bytes, t.copy_bytes,
        t.stride_col, [&](int r) { return r * ld * elem_bytes; },
        [&](int r) { return base + (r < L ? r : 0) * row_bytes; },
        [&](int r) { return r < L ? pc.valid : 0; }, warp, Tr::kWarps, lane);
  }
  // dAqk, dAkk: rows i < L, columns j <= i, packed per sub-chunk.
  for (int which = 0; which < 2; ++which) {
    const IntraRows& t = which == 0 ? p.dAqk : p.dAkk;
    const auto* base = static_cast<const unsigned char*>(t.data) + origin(t, u, u.hv, 0) * 4;
    const int64_t row_bytes = t.stride_token * 4;
    unsigned char* dst = stage + (which == 0 ? Tr::kMap.aq_off : Tr::kMap.ak_off);
    copy_tile(
        dst, Tr::kBT, [](int r) { return 16 * (r / 16 + 1); }, 4, t.copy_bytes, t.stride_col,
        [&](int r) { return 4 * (Tr::a_offset(r / 16) + (r % 16) * Tr::a_ld(r / 16)); },
        [&](int r) { return base + (r < L ? r : 0) * row_bytes; },
        [&](int r) { return r < L ? r + 1 : 0; }, warp, Tr::kWarps, lane);
  }

  return beta_bits_of<Tr>(p, u, tid);
}

// 16-byte copies of a tile of kRows rows x kChunks pieces (compile-time shape), spread over the
// CTA's threads starting at thread `first` (so that small tiles do not all land on the same
// threads): piece (r, c) goes to dst + r * kDstPitch + 16 c from src + r * row_bytes + 16 c; only
// the first valid_bytes(r) bytes of row r are read (the rest, and rows >= L, are zero-filled);
// pieces c >= used_chunks are not copied (no task reads them).
template <int kRows, int kChunks, int kDstPitch, int kThreads, typename ValidBytes>
__device__ __forceinline__ void copy_rows16(unsigned char* dst, const unsigned char* src,
                                            int64_t row_bytes, int L, int used_chunks,
                                            ValidBytes valid_bytes, int first, int tid) {
  constexpr int kPieces = kRows * kChunks;
  const int start = (tid + kThreads - first % kThreads) % kThreads;
#pragma unroll
  for (int n = 0; n < (kPieces + kThreads - 1) / kThreads; ++n) {
    const int idx = start + n * kThreads;
    if (kPieces % kThreads != 0 && idx >= kPieces) break;
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    if (c >= used_chunks) continue;
    const int left = r < L ? valid_bytes(r) - 16 * c : 0;
    const int n_bytes = left <= 0 ? 0 : (left >= 16 ? 16 : left);
    const unsigned char* from = src + (r < L ? r : 0) * row_bytes + (n_bytes > 0 ? 16 * c : 0);
    cp_async(dst + r * kDstPitch + 16 * c, from, 16, n_bytes);
  }
}

// issue_item_copies for inputs whose every row can be copied in 16-byte pieces
// (IntraParams::fast_copies): the same tiles, zeros and return value, with compile-time shapes.
template <typename Tr>
__device__ __noinline__ uint32_t issue_item_copies_fast(const IntraParams& p, const IntraUnit& u,
                                                        int pass, unsigned char* stage, int tid) {
  using XT = typename Tr::XT;
  constexpr int kX = static_cast<int>(sizeof(XT));
  constexpr int kPass = IntraSmemLayout::kMaxPassChannels;
  constexpr int kT = Tr::kThreads;
  const int L = u.len;
  const PassChannels pc = pass_channels(p, pass);
  const int64_t hq = u.hv / p.heads_per_group;
  auto rows = [&](const IntraRows& t, int64_t head, int elem_bytes, int64_t col0) {
    return static_cast<const unsigned char*>(t.data) + origin(t, u, head, col0) * elem_bytes;
  };
  const int x_valid = pc.valid * kX;
  const int x_used = pc.padded * kX / 16;
  auto x_bytes = [&](int) { return x_valid; };
  copy_rows16<Tr::kBT, kPass * kX / 16, Tr::kLdX * kX, kT>(
      stage + Tr::kMap.q_off, rows(p.q, hq, kX, pc.ch0), p.q.stride_token * kX, L, x_used, x_bytes,
      0, tid);
  copy_rows16<Tr::kBT, kPass * kX / 16, Tr::kLdX * kX, kT>(
      stage + Tr::kMap.k_off, rows(p.k, hq, kX, pc.ch0), p.k.stride_token * kX, L, x_used, x_bytes,
      Tr::kBT * kPass * kX / 16, tid);
  const int g_valid = pc.valid * 4;
  copy_rows16<Tr::kBT, kPass * 4 / 16, Tr::kLdG * 4, kT>(
      stage + Tr::kMap.g_off, rows(p.g, u.hv, 4, pc.ch0), p.g.stride_token * 4, L,
      pc.padded * 4 / 16, [&](int) { return g_valid; }, 0, tid);
  // dA: sub-chunk s keeps rows 16 s .. 16 s + 15, columns 0 .. 16 (s + 1) - 1, of which row i
  // reads j <= i only (the rest zero-filled: never read).
  const unsigned char* aq = rows(p.dAqk, u.hv, 4, 0);
  const unsigned char* ak = rows(p.dAkk, u.hv, 4, 0);
  const int64_t aq_row = p.dAqk.stride_token * 4;
  const int64_t ak_row = p.dAkk.stride_token * 4;
  // Sub-chunk s's pieces start at thread 128 s(s+1)/2 (dAqk) and 64 (s+1) later (dAkk): the
  // 640 pieces of BT = 64 spread over all threads.
  auto sub_chunk = [&]<int s>() {
    auto a_bytes = [&](int r) { return 4 * (16 * s + r + 1); };
    constexpr int kFirst = 64 * s * (s + 1);
    copy_rows16<16, 4 * (s + 1), 4 * Tr::a_ld(s), kT>(stage + Tr::kMap.aq_off + 4 * Tr::a_offset(s),
                                                      aq + 16 * s * aq_row, aq_row, L - 16 * s,
                                                      4 * (s + 1), a_bytes, kFirst, tid);
    copy_rows16<16, 4 * (s + 1), 4 * Tr::a_ld(s), kT>(
        stage + Tr::kMap.ak_off + 4 * Tr::a_offset(s), ak + 16 * s * ak_row, ak_row, L - 16 * s,
        4 * (s + 1), a_bytes, kFirst + 64 * (s + 1), tid);
  };
  sub_chunk.template operator()<0>();
  if constexpr (Tr::kNC > 1) sub_chunk.template operator()<1>();
  if constexpr (Tr::kNC > 2) {
    sub_chunk.template operator()<2>();
    sub_chunk.template operator()<3>();
  }
  return beta_bits_of<Tr>(p, u, tid);
}

template <typename Tr>
__device__ __forceinline__ uint32_t issue_copies(const IntraParams& p, const IntraUnit& u, int pass,
                                                 unsigned char* stage, int tid) {
  return p.fast_copies ? issue_item_copies_fast<Tr>(p, u, pass, stage, tid)
                       : issue_item_copies<Tr>(p, u, pass, stage, tid);
}

// The bulk tensor copies (TMA) of item (u, pass) into `stage`, completing on `bar`: one request
// per tile (dA: one per sub-chunk), issued by one thread (Tr::kIssuer). Box elements outside the
// tensors (channels >= K, tokens >= T) arrive as zeros; rows past a short chunk that lie inside
// the tensor are zeroed by zero_rows_past once the copies have landed. Entries of dA above the
// diagonal and the pitch padding arrive as whatever the tensor holds there: no task reads them.
template <typename Tr>
__device__ __noinline__ void issue_item_tma(const IntraParams& p, const IntraUnit& u, int pass,
                                            unsigned char* stage, uint64_t* bar) {
  const int ch0 = pass * IntraSmemLayout::kMaxPassChannels;
  const int t0 = static_cast<int>(u.t0);
  const int b = static_cast<int>(u.batch);
  const int hv = static_cast<int>(u.hv);
  const int hq = static_cast<int>(u.hv / p.heads_per_group);
  tma::barrier_arrive_expect(bar, Tr::kTmaBytes);
  tma::copy_tile_4d(stage + Tr::kMap.q_off, p.maps.q, bar, ch0, hq, t0, b);
  tma::copy_tile_4d(stage + Tr::kMap.k_off, p.maps.k, bar, ch0, hq, t0, b);
  tma::copy_tile_4d(stage + Tr::kMap.g_off, p.maps.g, bar, ch0, hv, t0, b);
#pragma unroll
  for (int s = 0; s < Tr::kNC; ++s) {
    tma::copy_tile_4d(stage + Tr::kMap.aq_off + 4 * Tr::a_offset(s), p.maps.dAqk[s], bar, 0, hv,
                      t0 + 16 * s, b);
    tma::copy_tile_4d(stage + Tr::kMap.ak_off + 4 * Tr::a_offset(s), p.maps.dAkk[s], bar, 0, hv,
                      t0 + 16 * s, b);
  }
}

// After the bulk copies of a short chunk (L < BT) landed: zeros over rows L .. BT-1 of every tile
// (they hold the next sequence's rows, or zeros past the tensor's end), as the compute expects.
// The caller then syncs the CTA.
template <typename Tr>
__device__ __noinline__ void zero_rows_past(unsigned char* stage, int L, int tid) {
  auto zero = [&](int offset, int row_bytes, int first_row, int end_row) {
    auto* at = reinterpret_cast<uint4*>(stage + offset + first_row * row_bytes);
    const int n = (end_row - first_row) * row_bytes / 16;
    for (int i = tid; i < n; i += Tr::kThreads) at[i] = make_uint4(0, 0, 0, 0);
  };
  constexpr int kX = static_cast<int>(sizeof(typename Tr::XT));
  zero(Tr::kMap.g_off, Tr::kLdG * 4, L, Tr::kBT);
  zero(Tr::kMap.q_off, Tr::kLdX * kX, L, Tr::kBT);
  zero(Tr::kMap.k_off, Tr::kLdX * kX, L, Tr::kBT);
#pragma unroll
  for (int s = 0; s < Tr::kNC; ++s) {
    const int first = L > 16 * s ? L - 16 * s : 0;
    if (first >= 16) continue;
    zero(Tr::kMap.aq_off + 4 * Tr::a_offset(s), 4 * Tr::a_ld(s), first, 16);
    zero(Tr::kMap.ak_off + 4 * Tr::a_offset(s), 4 * Tr::a_ld(s), first, 16);
  }
}

// Stores β (as issue_item_copies returned it) into a stage: converted only now, so that a
// deferred store does not wait for the load until here.
template <typename Tr>
__device__ __forceinline__ void store_beta(const IntraParams& p, unsigned char* stage,
                                           uint32_t bits, int tid) {
  using XT = typename Tr::XT;
  float beta;
  if constexpr (sizeof(XT) == 4) {
    beta = __uint_as_float(bits);
  } else if (p.beta_is_f32) {
    beta = __uint_as_float(bits);
  } else {
    const auto half_bits = static_cast<unsigned short>(bits);
    XT x;
    memcpy(&x, &half_bits, sizeof(x));
    beta = to_float(x);
  }
  reinterpret_cast<float*>(stage + Tr::kMap.beta_off)[tid] = beta;
}

// L2 prefetches of item (u, pass)'s inputs (with one stage: the next item's, issued one item
// ahead) and of its incoming dq, dk, dg rows (issued when the item starts, used at its end). Rows
// with a non-unit column stride are not prefetched. Not inlined (cold).
template <typename Tr>
__device__ __noinline__ void prefetch_item(const IntraParams& p, const IntraUnit& u, int pass,
                                           bool inputs, bool incoming, int tid) {
  using XT = typename Tr::XT;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const PassChannels pc = pass_channels(p, pass);
  const int64_t hq = u.hv / p.heads_per_group;
  auto rows_of = [&](const IntraRows& t, int64_t head, int elem_bytes, int cols, int64_t col0) {
    if (t.stride_col != 1) return;
    const auto* base =
        static_cast<const unsigned char*>(t.data) + origin(t, u, head, col0) * elem_bytes;
    const int64_t row_bytes = t.stride_token * elem_bytes;
    prefetch_rows_l2(
        u.len, cols * elem_bytes, [&](int r) { return base + r * row_bytes; }, warp, Tr::kWarps,
        lane);
  };
  if (inputs) {
    rows_of(p.q, hq, sizeof(XT), pc.valid, pc.ch0);
    rows_of(p.k, hq, sizeof(XT), pc.valid, pc.ch0);
    rows_of(p.g, u.hv, 4, pc.valid, pc.ch0);
    rows_of(p.dAqk, u.hv, 4, u.len, 0);  // rows up to their last read column (< L)
    rows_of(p.dAkk, u.hv, 4, u.len, 0);
  }
  if (incoming) {
    rows_of(p.dq, u.hv, 4, pc.valid, pc.ch0);
    rows_of(p.dk, u.hv, 4, pc.valid, pc.ch0);
    rows_of(p.dg, u.hv, 4, pc.valid, pc.ch0);
  }
}

// prefetch_item's incoming part for dq, dk, dg with unit column strides
// (IntraParams::fast_prefetch): one L2 prefetch per 128-byte line of each row's pass channels, a
// compile-time-shaped spread over the CTA's threads.
template <typename Tr>
__device__ __noinline__ void prefetch_incoming_fast(const IntraParams& p, const IntraUnit& u,
                                                    int pass, int tid) {
  constexpr int kLines = IntraSmemLayout::kMaxPassChannels * 4 / 128 + 1;  // an unaligned row
  constexpr int kSlots = 3 * Tr::kBT * kLines;
  const PassChannels pc = pass_channels(p, pass);
  const int row_bytes = pc.valid * 4;
#pragma unroll
  for (int n = 0; n < (kSlots + Tr::kThreads - 1) / Tr::kThreads; ++n) {
    const int idx = tid + n * Tr::kThreads;
    if (idx >= kSlots) break;
    const int which = idx / (Tr::kBT * kLines);
    const int r = idx / kLines % Tr::kBT;
    const int m = idx % kLines;
    if (r >= u.len) continue;
    const IntraRows& t = which == 0 ? p.dq : which == 1 ? p.dk : p.dg;
    const auto start = reinterpret_cast<uintptr_t>(static_cast<const float*>(t.data) +
                                                   origin(t, u, u.hv, pc.ch0) + r * t.stride_token);
    prefetch_row_line(start, row_bytes, m);
  }
}

// The incoming dq, dk, dg boxes of item (u, pass) prefetched to L2 (bulk-copy kernels):
// three requests from one thread.
template <typename Tr>
__device__ __noinline__ void prefetch_incoming_tma(const IntraParams& p, const IntraUnit& u,
                                                   int pass) {
  const int ch0 = pass * IntraSmemLayout::kMaxPassChannels;
  const int t0 = static_cast<int>(u.t0);
  const int b = static_cast<int>(u.batch);
  const int hv = static_cast<int>(u.hv);
  tma::prefetch_tile_4d(p.maps.dq, ch0, hv, t0, b);
  tma::prefetch_tile_4d(p.maps.dk, ch0, hv, t0, b);
  tma::prefetch_tile_4d(p.maps.dg, ch0, hv, t0, b);
}

// --- one task: (sub-chunk t, 32-channel group) ------------------------------------------------

// Row part, sources s' < t (all full): acc_q (dqa) and acc_r (r) in mma C layout, 16 rows of t x
// 4 tiles of 8 channels (channel cl0 + 8 nt + ...).
template <typename Tr>
__device__ __forceinline__ void row_part(const Stage<Tr>& st, int t, int cl0, int L, int lane,
                                         float (&acc_q)[4][4], float (&acc_r)[4][4]) {
  using S = Tf32Split<Tr::kSplit>;
  const int g = lane / 4;
  const int q = lane % 4;
  const int f = 16 * t;  // anchor: the first row of t
  float g_anchor[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) g_anchor[nt] = st.g(f, cl0 + 8 * nt + g);
  const float* aq = st.aq_row(f + g);  // rows f + g and f + g + 8 (pitch a_ld(t))
  const float* ak = st.ak_row(f + g);
  const int ld8 = 8 * Tr::a_ld(t);
  for (int j0 = 0; j0 < f; j0 += 8) {
    const S a_q[4] = {S(aq[j0 + q]), S(aq[ld8 + j0 + q]), S(aq[j0 + q + 4]),
                      S(aq[ld8 + j0 + q + 4])};
    const S a_k[4] = {S(ak[j0 + q]), S(ak[ld8 + j0 + q]), S(ak[j0 + q + 4]),
                      S(ak[ld8 + j0 + q + 4])};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = cl0 + 8 * nt + g;
      const S b0(st.k(j0 + q, c) * ex2(g_anchor[nt] - st.g(j0 + q, c)));
      const S b1(st.k(j0 + q + 4, c) * ex2(g_anchor[nt] - st.g(j0 + q + 4, c)));
      mma_split(acc_q[nt], a_q, b0, b1);
      mma_split(acc_r[nt], a_k, b0, b1);
    }
  }
  // Row factor exp2(G[i] − G[f]); rows i >= L (zero, never stored) get 0, not exp2 of garbage.
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = cl0 + 8 * nt + 2 * q;
    const float2 gf = st.g2(f, c);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = f + g + 8 * h;
      const float2 gi = st.g2(i, c);
      const float s0 = i < L ? ex2(gi.x - gf.x) : 0.0f;
      const float s1 = i < L ? ex2(gi.y - gf.y) : 0.0f;
      acc_q[nt][2 * h] *= s0;
      acc_q[nt][2 * h + 1] *= s1;
      acc_r[nt][2 * h] *= s0;
      acc_r[nt][2 * h + 1] *= s1;
    }
  }
}

// Column part, sources s > t (rows j >= L masked): acc (dkc) in mma C layout. Sub-chunk t is full
// here (a later sub-chunk has rows).
template <typename Tr>
__device__ __forceinline__ void column_part(const Stage<Tr>& st, int t, int NCv, int cl0, int L,
                                            int lane, float (&acc)[4][4]) {
  using S = Tf32Split<Tr::kSplit>;
  const int g = lane / 4;
  const int q = lane % 4;
  const int l = 16 * t + 15;  // anchor: the last row of t
  float g_anchor[4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) g_anchor[nt] = st.g(l, cl0 + 8 * nt + g);
  for (int s = t + 1; s < NCv; ++s) {
    const int ld = Tr::a_ld(s);
    // A[i][j] = P[j][i]: rows j of s, columns i = 16t + g (+ 8) of t.
    const float* aq = st.Aq() + Tr::a_offset(s) + 16 * t + g;
    const float* ak = st.Ak() + Tr::a_offset(s) + 16 * t + g;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const int r0 = 8 * ks + q;  // row of s: j = 16 s + r0 and j + 4
      const S a_q[4] = {S(aq[r0 * ld]), S(aq[r0 * ld + 8]), S(aq[(r0 + 4) * ld]),
                        S(aq[(r0 + 4) * ld + 8])};
      const S a_k[4] = {S(ak[r0 * ld]), S(ak[r0 * ld + 8]), S(ak[(r0 + 4) * ld]),
                        S(ak[(r0 + 4) * ld + 8])};
      const int j = 16 * s + r0;
      const float beta0 = st.beta(j);
      const float beta1 = st.beta(j + 4);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = cl0 + 8 * nt + g;
        // Rows j >= L hold zeros, but exp2(0 − G[l]) may overflow: mask the factor instead.
        const float e0 = j < L ? ex2(st.g(j, c) - g_anchor[nt]) : 0.0f;
        const float e1 = j + 4 < L ? ex2(st.g(j + 4, c) - g_anchor[nt]) : 0.0f;
        const S bq0(st.q(j, c) * e0);
        const S bq1(st.q(j + 4, c) * e1);
        const S bk0(beta0 * st.k(j, c) * e0);
        const S bk1(beta1 * st.k(j + 4, c) * e1);
        mma_split(acc[nt], a_q, bq0, bq1);
        mma_split(acc[nt], a_k, bk0, bk1);
      }
    }
  }
  // Column factor exp2(G[l] − G[i]).
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = cl0 + 8 * nt + 2 * q;
    const float2 gl = st.g2(l, c);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 gi = st.g2(16 * t + g + 8 * h, c);
      acc[nt][2 * h] *= ex2(gl.x - gi.x);
      acc[nt][2 * h + 1] *= ex2(gl.y - gi.y);
    }
  }
}

// The mma C layout (16 rows x 4 tiles of 8 channels; lane = (g, q) holds rows g, g + 8 and
// channels 8 nt + 2q, + 1) written as a row-major [16][32] tile with row pitch `ld` floats; a
// column of it is then one channel per lane. With ld = 32 the columns are XOR-swizzled by row
// (`swizzled`), with ld = 8 (mod 32) no swizzle is needed: either way the float2 writes of a
// half-warp and the column reads are free of bank conflicts.
__device__ __forceinline__ int tile_col(int row, int col, bool swizzled) {
  return swizzled ? col ^ (8 * (row % 4)) : col;
}

__device__ __forceinline__ void write_c_tile(float* tile, int ld, bool swizzled,
                                             const float (&acc)[4][4], int lane) {
  const int g = lane / 4;
  const int q = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      *reinterpret_cast<float2*>(tile + row * ld + tile_col(row, 8 * nt + 2 * q, swizzled)) =
          make_float2(acc[nt][2 * h], acc[nt][2 * h + 1]);
    }
  }
}

__device__ __forceinline__ float read_c_tile(const float* tile, int ld, bool swizzled, int row,
                                             int lane) {
  return tile[row * ld + tile_col(row, lane, swizzled)];
}

// Writes a value where read_c_tile(scratch tile: ld 32, swizzled) reads it.
__device__ __forceinline__ void write_c_tile_at(float* tile, int row, int lane, float value) {
  tile[row * 32 + tile_col(row, lane, true)] = value;
}

// The block of rows 8..15 x columns 0..7 inside sub-chunk t's diagonal 16 x 16 block, on the
// tensor cores too, factored through the rows on either side of its corner (again every exponent
// <= 0): the row part (dqa, r of rows 8..15) through row f' = 16t + 8, the column part (dkc of
// rows 0..7) through row l' = 16t + 7. The m16 tiles use only half of their rows (the other half of
// A is zero). Added into the accumulators after their own factors were applied.
template <typename Tr>
__device__ __forceinline__ void inner_block(const Stage<Tr>& st, int t, int cl0, int L, int lane,
                                            float (&acc_q)[4][4], float (&acc_r)[4][4],
                                            float (&acc_c)[4][4]) {
  using S = Tf32Split<Tr::kSplit>;
  const int g = lane / 4;
  const int q = lane % 4;
  const int r0 = 16 * t;
  const float* aq = st.aq_row(r0 + 8 + g) + r0;  // Pq[r0 + 8 + g][r0 + ...]
  const float* ak = st.ak_row(r0 + 8 + g) + r0;
  // Row half: A rows g + 8 = i - r0 (i = r0 + 8 + g), k = j - r0 in 0..7.
  const S zero(0.0f);
  const S ar_q[4] = {zero, S(aq[q]), zero, S(aq[q + 4])};
  const S ar_k[4] = {zero, S(ak[q]), zero, S(ak[q + 4])};
  // Column half: A rows g = i - r0 (i = r0 + g), k = j - r0 - 8; A[i][j] = P[j][i].
  const float* cq = st.aq_row(r0 + 8 + q) + r0 + g;  // Pq[r0 + 8 + q][r0 + g]; + 4 rows below
  const float* ck = st.ak_row(r0 + 8 + q) + r0 + g;
  const int ld4 = 4 * Tr::a_ld(t);
  const S ac_q[4] = {S(cq[0]), zero, S(cq[ld4]), zero};
  const S ac_k[4] = {S(ck[0]), zero, S(ck[ld4]), zero};
  const int f = r0 + 8;       // row-half anchor
  const int l = r0 + 7;       // column-half anchor
  const int jc = r0 + 8 + q;  // column-half source rows jc, jc + 4
  const float beta0 = st.beta(jc);
  const float beta1 = st.beta(jc + 4);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = cl0 + 8 * nt + g;
    const float gf = st.g(f, c);
    const float gl = st.g(l, c);
    const S b0(st.k(r0 + q, c) * ex2(gf - st.g(r0 + q, c)));
    const S b1(st.k(r0 + q + 4, c) * ex2(gf - st.g(r0 + q + 4, c)));
    float dq[4] = {}, dr[4] = {}, dc[4] = {};
    mma_split(dq, ar_q, b0, b1);
    mma_split(dr, ar_k, b0, b1);
    const float e0 = jc < L ? ex2(st.g(jc, c) - gl) : 0.0f;
    const float e1 = jc + 4 < L ? ex2(st.g(jc + 4, c) - gl) : 0.0f;
    const S bq0(st.q(jc, c) * e0);
    const S bq1(st.q(jc + 4, c) * e1);
    const S bk0(beta0 * st.k(jc, c) * e0);
    const S bk1(beta1 * st.k(jc + 4, c) * e1);
    mma_split(dc, ac_q, bq0, bq1);
    mma_split(dc, ac_k, bk0, bk1);
    // C rows g + 8 (dq, dr) are rows i = f + g; C rows g (dc) are rows i = r0 + g.
    const int cc = cl0 + 8 * nt + 2 * q;
    const float2 g_f = st.g2(f, cc);
    const float2 g_l = st.g2(l, cc);
    const int i_row = f + g;
    const float2 g_i = st.g2(i_row, cc);
    const float s0 = i_row < L ? ex2(g_i.x - g_f.x) : 0.0f;
    const float s1 = i_row < L ? ex2(g_i.y - g_f.y) : 0.0f;
    acc_q[nt][2] += dq[2] * s0;
    acc_q[nt][3] += dq[3] * s1;
    acc_r[nt][2] += dr[2] * s0;
    acc_r[nt][3] += dr[3] * s1;
    const float2 g_c = st.g2(r0 + g, cc);
    acc_c[nt][0] += dc[0] * ex2(g_l.x - g_c.x);
    acc_c[nt][1] += dc[1] * ex2(g_l.y - g_c.y);
  }
}

// The whole diagonal 16 x 16 block of sub-chunk t on the tensor cores (Tr::kDiagTc; replaces
// inner_block and the exact triangles of phase 2), for gates bounded as safe_gate promises
// (per-token log2 decays >= -7.21, so 8 rows move G by at most ~58 and the factors below stay
// far inside float32's range). Added into the accumulators after their own factors were applied.
//   row part (dqa, r of row i, pairs j <= i): through the first row of i's half, f = 0 or 8 (f
//   <= i, so dq and db stay causal bit for bit): k-step 0 (j = 0..7) holds the upper half's
//   triangle and, in rows 8..15, the 8 x 8 corner, both with B = Kk[j]·2^(G[0] − G[j]); k-step 1
//   (j = 8..15) the lower half's triangle with B = Kk[j]·2^(G[8] − G[j]); then ⊙ 2^(G[i] − G[f]).
//   column part (dkc of row i, pairs j >= i): through row a = min(8, Ls − 1) (a valid row):
//   B = (Q | β⊙Kk)[j]·2^(G[j] − G[a]), then ⊙ 2^(G[a] − G[i]).
// dA entries above the diagonal (never read as data) are replaced by zeros, not multiplied.
template <typename Tr>
__device__ __forceinline__ void diag_block_tc(const Stage<Tr>& st, int t, int cl0, int L, int lane,
                                              float (&acc_q)[4][4], float (&acc_r)[4][4],
                                              float (&acc_c)[4][4]) {
  using S = Tf32Split<Tr::kSplit>;
  const int g = lane / 4;
  const int q = lane % 4;
  const int r0 = 16 * t;
  const int ld = Tr::a_ld(t);
  const float* pq = st.Aq() + Tr::a_offset(t) + r0;  // P[r0 + i][r0 + j] at pq[i * ld + j]
  const float* pk = st.Ak() + Tr::a_offset(t) + r0;
  const S zero(0.0f);
  auto lower = [&](const float* P, int i, int j) { return j <= i ? S(P[i * ld + j]) : zero; };
  // Row part, one k-step at a time (fewer fragments live). A: rows g (i = g) and g + 8 (i = 8 +
  // g), k slots q and q + 4.
  auto b_row = [&](int j, int c, float g_anchor) {  // rows j >= L hold zeros: mask the factor
    return r0 + j < L ? S(st.k(r0 + j, c) * ex2(g_anchor - st.g(r0 + j, c))) : zero;
  };
  {
    // k-step 0, j = 0..7 through row 0: the upper triangle (rows g) and the corner (rows 8 + g).
    const S aq[4] = {lower(pq, g, q), S(pq[(8 + g) * ld + q]), lower(pq, g, q + 4),
                     S(pq[(8 + g) * ld + q + 4])};
    const S ak[4] = {lower(pk, g, q), S(pk[(8 + g) * ld + q]), lower(pk, g, q + 4),
                     S(pk[(8 + g) * ld + q + 4])};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = cl0 + 8 * nt + g;
      const float g0 = st.g(r0, c);
      const S b0 = b_row(q, c, g0), b1 = b_row(q + 4, c, g0);
      float dq[4] = {}, dr[4] = {};
      mma_split(dq, aq, b0, b1);
      mma_split(dr, ak, b0, b1);
      const int cc = cl0 + 8 * nt + 2 * q;
      const float2 f0 = st.g2(r0, cc);
      const float2 gu = st.g2(r0 + g, cc);      // row g
      const float2 gl = st.g2(r0 + 8 + g, cc);  // row 8 + g
      const bool ok_u = r0 + g < L;
      const bool ok_l = r0 + 8 + g < L;
      const float s[4] = {ok_u ? ex2(gu.x - f0.x) : 0.0f, ok_u ? ex2(gu.y - f0.y) : 0.0f,
                          ok_l ? ex2(gl.x - f0.x) : 0.0f, ok_l ? ex2(gl.y - f0.y) : 0.0f};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc_q[nt][e] += dq[e] * s[e];
        acc_r[nt][e] += dr[e] * s[e];
      }
    }
  }
  if (L - r0 > 8) {
    // k-step 1, j = 8..15 through row 8: the lower triangle (rows 8 + g only).
    const S aq[4] = {zero, lower(pq + 8 * ld + 8, g, q), zero, lower(pq + 8 * ld + 8, g, q + 4)};
    const S ak[4] = {zero, lower(pk + 8 * ld + 8, g, q), zero, lower(pk + 8 * ld + 8, g, q + 4)};
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = cl0 + 8 * nt + g;
      const float g8 = st.g(r0 + 8, c);
      const S b0 = b_row(8 + q, c, g8), b1 = b_row(12 + q, c, g8);
      float dq[4] = {}, dr[4] = {};
      mma_split(dq, aq, b0, b1);
      mma_split(dr, ak, b0, b1);
      const int cc = cl0 + 8 * nt + 2 * q;
      const float2 f8 = st.g2(r0 + 8, cc);
      const float2 gl = st.g2(r0 + 8 + g, cc);
      const bool ok_l = r0 + 8 + g < L;
      const float s0 = ok_l ? ex2(gl.x - f8.x) : 0.0f;
      const float s1 = ok_l ? ex2(gl.y - f8.y) : 0.0f;
      acc_q[nt][2] += dq[2] * s0;
      acc_q[nt][3] += dq[3] * s1;
      acc_r[nt][2] += dr[2] * s0;
      acc_r[nt][3] += dr[3] * s1;
    }
  }
  // Column part, one k-step at a time. A[i][j] = P[j][i] for j >= i: k-step 0 (j = q, q + 4)
  // reaches rows g only; k-step 1 (j = 8 + q, 12 + q) rows g in full (j > i) and rows 8 + g on
  // and above the diagonal.
  auto upper = [&](const float* P, int i, int j) { return j >= i ? S(P[j * ld + i]) : zero; };
  const int a = r0 + (L - r0 > 8 ? 8 : L - r0 - 1);  // anchor: a valid row
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    if (ks == 1 && L - r0 <= 8) break;  // no rows 8..15
    const S aq[4] = {ks == 0 ? upper(pq, g, q) : S(pq[(8 + q) * ld + g]),
                     ks == 0 ? zero : upper(pq + 8 * ld + 8, g, q),
                     ks == 0 ? upper(pq, g, q + 4) : S(pq[(12 + q) * ld + g]),
                     ks == 0 ? zero : upper(pq + 8 * ld + 8, g, q + 4)};
    const S ak[4] = {ks == 0 ? upper(pk, g, q) : S(pk[(8 + q) * ld + g]),
                     ks == 0 ? zero : upper(pk + 8 * ld + 8, g, q),
                     ks == 0 ? upper(pk, g, q + 4) : S(pk[(12 + q) * ld + g]),
                     ks == 0 ? zero : upper(pk + 8 * ld + 8, g, q + 4)};
    const int j0 = r0 + 8 * ks + q;  // source rows j0 and j0 + 4
    const float beta0 = st.beta(j0);
    const float beta1 = st.beta(j0 + 4);
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = cl0 + 8 * nt + g;
      const float ga = st.g(a, c);
      const float e0 = j0 < L ? ex2(st.g(j0, c) - ga) : 0.0f;
      const float e1 = j0 + 4 < L ? ex2(st.g(j0 + 4, c) - ga) : 0.0f;
      const S bq0(st.q(j0, c) * e0);
      const S bq1(st.q(j0 + 4, c) * e1);
      const S bk0(beta0 * st.k(j0, c) * e0);
      const S bk1(beta1 * st.k(j0 + 4, c) * e1);
      float d[4] = {};
      mma_split(d, aq, bq0, bq1);
      mma_split(d, ak, bk0, bk1);
      const int cc = cl0 + 8 * nt + 2 * q;
      const float2 fa = st.g2(a, cc);
      const float2 gu = st.g2(r0 + g, cc);
      acc_c[nt][0] += r0 + g < L ? d[0] * ex2(fa.x - gu.x) : 0.0f;
      acc_c[nt][1] += r0 + g < L ? d[1] * ex2(fa.y - gu.y) : 0.0f;
      if (ks == 1) {
        const float2 gl = st.g2(r0 + 8 + g, cc);
        acc_c[nt][2] += r0 + 8 + g < L ? d[2] * ex2(fa.x - gl.x) : 0.0f;
        acc_c[nt][3] += r0 + 8 + g < L ? d[3] * ex2(fa.y - gl.y) : 0.0f;
      }
    }
  }
}

// Phase 1 of a task (sub-chunk t, channel group cg): everything but the two 8 x 8 triangles of
// the diagonal block, on the tensor cores. acc_q, acc_r (dqa, r) and acc_c (dkc) start at zero.
template <typename Tr>
__device__ __forceinline__ void off_diagonal_phase(const Stage<Tr>& st, int L, int t, int cg,
                                                   int lane, float (&acc_q)[4][4],
                                                   float (&acc_r)[4][4], float (&acc_c)[4][4]) {
  const int NCv = (L + 15) / 16;
  if (t > 0) row_part(st, t, 32 * cg, L, lane, acc_q, acc_r);
  if (t + 1 < NCv) column_part(st, t, NCv, 32 * cg, L, lane, acc_c);
  if constexpr (Tr::kDiagTc) {
    diag_block_tc(st, t, 32 * cg, L, lane, acc_q, acc_r, acc_c);
  } else if (L - 16 * t > 8) {
    inner_block(st, t, 32 * cg, L, lane, acc_q, acc_r, acc_c);
  }
}

// db partials of a task: row i's sum of the scratch tile's r·Kk terms over this warp's 32
// channels, lanes 2i and 2i + 1 taking 16 each (a fixed order: deterministic), instead of a 5-step
// shuffle reduction per row.
template <typename Tr>
__device__ __forceinline__ void store_db_partials(const float* scratch, float* dbpart, int pass,
                                                  int t, int cg, int rows, int lane) {
  __syncwarp();
  const int i = lane / 2;
  const float4* half =
      reinterpret_cast<const float4*>(scratch + i * 32 + 16 * (lane % 2));  // physical slots
  float sum = 0.0f;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const float4 x = half[v];
    sum += (x.x + x.y) + (x.z + x.w);
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  const int group = pass * Tr::kGroupsPerPass + cg;
  if (lane % 2 == 0 && i < rows) dbpart[group * Tr::kBT + 16 * t + i] = sum;
}

// Where a task stands in phase 2: the rows of its sub-chunk t (Ls), its channel within the pass
// (cl), whether that channel exists (ch_ok) and the channel its addresses use (c: 0 past K, so
// that they stay inside the tensors).
struct PhaseTwoTask {
  int Ls;
  int cl;
  bool ch_ok;
  int64_t c;
};

template <bool kFull>
__device__ __forceinline__ PhaseTwoTask phase_two_task(const IntraParams& p, const IntraUnit& u,
                                                       int pass, int t, int cg, int lane) {
  const int cl = 32 * cg + lane;
  const int64_t ch = static_cast<int64_t>(pass) * IntraSmemLayout::kMaxPassChannels + cl;
  const bool ch_ok = ch < p.K;
  return {kFull ? 16 : (u.len - 16 * t < 16 ? u.len - 16 * t : 16), cl, ch_ok, ch_ok ? ch : 0};
}

// dkc from the mma C layout to one channel per lane (row i in dkc[i]) through the warp's scratch
// tile, which is free again afterwards.
__device__ __forceinline__ void take_dkc(float* scratch, const float (&acc_c)[4][4], int lane,
                                         float (&dkc)[16]) {
  write_c_tile(scratch, 32, true, acc_c, lane);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) dkc[i] = read_c_tile(scratch, 32, true, i, lane);
  __syncwarp();
}

// Phase 2 of a task, after a CTA barrier (no warp reads another task's G tile any more): the two
// 8 x 8 triangles of the diagonal block (pairs j <= i inside rows 8h .. 8h + 7) on the CUDA cores
// with the exact D = exp2(G[i] − G[j]) per pair and channel, each D used for dqa, r and dkc; then
// the stores of the rows, one channel per lane (channel ch0 + 32 cg + lane of K).
//   The task's own G tile is read into registers and then reused to hand over the mma's dqa; r and
//   dkc go through the warp's scratch tile. Rows are finished from the last to the first, so
//   dkc[i] is complete when row i is stored. kFull: the sub-chunk has all 16 rows (every task but
//   those of a sequence's last chunk), so no row needs a bounds test.
//   Addresses of the incoming and output rows move by one row pitch per row (a 64-bit add) rather
//   than being recomputed (a 64-bit multiply each).
template <typename Tr, bool kFull>
__device__ __forceinline__ void diagonal_phase(const IntraParams& p, unsigned char* stage,
                                               const Stage<Tr>& st, const IntraUnit& u, int pass,
                                               int t, int cg, const float (&acc_q)[4][4],
                                               const float (&acc_r)[4][4],
                                               const float (&acc_c)[4][4], float* scratch,
                                               float* dbpart, int lane) {
  const PhaseTwoTask k = phase_two_task<kFull>(p, u, pass, t, cg, lane);
  const int Ls = k.Ls;
  auto row_ok = [&](int i) { return kFull || i < Ls; };
  const int cl = k.cl;
  const bool ch_ok = k.ch_ok;
  const int64_t c = k.c;
  const int r0 = 16 * t;

  float dkc[16];
  take_dkc(scratch, acc_c, lane, dkc);
  float* dqa_tile = reinterpret_cast<float*>(stage + Tr::kMap.g_off) + r0 * Tr::kLdG + 32 * cg;
  // Own G rows first: dqa_tile overwrites them.
  float Gr[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) Gr[i] = st.g(r0 + i, cl);
  __syncwarp();
  write_c_tile(dqa_tile, Tr::kLdG, false, acc_q, lane);
  write_c_tile(scratch, 32, true, acc_r, lane);
  __syncwarp();

  const auto* dq_in =
      static_cast<const float*>(p.dq.data) + origin(p.dq, u, u.hv, c) + r0 * p.dq.stride_token;
  const auto* dk_in =
      static_cast<const float*>(p.dk.data) + origin(p.dk, u, u.hv, c) + r0 * p.dk.stride_token;
  const auto* dg_in =
      static_cast<const float*>(p.dg.data) + origin(p.dg, u, u.hv, c) + r0 * p.dg.stride_token;
  const int64_t out_pitch = p.HV * p.K;
  const int64_t out0 = ((u.batch * p.T + u.t0 + r0) * p.HV + u.hv) * p.K + c;
  const int ld = Tr::a_ld(t);

#pragma unroll
  for (int h = 1; h >= 0; --h) {
    const int base = 8 * h;  // rows base .. base + 7 of t
    if (kFull || base < Ls) {
      float Kr[8];
#pragma unroll
      for (int m = 0; m < 8; ++m) Kr[m] = st.k(r0 + base + m, cl);
      const float* aq = st.aq_row(r0 + base) + r0 + base;  // row base + i at + i * ld
      const float* ak = st.ak_row(r0 + base) + r0 + base;
      // The half's incoming rows, all loaded before its first row is computed: a load issued at
      // the row that adds it left its latency exposed (ncu: long-scoreboard stalls).
      float in_q[8], in_k[8], in_g[8];
      {
        const float* q_at = dq_in + base * p.dq.stride_token;
        const float* k_at = dk_in + base * p.dk.stride_token;
        const float* g_at = dg_in + base * p.dg.stride_token;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const bool load = ch_ok && row_ok(base + i);
          in_q[i] = load ? __ldcs(q_at) : 0.0f;
          in_k[i] = load ? __ldcs(k_at) : 0.0f;
          in_g[i] = load ? __ldcs(g_at) : 0.0f;
          q_at += p.dq.stride_token;
          k_at += p.dk.stride_token;
          g_at += p.dg.stride_token;
        }
      }
      // Output rows from the half's last row down.
      float* dq_out = p.dq_out + out0 + (base + 7) * out_pitch;
      float* dk_out = p.dk_out + out0 + (base + 7) * out_pitch;
      float* dg_out = p.dg_out + out0 + (base + 7) * out_pitch;
#pragma unroll
      for (int i = 7; i >= 0; --i) {
        if (row_ok(base + i)) {
          const int row = r0 + base + i;
          const float gi = Gr[base + i];
          const float qi = st.q(row, cl);
          const float bi = st.beta(row);
          const float bki = bi * Kr[i];
          float dq_acc = read_c_tile(dqa_tile, Tr::kLdG, false, base + i, lane);
          float r_acc = read_c_tile(scratch, 32, true, base + i, lane);
          // Fixed trip counts (resolved once the outer loops are unrolled): with a bound of
          // i / 4 the inner loop would be unrolled first, at an unknown i, and dkc[] indexed at
          // run time would go to local memory.
#pragma unroll
          for (int j4 = 0; j4 < 2; ++j4) {
            if (4 * j4 > i) break;
            const float4 pq4 = *reinterpret_cast<const float4*>(aq + i * ld + 4 * j4);
            const float4 pk4 = *reinterpret_cast<const float4*>(ak + i * ld + 4 * j4);
            const float pq[4] = {pq4.x, pq4.y, pq4.z, pq4.w};
            const float pk[4] = {pk4.x, pk4.y, pk4.z, pk4.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int j = 4 * j4 + e;
              if (j <= i) {
                const float D = j == i ? 1.0f : ex2(gi - Gr[base + j]);  // exactly 1 at j = i
                const float kd = Kr[j] * D;
                dq_acc = fmaf(pq[e], kd, dq_acc);
                r_acc = fmaf(pk[e], kd, r_acc);
                dkc[base + j] = fmaf(fmaf(pq[e], qi, pk[e] * bki), D, dkc[base + j]);
              }
            }
          }
          // Row base + i is complete (dkc took its last term, from j = i, just now). Its db
          // term r·Kk for this lane's channel takes r's place in the scratch tile (this lane's
          // own slot); the rows are summed over the lanes once, below.
          write_c_tile_at(scratch, base + i, lane, ch_ok ? r_acc * Kr[i] : 0.0f);
          if (ch_ok) {
            const float dkr = bi * r_acc;
            const float dkc_i = dkc[base + i];
            __stcs(dq_out, in_q[i] + dq_acc);
            __stcs(dk_out, in_k[i] + dkr + dkc_i);
            __stcs(dg_out, in_g[i] + qi * dq_acc + Kr[i] * (dkr - dkc_i));
          }
        }
        dq_out -= out_pitch;
        dk_out -= out_pitch;
        dg_out -= out_pitch;
      }
    }
  }
  store_db_partials<Tr>(scratch, dbpart, pass, t, cg, Ls, lane);
}

// Phase 2 of a task whose diagonal block went through the tensor cores (Tr::kDiagTc): the
// accumulators are complete. They move to one channel per lane through shared memory (dkc via the
// warp's scratch tile into registers; dqa into the task's own G tile, which nothing reads any
// more; r via the scratch tile), then the rows are stored: dq, dk, dg (incoming + intra) and the
// db partials. kFull as in diagonal_phase.
template <typename Tr, bool kFull>
__device__ __forceinline__ void diagonal_phase_tc(const IntraParams& p, unsigned char* stage,
                                                  const Stage<Tr>& st, const IntraUnit& u, int pass,
                                                  int t, int cg, const float (&acc_q)[4][4],
                                                  const float (&acc_r)[4][4],
                                                  const float (&acc_c)[4][4], float* scratch,
                                                  float* dbpart, int lane) {
  const PhaseTwoTask k = phase_two_task<kFull>(p, u, pass, t, cg, lane);
  const int Ls = k.Ls;
  auto row_ok = [&](int i) { return kFull || i < Ls; };
  const int cl = k.cl;
  const bool ch_ok = k.ch_ok;
  const int64_t c = k.c;
  const int r0 = 16 * t;

  float dkc[16];
  take_dkc(scratch, acc_c, lane, dkc);
  float* dqa_tile = reinterpret_cast<float*>(stage + Tr::kMap.g_off) + r0 * Tr::kLdG + 32 * cg;
  write_c_tile(dqa_tile, Tr::kLdG, false, acc_q, lane);
  write_c_tile(scratch, 32, true, acc_r, lane);
  __syncwarp();

  const float* q_at =
      static_cast<const float*>(p.dq.data) + origin(p.dq, u, u.hv, c) + r0 * p.dq.stride_token;
  const float* k_at =
      static_cast<const float*>(p.dk.data) + origin(p.dk, u, u.hv, c) + r0 * p.dk.stride_token;
  const float* g_at =
      static_cast<const float*>(p.dg.data) + origin(p.dg, u, u.hv, c) + r0 * p.dg.stride_token;
  const int64_t out_pitch = p.HV * p.K;
  int64_t out = ((u.batch * p.T + u.t0 + r0) * p.HV + u.hv) * p.K + c;
#pragma unroll
  for (int base = 0; base < 16; base += 8) {
    if (kFull || base < Ls) {
      // The half's incoming rows, all loaded before its first row is stored.
      float in_q[8], in_k[8], in_g[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const bool load = ch_ok && row_ok(base + i);
        in_q[i] = load ? __ldcs(q_at) : 0.0f;
        in_k[i] = load ? __ldcs(k_at) : 0.0f;
        in_g[i] = load ? __ldcs(g_at) : 0.0f;
        q_at += p.dq.stride_token;
        k_at += p.dk.stride_token;
        g_at += p.dg.stride_token;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (row_ok(base + i)) {
          const int row = r0 + base + i;
          const float qi = st.q(row, cl);
          const float ki = st.k(row, cl);
          const float bi = st.beta(row);
          const float dq_acc = read_c_tile(dqa_tile, Tr::kLdG, false, base + i, lane);
          const float r_acc = read_c_tile(scratch, 32, true, base + i, lane);
          // Row base + i's db term r·Kk takes r's place in the scratch tile (this lane's own
          // slot); the rows are summed over the lanes once, below.
          write_c_tile_at(scratch, base + i, lane, ch_ok ? r_acc * ki : 0.0f);
          if (ch_ok) {
            const float dkr = bi * r_acc;
            const float dkc_i = dkc[base + i];
            __stcs(p.dq_out + out, in_q[i] + dq_acc);
            __stcs(p.dk_out + out, in_k[i] + dkr + dkc_i);
            __stcs(p.dg_out + out, in_g[i] + qi * dq_acc + ki * (dkr - dkc_i));
          }
        }
        out += out_pitch;
      }
    }
  }
  store_db_partials<Tr>(scratch, dbpart, pass, t, cg, Ls, lane);
}

// --- the kernel ----------------------------------------------------------------------------------

// db of one unit, deferred: its per-row partials (one per channel group) sit in dbpart[buffer]
// until the threads that own its rows sum them after the next item's first barrier, so that no
// barrier of its own is needed at the end of every item.
struct PendingDb {
  bool pending = false;
  int buffer = 0;      // dbpart buffer (the unit's number mod 2)
  int64_t at = 0;      // element of db_out
  float db_in = 0.0f;  // incoming db of the row
};

template <typename Tr>
__device__ __forceinline__ void finish_db(const IntraParams& p, const float* dbpart, int row,
                                          PendingDb& d) {
  if (!d.pending) return;
  const int groups_total = static_cast<int>((p.K + 31) / 32);
  const float* part = dbpart + d.buffer * Tr::kMaxGroups * Tr::kBT + row;
  float sum = 0.0f;
  for (int gi = 0; gi < groups_total; ++gi) sum += part[gi * Tr::kBT];
  p.db_out[d.at] = d.db_in + sum;
  d.pending = false;
}

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks)
    chunk_bwd_intra_kernel(const __grid_constant__ IntraParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const IntraSmemLayout& lay = p.smem;
  // Resolved units, slot m % 3 for unit m (the current one, the next one, and the one after it,
  // resolved two units ahead by the last warp so that no barrier waits on the resolution).
  auto* units = reinterpret_cast<IntraUnit*>(smem + lay.units_off);
  auto* dbpart = reinterpret_cast<float*>(smem + lay.dbpart_off);  // [2][kMaxGroups][BT]
  float* scratch = reinterpret_cast<float*>(smem + lay.scratch_off) + warp * Tr::kScratchFloats;
  auto* bars = reinterpret_cast<uint64_t*>(smem + lay.barriers_off);  // [stage]: bulk copies
  constexpr bool tma = Tr::kBulk;
  // When the incoming dq/dk/dg of an item are prefetched to L2: two-stage bulk kernels with the
  // exact diagonal issue the prefetch when the issuer's phase 1 is done (the last warp: the
  // lightest phase 1), the others when the item starts. Measured (H200, T=8192 bf16): item start
  // 438-447 µs, after the issuer's phase 1 416-418 (T=2048: 125 -> 113); one item ahead 502 (the
  // lines wait longer in L2 and are evicted before phase 2 reads them). The tensor-core diagonal
  // kernel (longer phase 1) measured 436 -> 441 with the late prefetch, so it keeps the early one.
  constexpr bool kIncomingLate = Tr::kBulkStages == 2 && !Tr::kDiagTc;
  uint32_t phases = 0;  // bit s: the parity of stage s's next bulk-copy phase
  // The threads that finish db: row tid - kDbFirst (the warps before the last one, whose tasks
  // have the lightest first phase).
  constexpr int kDbFirst = Tr::kThreads - 32 - Tr::kBT;
  const int db_row = tid - kDbFirst;
  const bool db_thread = db_row >= 0 && db_row < Tr::kBT;
  PendingDb db;

  const int64_t first = blockIdx.x;
  const int64_t step = gridDim.x;
  if (first >= p.num_units) return;
  const int passes = lay.passes;
  const int stages = Tr::kBulk ? Tr::kBulkStages : lay.stages;
  const int64_t my_units = (p.num_units - 1 - first) / step + 1;
  const int64_t items = my_units * passes;

  // Queues item (w, pass)'s copies into stage `stage_index` (cp.async by every thread, or bulk
  // tensor copies by one); returns this thread's β bits for store_beta.
  auto issue = [&](const IntraUnit& w, int pass, int stage_index) -> uint32_t {
    unsigned char* stage = smem + stage_index * Tr::kMap.bytes;
    if (!tma) return issue_copies<Tr>(p, w, pass, stage, tid);
    if (tid == Tr::kIssuer) issue_item_tma<Tr>(p, w, pass, stage, bars + stage_index);
    return beta_bits_of<Tr>(p, w, tid);
  };

  // Prologue: units 0 and 1 resolved (warps 0 and 1), the first item's copies into stage 0.
  if (warp < 2 && warp < my_units) {
    const IntraUnit w = resolve_unit(p, first + warp * step, Tr::kBT, lane);
    if (lane == 0) units[warp] = w;
  }
  if (tma && tid == 0) {
    tma::barrier_init(bars);
    tma::barrier_init(bars + 1);
    tma::barrier_init_fence();
  }
  __syncthreads();
  {
    const IntraUnit u0 = units[0];
    if (u0.valid) {
      const uint32_t beta = issue(u0, 0, 0);
      if (tid < Tr::kBT) store_beta<Tr>(p, smem, beta, tid);
    }
    cp_async_commit();
  }

  for (int64_t n = 0; n < items; ++n) {
    const int pass = static_cast<int>(n % passes);
    const int64_t unit_n = n / passes;
    const int slot = static_cast<int>(unit_n % 3);
    const bool has_next = n + 1 < items;
    const bool next_is_new_unit = pass == passes - 1;
    const int next_slot = next_is_new_unit ? (slot == 2 ? 0 : slot + 1) : slot;
    const int next_pass = next_is_new_unit ? 0 : pass + 1;
    if (!tma) cp_async_wait_all();
    // (A): the previous item is done everywhere (its stage, db partials and units may be
    // reused); this item's cp.async copies landed (bulk copies: waited on below).
    __syncthreads();

    // The previous unit's db (its last item ended before (A)).
    if (pass == 0 && db_thread) finish_db<Tr>(p, dbpart, db_row, db);
    // Unit unit_n + 2, resolved while the others compute; first read after a later (A).
    if (pass == 0 && warp == Tr::kWarps - 1 && unit_n + 2 < my_units) {
      const IntraUnit w = resolve_unit(p, first + (unit_n + 2) * step, Tr::kBT, lane);
      if (lane == 0) units[(unit_n + 2) % 3] = w;
    }

    const IntraUnit u = units[slot];
    const int cur = stages == 2 ? static_cast<int>(n % 2) : 0;
    unsigned char* stage = smem + cur * Tr::kMap.bytes;
    uint32_t beta_next = 0;
    bool beta_next_pending = false;
    if (stages == 2 && has_next) {
      // The other stage was last read by item n - 1, before (A).
      const IntraUnit un = units[next_slot];
      if (un.valid) {
        beta_next = issue(un, next_pass, cur ^ 1);
        beta_next_pending = true;
      }
      cp_async_commit();
    }
    if (tma && u.valid) {
      tma::barrier_wait(bars + cur, (phases >> cur) & 1u);
      phases ^= 1u << cur;
      if (u.len < Tr::kBT) {
        zero_rows_past<Tr>(stage, u.len, tid);
        __syncthreads();
      }
    }
    const bool last_pass = pass == passes - 1;
    if (u.valid) {
      if (p.l2_prefetch) {
        if constexpr (kIncomingLate) {
          // prefetched later: when the issuer's phase 1 is done (below)
        } else if constexpr (Tr::kBulk) {
          if (tid == Tr::kIssuer) prefetch_incoming_tma<Tr>(p, u, pass);
        } else if (p.fast_prefetch) {
          prefetch_incoming_fast<Tr>(p, u, pass, tid);
        } else {
          prefetch_item<Tr>(p, u, pass, false, true, tid);
        }
        if (stages == 1 && has_next && units[next_slot].valid) {
          prefetch_item<Tr>(p, units[next_slot], next_pass, true, false, tid);
        }
      }
      if (last_pass && db_thread && db_row < u.len) {
        db.pending = true;
        db.buffer = static_cast<int>(unit_n % 2);
        db.at = (u.batch * p.T + u.t0 + db_row) * p.HV + u.hv;
        db.db_in = load_float<float>(p.db.data, origin(p.db, u) + db_row * p.db.stride_token);
      }
      // At most one task per warp: (sub-chunk, channel group) pairs <= NC x 4 = warps.
      const Stage<Tr> st{stage};
      const int groups = pass_channels(p, pass).padded / 32;
      const bool has_task = warp < (u.len + 15) / 16 * groups;
      const int t = warp / groups;
      const int cg = warp % groups;
      float acc_q[4][4] = {};
      float acc_r[4][4] = {};
      float acc_c[4][4] = {};
      if (has_task) off_diagonal_phase(st, u.len, t, cg, lane, acc_q, acc_r, acc_c);
      if (kIncomingLate && p.l2_prefetch && tid == Tr::kIssuer) {
        prefetch_incoming_tma<Tr>(p, u, pass);
      }
      __syncthreads();  // (C): the tiles of other tasks are read no more
      if (has_task) {
        float* parts = dbpart + static_cast<int>(unit_n % 2) * Tr::kMaxGroups * Tr::kBT;
        const bool full = u.len - 16 * t >= 16;
        if constexpr (Tr::kDiagTc) {
          if (full) {
            diagonal_phase_tc<Tr, true>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                        parts, lane);
          } else {
            diagonal_phase_tc<Tr, false>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                         parts, lane);
          }
        } else if (full) {
          diagonal_phase<Tr, true>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                   parts, lane);
        } else {
          diagonal_phase<Tr, false>(p, stage, st, u, pass, t, cg, acc_q, acc_r, acc_c, scratch,
                                    parts, lane);
        }
      }
    }
    if (beta_next_pending && tid < Tr::kBT) {
      store_beta<Tr>(p, smem + (cur ^ 1) * Tr::kMap.bytes, beta_next, tid);
    }
    // This item's ordinary writes into its stage (dqa over G, zeros, β) before the bulk copies
    // that will overwrite it, after the next (A) (or (B)).
    if (tma) tma::fence_proxy_async_shared();

    if (stages == 1 && has_next) {
      __syncthreads();  // (B): one stage: every task is done with it before it is refilled
      const IntraUnit un = units[next_slot];
      if (un.valid) {
        const uint32_t beta = issue(un, next_pass, 0);
        if (tid < Tr::kBT) store_beta<Tr>(p, smem, beta, tid);
      }
      cp_async_commit();
    }
  }
  // The last unit's db.
  __syncthreads();
  if (db_thread) finish_db<Tr>(p, dbpart, db_row, db);
}

}  // namespace kda::cuda::intra
