#pragma once
// Which rows a chunk covers, read from the device-resident index tensors with every value
// bounds-checked: the varlen chunk walk that every chunked KDA kernel needs.
//
// Why the checks live here: cu_seqlens and chunk_indices sit on the device, and validating their
// contents on the host would need a synchronizing copy. So each chunk checks what it reads:
//   sequence id in [0, N),  0 <= bos <= eos <= T,  0 <= chunk id < ceil((eos - bos) / BT).
// A chunk that fails any check is invalid: the kernel reads and writes nothing for it, and the
// output rows it would have written keep whatever the caller's buffers held. Inconsistent index
// tensors are a caller error; the guarantee is only that they never cause an out-of-bounds
// access. (Likewise, without chunk_indices the chunk count is the launch's; chunks past the ones
// cu_seqlens describes are invalid, and chunks cu_seqlens describes past that count are not
// computed.)

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/common/views.hpp"

namespace kda::cuda {

// Trivially constructible (no member initializers) so that it can live in __shared__;
// create it as `ChunkSpan c{}` (all zero, valid == false).
struct ChunkSpan {
  int64_t batch;         // batch row of the token tensors (0 when varlen)
  int64_t t0;            // first token of the chunk within the batch row
  int64_t chunk_in_row;  // chunk index within the batch row (fixed length; varlen: global)
  int len;               // rows in the chunk, 1..BT
  bool valid;
};

// Without chunk_indices: finds which sequence holds global chunk `chunk` by scanning the
// sequences' chunk counts ceil(len / BT) in order, 32 sequences per step (one per lane, with a
// warp prefix sum). Called by a whole warp; returns false when `chunk` lies past the last one.
__device__ inline bool find_chunk_by_scan(const ChunkLayout& c, int64_t chunk, int chunk_size,
                                          int lane, int64_t* seq, int64_t* chunk_in_seq) {
  constexpr unsigned kFullMask = 0xffffffffu;
  int64_t chunks_before = 0;  // chunks of the sequences scanned in earlier steps
  for (int64_t first = 0; first < c.num_seqs; first += 32) {
    const int64_t n = first + lane;
    int64_t count = 0;
    if (n < c.num_seqs) {
      int64_t len = load_index(c.cu_seqlens, (n + 1) * c.cu_seqlens.stride0) -
                    load_index(c.cu_seqlens, n * c.cu_seqlens.stride0);
      // Clamp so that garbage cannot overflow the running sum; bad sequences fail the bounds
      // check after the scan.
      len = len < 0 ? 0 : (len > c.T ? c.T : len);
      count = (len + chunk_size - 1) / chunk_size;
    }
    int64_t inclusive = count;
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int64_t below = __shfl_up_sync(kFullMask, inclusive, offset);
      if (lane >= offset) inclusive += below;
    }
    const int64_t exclusive = inclusive - count;
    const int64_t target = chunk - chunks_before;
    const unsigned holders = __ballot_sync(kFullMask, target >= exclusive && target < inclusive);
    if (holders != 0u) {
      const int src = __ffs(static_cast<int>(holders)) - 1;
      *seq = __shfl_sync(kFullMask, n, src);
      *chunk_in_seq = __shfl_sync(kFullMask, target - exclusive, src);
      return true;
    }
    chunks_before += __shfl_sync(kFullMask, inclusive, 31);
  }
  return false;
}

// Global chunk `chunk` (0 .. B * NT - 1 for fixed length, 0 .. NT - 1 for varlen). Called by one
// whole warp; lane 0's result is the one to use.
__device__ inline ChunkSpan resolve_chunk(const ChunkLayout& c, int64_t chunk, int chunk_size,
                                          int lane) {
  ChunkSpan s{};
  if (!c.varlen) {
    s.batch = chunk / c.NT;
    s.chunk_in_row = chunk % c.NT;
    s.t0 = s.chunk_in_row * chunk_size;
    const int64_t rows = c.T - s.t0;
    s.len = static_cast<int>(rows < chunk_size ? rows : chunk_size);
    s.valid = true;
    return s;
  }
  int64_t seq = -1;
  int64_t chunk_in_seq = -1;
  if (c.has_chunk_indices) {
    const IndexView& ci = c.chunk_indices;
    seq = load_index(ci, chunk * ci.stride0);
    chunk_in_seq = load_index(ci, chunk * ci.stride0 + ci.stride1);
  } else if (!find_chunk_by_scan(c, chunk, chunk_size, lane, &seq, &chunk_in_seq)) {
    return s;  // past the chunks cu_seqlens describes: skip
  }
  if (seq < 0 || seq >= c.num_seqs) return s;
  const int64_t bos = load_index(c.cu_seqlens, seq * c.cu_seqlens.stride0);
  const int64_t eos = load_index(c.cu_seqlens, (seq + 1) * c.cu_seqlens.stride0);
  if (bos < 0 || bos > eos || eos > c.T) return s;
  const int64_t seq_chunks = (eos - bos + chunk_size - 1) / chunk_size;  // no overflow: eos <= T
  if (chunk_in_seq < 0 || chunk_in_seq >= seq_chunks) return s;
  s.batch = 0;
  s.t0 = bos + chunk_in_seq * chunk_size;
  const int64_t rows = eos - s.t0;  // >= 1 by the check above
  s.len = static_cast<int>(rows < chunk_size ? rows : chunk_size);
  s.chunk_in_row = chunk;
  s.valid = true;
  return s;
}

}  // namespace kda::cuda
