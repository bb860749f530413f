#pragma once
// The list of chunks a problem covers, in h's chunk order: what every CPU backend iterates over.

#include <cstdint>
#include <vector>

#include "kda/problem.hpp"

namespace kda {

struct ChunkTask {
  int64_t b = 0;        // batch row of q/k/v/... (0 when varlen)
  int64_t t0 = 0;       // first token of the chunk within the batch row
  int64_t len = 0;      // rows in the chunk, 1..BT (only a sequence's last chunk is short)
  int64_t h_batch = 0;  // index into h/dh dim 0
  int64_t h_chunk = 0;  // index into h/dh dim 1
};

// Needs host-resident index tensors; `dims` from a successful validate().
std::vector<ChunkTask> plan_chunks(const Problem& problem, const Dims& dims);

}  // namespace kda
