#include "ops/chunk_bwd_intra/chunks.hpp"

#include <algorithm>

#include "core/index_tensor.hpp"

namespace kda::detail {

std::vector<IntraChunk> intra_chunks(const ChunkBwdIntraProblem& problem,
                                     const ChunkBwdIntraDims& dims) {
  std::vector<IntraChunk> chunks;
  if (!dims.varlen) {
    const int64_t per_row = (dims.T + dims.BT - 1) / dims.BT;
    chunks.reserve(static_cast<size_t>(dims.B * per_row));
    for (int64_t b = 0; b < dims.B; ++b) {
      for (int64_t t0 = 0; t0 < dims.T; t0 += dims.BT) {
        chunks.push_back({b, t0, std::min(dims.BT, dims.T - t0)});
      }
    }
    return chunks;
  }
  const std::vector<int64_t> cu = read_index_tensor(problem.cu_seqlens);
  for (size_t n = 0; n + 1 < cu.size(); ++n) {
    for (int64_t t0 = cu[n]; t0 < cu[n + 1]; t0 += dims.BT) {
      chunks.push_back({0, t0, std::min(dims.BT, cu[n + 1] - t0)});
    }
  }
  return chunks;
}

}  // namespace kda::detail
