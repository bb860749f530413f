#pragma once
// The chunks a chunk_bwd_intra problem covers, for the CPU backends (host-resident cu_seqlens).

#include <cstdint>
#include <vector>

#include "kda/ops/chunk_bwd_intra.hpp"

namespace kda::detail {

struct IntraChunk {
  int64_t b = 0;    // batch row (0 when varlen)
  int64_t t0 = 0;   // first token of the chunk within the batch row
  int64_t len = 0;  // rows in the chunk, 1..BT (only a sequence's last chunk is short)
};

// Fixed length: ceil(T / BT) chunks per batch row. Varlen: every sequence of cu_seqlens cut into
// chunks from its own first row, in sequence order (chunk_indices, when given, is the same list by
// the SPEC, so it is not read). `dims` from a successful validation.
std::vector<IntraChunk> intra_chunks(const ChunkBwdIntraProblem& problem,
                                     const ChunkBwdIntraDims& dims);

}  // namespace kda::detail
