#include "kda/varlen.hpp"

#include <string>

namespace kda {

namespace {

Status check_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t chunk_size) {
  if (chunk_size <= 0) return invalid_argument("argument 'chunk_size': expected > 0");
  if (cu_seqlens.empty())
    return invalid_argument("argument 'cu_seqlens': expected at least one entry (0)");
  if (cu_seqlens[0] != 0) {
    return invalid_argument("argument 'cu_seqlens': expected cu_seqlens[0] == 0, got " +
                            std::to_string(cu_seqlens[0]));
  }
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1]) {
      return invalid_argument(
          "argument 'cu_seqlens': expected non-decreasing values, got cu_seqlens[" +
          std::to_string(i) + "] = " + std::to_string(cu_seqlens[i]) + " < cu_seqlens[" +
          std::to_string(i - 1) + "] = " + std::to_string(cu_seqlens[i - 1]));
    }
  }
  return Status::Ok();
}

}  // namespace

Status chunk_offsets_from_cu_seqlens(const std::vector<int64_t>& cu_seqlens, int64_t chunk_size,
                                     std::vector<int64_t>* out) {
  if (Status s = check_cu_seqlens(cu_seqlens, chunk_size); !s.ok()) return s;
  out->assign(cu_seqlens.size(), 0);
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t len = cu_seqlens[i] - cu_seqlens[i - 1];
    (*out)[i] = (*out)[i - 1] + len / chunk_size + (len % chunk_size != 0);  // no overflow
  }
  return Status::Ok();
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
