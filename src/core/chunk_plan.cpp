#include "core/chunk_plan.hpp"

#include <algorithm>

#include "core/index_tensor.hpp"
#include "kda/varlen.hpp"

namespace kda {

std::vector<ChunkTask> plan_chunks(const Problem& problem, const Dims& dims) {
  std::vector<ChunkTask> tasks;
  if (!dims.varlen) {
    tasks.reserve(static_cast<size_t>(dims.B * dims.NT));
    for (int64_t b = 0; b < dims.B; ++b) {
      for (int64_t c = 0; c < dims.NT; ++c) {
        const int64_t t0 = c * dims.BT;
        tasks.push_back({b, t0, std::min(dims.BT, dims.T - t0), b, c});
      }
    }
    return tasks;
  }
  const std::vector<int64_t> cu = read_index_tensor(problem.cu_seqlens);
  std::vector<ChunkIndex> indices;
  chunk_indices_from_cu_seqlens(cu, dims.BT, &indices);  // validated already
  tasks.reserve(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t bos = cu[indices[i].seq];
    const int64_t eos = cu[indices[i].seq + 1];
    const int64_t t0 = bos + indices[i].chunk * dims.BT;
    tasks.push_back({0, t0, std::min(dims.BT, eos - t0), 0, static_cast<int64_t>(i)});
  }
  return tasks;
}

}  // namespace kda
