#pragma once
// The list of chunks a problem covers, in the chunk order of the operators' per-chunk tensors
// (h/dh): what every CPU backend iterates over.

#include <cstdint>
#include <vector>

#include "kda/tensor.hpp"

namespace kda {

struct ChunkTask {
  int64_t b = 0;        // batch row of the token tensors (0 when varlen)
  int64_t t0 = 0;       // first token of the chunk within the batch row
  int64_t len = 0;      // rows in the chunk, 1..BT (only a sequence's last chunk is short)
  int64_t h_batch = 0;  // index into per-chunk tensors' dim 0
  int64_t h_chunk = 0;  // index into per-chunk tensors' dim 1
  int64_t seq = 0;      // its sequence: the batch row, or the index into cu_seqlens
};

// The chunks of each of `num_seqs` sequences as [begin, end) ranges into plan_chunks' list (a
// sequence of no tokens has an empty range): what the state scans walk, sequence by sequence.
struct SequenceChunks {
  int64_t begin = 0, end = 0;
};
std::vector<SequenceChunks> chunks_by_sequence(const std::vector<ChunkTask>& tasks,
                                               int64_t num_seqs);

// The chunks of a validated problem: B batch rows of NT chunks of BT tokens each (T tokens per
// row), or with cu_seqlens (host-resident, validated) each sequence cut from its own first row.
std::vector<ChunkTask> plan_chunks(const TensorView& cu_seqlens, int64_t B, int64_t T, int64_t BT,
                                   int64_t NT);

// The same from an operator's dims (every operator's Dims has B, T, BT and NT).
template <typename Dims>
std::vector<ChunkTask> plan_chunks(const TensorView& cu_seqlens, const Dims& dims) {
  return plan_chunks(cu_seqlens, dims.B, dims.T, dims.BT, dims.NT);
}

}  // namespace kda
