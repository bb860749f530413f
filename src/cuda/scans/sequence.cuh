#pragma once
// Which tokens and which of dh's chunks a sequence covers, read from the device-resident
// cu_seqlens with every value bounds-checked (the rule of cuda/common/chunk_units.cuh): a
// sequence whose entries are out of order or out of range, or whose chunks would lie past dh's
// NT, is skipped whole (its outputs keep what the caller's buffers held).

#include <cstdint>

#include "cuda/common/device_access.cuh"
#include "cuda/scans/params.hpp"

namespace kda::cuda::scans {

// A CTA's (sequence n, value head hv) and the first of its `slice` value columns v0. The grid
// is one-dimensional with the slices of one (sequence, head) adjacent in launch order, so that
// they run at the same time and read its K-wide tiles once from DRAM, the others from L2.
struct ScanUnit {
  int64_t n, hv, v0;
};

__host__ __device__ inline int64_t scan_slices(const ScanParams& p, int slice) {
  return (p.V + slice - 1) / slice;
}

__device__ inline ScanUnit scan_unit(const ScanParams& p, int slice) {
  const int64_t slices = scan_slices(p, slice), block = blockIdx.x;
  const int64_t unit = block / slices;
  return {unit / p.HV, unit % p.HV, (block % slices) * slice};
}

struct SequenceSpan {
  int64_t batch;   // batch row of the token tensors and of dh (0 when varlen)
  int64_t bos;     // first token within the batch row
  int64_t eos;     // one past its last token
  int64_t chunks;  // ceil((eos - bos) / BT)
  int64_t chunk0;  // index of its first chunk along dh's dim 1
  bool valid;
};

// Sequence n; called by the whole block (the chunks before it are counted together).
__device__ inline SequenceSpan resolve_sequence(const ScanParams& p, int64_t n) {
  const int64_t bt = p.chunk_size;
  if (!p.varlen) return {n, 0, p.T, (p.T + bt - 1) / bt, 0, true};
  __shared__ unsigned long long chunks_before;
  if (threadIdx.x == 0) chunks_before = 0;
  __syncthreads();
  const IndexView& cu = p.cu_seqlens;
  unsigned long long mine = 0;
  for (int64_t m = threadIdx.x; m < n; m += blockDim.x) {
    int64_t len = load_index(cu, (m + 1) * cu.stride0) - load_index(cu, m * cu.stride0);
    len = len < 0 ? 0 : (len > p.T ? p.T : len);  // garbage cannot overflow the sum
    mine += static_cast<unsigned long long>((len + bt - 1) / bt);
  }
  if (mine != 0) atomicAdd(&chunks_before, mine);
  __syncthreads();
  SequenceSpan s{0, 0, 0, 0, static_cast<int64_t>(chunks_before), false};
  const int64_t bos = load_index(cu, n * cu.stride0), eos = load_index(cu, (n + 1) * cu.stride0);
  if (bos < 0 || bos > eos || eos > p.T) return s;
  s.bos = bos;
  s.eos = eos;
  s.chunks = (eos - bos + bt - 1) / bt;
  s.valid = s.chunk0 + s.chunks <= p.NT;
  return s;
}

}  // namespace kda::cuda::scans
