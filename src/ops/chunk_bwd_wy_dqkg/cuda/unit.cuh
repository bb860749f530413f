#pragma once
// Work units of chunk_bwd_wy_dqkg: unit u = chunk * HV + hv, one CTA each. This file maps a unit
// to its rows of the inputs (the bounds-checked chunk walk of cuda/common/chunk_units.cuh) and to
// its h/dh slice, and the strides the kernels' K loops keep in shared memory.

#include <cstdint>

#include "cuda/common/chunk_units.cuh"
#include "cuda/common/device_access.cuh"
#include "ops/chunk_bwd_wy_dqkg/cuda/params.hpp"

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

// Called by one whole warp; lane 0's result is the one to use. Without chunk_indices the unit
// count is h.shape[1] (times HV); chunks cu_seqlens describes past that are not computed.
//
// The span is copied whole, valid or not (an invalid ChunkSpan is all zero, so the unit is the
// same as with an early return). An early `if (!c.valid) return w;` made nvcc merge the two
// paths with a select of every field in warp 0's prologue, and that perturbed ptxas's register
// allocation and scheduling of the whole kernel: the sm80_mma and simt kernels' SASS differed
// from 6478d54's in ~1/3 of the instructions (same counts and memory operations). Copied whole,
// the SASS is 6478d54's again instruction for instruction (dev/journal/performance.md, "bf16
// h-fp32 regression: what the SASS shows").
__device__ inline WorkUnit resolve_unit(const WyDqkgParams& p, int64_t unit, int chunk_size,
                                        int lane) {
  WorkUnit w{};
  w.hv = unit % p.HV;
  const ChunkSpan c = resolve_chunk(p.chunks, unit / p.HV, chunk_size, lane);
  w.batch = c.batch;
  w.t0 = c.t0;
  w.len = c.len;
  w.h_batch = c.batch;  // h's chunk order: [B, NT] fixed length, [1, NT] varlen
  w.h_chunk = c.chunk_in_row;
  w.valid = c.valid;
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

// Strides the K loop needs, kept in shared memory and re-read after each barrier: as kernel
// parameters the compiler hoists them and their per-row products out of the loop into registers,
// 13 more than this way for BT = 64 (128, the budget, against 115). 32-bit: the dispatch checks
// that every offset a kernel forms from them (a row index below BT, or K or V, times a stride)
// fits, so that each address is one 32-bit multiply-add and one 64-bit add to a unit pointer
// below, not a chain of 64-bit products.
struct LoopStrides {
  int32_t g_row, q_row, k_row;   // token stride of g, q, k
  int32_t out_row;               // HV * K: between rows i and i + 1 of dq, dk, dg
  int32_t dv_row;                // HV * V: between rows of dv_out
  int32_t h_k, h_v, dh_k, dh_v;  // h, dh as S[k][v]
  // The unit's (row 0, head, column 0) of g, q, k and of dq, dk, dg (publish_unit).
  const float* g;
  const void* q;
  const void* k;
  float* dq;
  float* dk;
  float* dg;
};

// The strides of `strides` (32-bit: the dispatch checked that every offset formed from them fits).
__device__ inline void set_loop_strides(const WyDqkgParams& p, LoopStrides& strides) {
  strides.g_row = static_cast<int32_t>(p.g.stride_token);
  strides.q_row = static_cast<int32_t>(p.q.stride_token);
  strides.k_row = static_cast<int32_t>(p.k.stride_token);
  strides.out_row = static_cast<int32_t>(p.HV * p.K);
  strides.dv_row = static_cast<int32_t>(p.HV * p.V);
  strides.h_k = static_cast<int32_t>(p.h.stride_k);
  strides.h_v = static_cast<int32_t>(p.h.stride_v);
  strides.dh_k = static_cast<int32_t>(p.dh.stride_k);
  strides.dh_v = static_cast<int32_t>(p.dh.stride_v);
}

// The unit pointers of `strides` from the unit's origins (XT: the dtype of q and k).
template <typename XT>
__device__ inline void set_unit_pointers(const WyDqkgParams& p, const UnitOrigins& o,
                                         LoopStrides& strides) {
  strides.g = static_cast<const float*>(p.g.data) + o.g;
  strides.q = static_cast<const XT*>(p.q.data) + o.q;
  strides.k = static_cast<const XT*>(p.k.data) + o.k;
  strides.dq = p.dq + o.out_row0 * p.K;
  strides.dk = p.dk + o.out_row0 * p.K;
  strides.dg = p.dg + o.out_row0 * p.K;
}

// Warp 0 resolves `unit` and its lane 0 publishes it, with the unit's tensor origins when it is
// valid, in the CTA's shared copies, and given `strides` the unit pointers there (XT: the dtype
// of q and k). Callers put a barrier after it (and before it when the previous unit may still
// read them). Lane 0 works from its own registers, so no other thread reads what it writes.
template <typename XT = float>
__device__ inline void publish_unit(const WyDqkgParams& p, int64_t unit, int chunk_size, int warp,
                                    int lane, WorkUnit& unit_shared, UnitOrigins& origins_shared,
                                    LoopStrides* strides = nullptr) {
  if (warp != 0) return;
  const WorkUnit resolved = resolve_unit(p, unit, chunk_size, lane);
  if (lane == 0) {
    unit_shared = resolved;
    if (resolved.valid) {
      origins_shared = unit_origins(p, resolved);
      if (strides != nullptr) set_unit_pointers<XT>(p, unit_origins(p, resolved), *strides);
    }
  }
}

}  // namespace kda::cuda
