#include "core/chunk_plan.hpp"

#include <algorithm>

#include "core/index_tensor.hpp"
#include "kda/varlen.hpp"

namespace kda {

std::vector<ChunkTask> plan_chunks(const TensorView& cu_seqlens, int64_t B, int64_t T, int64_t BT,
                                   int64_t NT) {
  std::vector<ChunkTask> tasks;
  if (cu_seqlens.empty_arg()) {
    tasks.reserve(static_cast<size_t>(B * NT));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t c = 0; c < NT; ++c) {
        const int64_t t0 = c * BT;
        tasks.push_back({b, t0, std::min(BT, T - t0), b, c, b});
      }
    }
    return tasks;
  }
  const std::vector<int64_t> cu = read_index_tensor(cu_seqlens);
  std::vector<ChunkIndex> indices;
  chunk_indices_from_cu_seqlens(cu, BT, &indices);  // validated already
  tasks.reserve(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const int64_t bos = cu[indices[i].seq];
    const int64_t eos = cu[indices[i].seq + 1];
    const int64_t t0 = bos + indices[i].chunk * BT;
    tasks.push_back({0, t0, std::min(BT, eos - t0), 0, static_cast<int64_t>(i), indices[i].seq});
  }
  return tasks;
}

std::vector<SequenceChunks> chunks_by_sequence(const std::vector<ChunkTask>& tasks,
                                               int64_t num_seqs) {
  std::vector<SequenceChunks> ranges(static_cast<size_t>(std::max<int64_t>(num_seqs, 0)));
  for (size_t i = 0; i < tasks.size(); ++i) {
    SequenceChunks& r = ranges[static_cast<size_t>(tasks[i].seq)];
    if (r.begin == r.end) r.begin = static_cast<int64_t>(i);
    r.end = static_cast<int64_t>(i) + 1;
  }
  return ranges;
}

}  // namespace kda
