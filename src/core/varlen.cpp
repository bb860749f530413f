#include "kda/varlen.hpp"

#include "core/index_tensor.hpp"

#include <string>

namespace kda {

Status chunk_offsets_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t chunk_size,
                                     std::vector<int64_t>* out) {
  out->assign(1, 0);
  return walk_cu_seqlens(
      static_cast<int64_t>(cu_seqlens.size()), [&](int64_t i) { return cu_seqlens[i]; }, chunk_size,
      [&](int64_t, int64_t chunks) {
        out->push_back(out->back() + chunks);
        return Status::Ok();
      });
}

Status chunk_indices_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t chunk_size,
                                     std::vector<ChunkIndex>* out) {
  std::vector<int64_t> offsets;
  if (Status s = chunk_offsets_from_cu_seqlens(cu_seqlens, chunk_size, &offsets); !s.ok()) return s;
  out->clear();
  out->reserve(static_cast<size_t>(offsets.back()));
  for (size_t seq = 0; seq + 1 < offsets.size(); ++seq) {
    for (int64_t c = 0; c < offsets[seq + 1] - offsets[seq]; ++c) {
      out->push_back({static_cast<int64_t>(seq), c});
    }
  }
  return Status::Ok();
}

}  // namespace kda
