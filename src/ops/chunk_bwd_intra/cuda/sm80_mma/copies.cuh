#pragma once
// The copies of one chunk_bwd_intra work item into a shared-memory stage (cp.async, general or
// compile-time-shaped, or bulk tensor copies), β, the zeros past a short chunk, and the L2
// prefetches of the incoming rows.
#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/tma.cuh"
#include "ops/chunk_bwd_intra/cuda/params.hpp"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/device.cuh"
#include "ops/chunk_bwd_intra/cuda/sm80_mma/traits.cuh"

namespace kda::cuda::intra {

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
    const TokenCopyView& t = which == 0 ? p.q : which == 1 ? p.k : p.g;
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
    const TokenCopyView& t = which == 0 ? p.dAqk : p.dAkk;
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
  auto rows = [&](const TokenCopyView& t, int64_t head, int elem_bytes, int64_t col0) {
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
  auto rows_of = [&](const TokenCopyView& t, int64_t head, int elem_bytes, int cols, int64_t col0) {
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
    const TokenCopyView& t = which == 0 ? p.dq : which == 1 ? p.dk : p.dg;
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

}  // namespace kda::cuda::intra
