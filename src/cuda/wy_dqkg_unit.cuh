#pragma once
// Work units: unit u = chunk * HV + hv, one CTA each. This file maps a unit to its rows of the
// inputs and to its h/dh slice, reading the device-resident index tensors with every value
// bounds-checked.
//
// Why the checks live here: cu_seqlens and chunk_indices sit on the device, and validating their
// contents on the host would need a synchronizing copy. So each unit checks what it reads:
//   sequence id in [0, N),  0 <= bos <= eos <= T,  0 <= chunk id < ceil((eos - bos) / BT).
// A unit that fails any check is skipped: it reads and writes nothing, and the output rows it
// would have written keep whatever the caller's buffers held. Inconsistent index tensors are a
// caller error; the guarantee is only that they never cause an out-of-bounds access.
// (Likewise, without chunk_indices the unit count is h.shape[1]; if cu_seqlens describes more
// chunks than that, the extra chunks are not computed.)

#include <cstdint>

#include "cuda/device_access.cuh"
#include "cuda/wy_dqkg_params.hpp"

namespace kda::cuda {

// Trivially constructible (no member initializers) so that it can live in __shared__;
// create it as `WorkUnit w{}` (all zero, valid == false).
struct WorkUnit {
  int64_t batch;    // batch row of the token tensors (0 when varlen)
  int64_t t0;       // first token of the chunk within the batch row
  int64_t h_batch;  // index into h/dh dim 0
  int64_t h_chunk;  // index into h/dh dim 1
  int64_t hv;       // value head
  int len;          // rows in the chunk, 1..BT
  bool valid;
};

// Without chunk_indices: finds which sequence holds global chunk `chunk` by scanning the
// sequences' chunk counts ceil(len / BT) in order, 32 sequences per step (one per lane, with a
// warp prefix sum). Called by a whole warp; returns false when `chunk` lies past the last one.
__device__ inline bool find_chunk_by_scan(const WyDqkgParams& p, int64_t chunk, int chunk_size,
                                          int lane, int64_t* seq, int64_t* chunk_in_seq) {
  constexpr unsigned kFullMask = 0xffffffffu;
  int64_t chunks_before = 0;  // chunks of the sequences scanned in earlier steps
  for (int64_t first = 0; first < p.num_seqs; first += 32) {
    const int64_t n = first + lane;
    int64_t count = 0;
    if (n < p.num_seqs) {
      int64_t len = load_index(p.cu_seqlens, (n + 1) * p.cu_seqlens.stride0) -
                    load_index(p.cu_seqlens, n * p.cu_seqlens.stride0);
      // Clamp so that garbage cannot overflow the running sum; bad sequences fail the bounds
      // check after the scan.
      len = len < 0 ? 0 : (len > p.T ? p.T : len);
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

// Called by one whole warp; lane 0's result is the one to use.
__device__ inline WorkUnit resolve_unit(const WyDqkgParams& p, int64_t unit, int chunk_size,
                                        int lane) {
  WorkUnit w{};
  w.hv = unit % p.HV;
  const int64_t chunk = unit / p.HV;  // global chunk: h's chunk order
  if (!p.varlen) {
    w.batch = chunk / p.NT;
    const int64_t chunk_in_row = chunk % p.NT;
    w.t0 = chunk_in_row * chunk_size;
    const int64_t rows = p.T - w.t0;
    w.len = static_cast<int>(rows < chunk_size ? rows : chunk_size);
    w.h_batch = w.batch;
    w.h_chunk = chunk_in_row;
    w.valid = true;
    return w;
  }

  int64_t seq = -1;
  int64_t chunk_in_seq = -1;
  if (p.has_chunk_indices) {
    const IndexView& ci = p.chunk_indices;
    seq = load_index(ci, chunk * ci.stride0);
    chunk_in_seq = load_index(ci, chunk * ci.stride0 + ci.stride1);
  } else if (!find_chunk_by_scan(p, chunk, chunk_size, lane, &seq, &chunk_in_seq)) {
    return w;  // past the chunks cu_seqlens describes: skip
  }
  if (seq < 0 || seq >= p.num_seqs) return w;
  const int64_t bos = load_index(p.cu_seqlens, seq * p.cu_seqlens.stride0);
  const int64_t eos = load_index(p.cu_seqlens, (seq + 1) * p.cu_seqlens.stride0);
  if (bos < 0 || bos > eos || eos > p.T) return w;
  const int64_t seq_chunks = (eos - bos + chunk_size - 1) / chunk_size;  // no overflow: eos <= T
  if (chunk_in_seq < 0 || chunk_in_seq >= seq_chunks) return w;
  w.batch = 0;
  w.t0 = bos + chunk_in_seq * chunk_size;
  const int64_t rows = eos - w.t0;  // >= 1 by the check above
  w.len = static_cast<int>(rows < chunk_size ? rows : chunk_size);
  w.h_batch = 0;
  w.h_chunk = chunk;
  w.valid = true;
  return w;
}

// Element offsets of the unit's (row 0, head, column 0) in each input, and the row of
// (t0, hv) in the outputs viewed as [B*T*HV, cols] (row i of the chunk is out_row0 + i * HV).
// Trivially constructible, for __shared__.
struct UnitOrigins {
  int64_t q, k;                           // head hq = hv / (HV/H)
  int64_t v, v_new, do_, dv, g, A, beta;  // head hv
  int64_t h, dh;                          // (h_batch, h_chunk, hv)
  int64_t out_row0;
};

__device__ inline UnitOrigins unit_origins(const WyDqkgParams& p, const WorkUnit& w) {
  const int64_t hq = w.hv / p.heads_per_group;
  auto token = [&](const TokenView& t, int64_t head) {
    return w.batch * t.stride_batch + w.t0 * t.stride_token + head * t.stride_head;
  };
  UnitOrigins o{};
  o.q = token(p.q, hq);
  o.k = token(p.k, hq);
  o.v = token(p.v, w.hv);
  o.v_new = token(p.v_new, w.hv);
  o.do_ = token(p.do_, w.hv);
  o.dv = token(p.dv, w.hv);
  o.g = token(p.g, w.hv);
  o.A = token(p.A, w.hv);
  o.beta = w.batch * p.beta.stride_batch + w.t0 * p.beta.stride_token + w.hv * p.beta.stride_head;
  o.h = w.h_batch * p.h.stride_batch + w.h_chunk * p.h.stride_chunk + w.hv * p.h.stride_head;
  o.dh = w.h_batch * p.dh.stride_batch + w.h_chunk * p.dh.stride_chunk + w.hv * p.dh.stride_head;
  o.out_row0 = (w.batch * p.T + w.t0) * p.HV + w.hv;
  return o;
}

// Warp 0 resolves `unit` and its lane 0 publishes it, with the unit's tensor origins when it is
// valid, in the CTA's shared copies. Callers put a barrier after it (and before it when the
// previous unit may still read them).
__device__ inline void publish_unit(const WyDqkgParams& p, int64_t unit, int chunk_size, int warp,
                                    int lane, WorkUnit& unit_shared, UnitOrigins& origins_shared) {
  if (warp != 0) return;
  const WorkUnit resolved = resolve_unit(p, unit, chunk_size, lane);
  if (lane == 0) {
    unit_shared = resolved;
    if (resolved.valid) origins_shared = unit_origins(p, resolved);
  }
}

}  // namespace kda::cuda
