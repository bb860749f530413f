#pragma once
// Chunk bookkeeping for variable-length batches (cu_seqlens).

#include <cstdint>
#include <vector>

#include "kda/status.hpp"

namespace kda {

struct ChunkIndex {
  int64_t seq = 0;    // sequence id
  int64_t chunk = 0;  // chunk id within the sequence
  bool operator==(const ChunkIndex& other) const {
    return seq == other.seq && chunk == other.chunk;
  }
};

// chunk_indices as fla's prepare_chunk_indices builds them: for each sequence in order, one entry
// per chunk of chunk_size tokens (the last may be short). Fails on malformed cu_seqlens.
Status chunk_indices_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t chunk_size,
                                     std::vector<ChunkIndex>* out);

// Offsets of each sequence's first chunk in the global chunk order: size N+1, last == NT.
Status chunk_offsets_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t chunk_size,
                                     std::vector<int64_t>* out);

}  // namespace kda
