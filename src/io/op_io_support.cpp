#include "io/op_io_support.hpp"

#include <stdexcept>

#include "kda/varlen.hpp"

namespace kda::io {

Status file_error(const std::string& what) {
  return invalid_argument(std::string(kFileErrorPrefix) + what);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Status check_queries_values_sizes(const HostProblem& p) {
  const HostTensor& q = p.get("q");
  const HostTensor& v = p.get("v");
  if (q.shape.size() != 4)
    return file_error("input \"q\": expected rank 4 [B, T, H, K], got " + shape_text(q.shape));
  if (v.shape.size() != 4 || v.shape[0] != q.shape[0] || v.shape[1] != q.shape[1]) {
    return file_error("input \"v\": expected [B, T, HV, V] with B, T = " +
                      shape_text({q.shape[0], q.shape[1]}) + " from q, got " + shape_text(v.shape));
  }
  return Status::Ok();
}

std::pair<int64_t, int64_t> bytes_read_written(const HostProblem& hp) {
  int64_t read = 0, written = 0;
  for (const auto& [name, t] : hp.tensors) {
    const auto n = static_cast<int64_t>(t.bytes.size());
    (name.starts_with("out.") ? written : read) += n;
  }
  return {read, written};
}

std::pair<int64_t, int64_t> add_varlen_index_tensors(const std::vector<int64_t>& seqlens,
                                                     int64_t chunk_size, DType index_dtype,
                                                     bool pass_chunk_indices, HostProblem* hp) {
  std::vector<int64_t> cu{0};
  for (int64_t len : seqlens) {
    if (len < 0) throw std::invalid_argument("seqlens: negative length " + std::to_string(len));
    cu.push_back(cu.back() + len);
  }
  std::vector<ChunkIndex> indices;
  if (Status s = chunk_indices_from_cu_seqlens(cu, chunk_size, &indices); !s.ok()) {
    throw std::invalid_argument(s.message);
  }
  HostTensor cu_t(index_dtype, {static_cast<int64_t>(cu.size())});
  for (size_t i = 0; i < cu.size(); ++i) {
    cu_t.set(static_cast<int64_t>(i), static_cast<double>(cu[i]));
  }
  hp->tensors["cu_seqlens"] = std::move(cu_t);
  const auto NT = static_cast<int64_t>(indices.size());
  if (pass_chunk_indices) {
    HostTensor ci(index_dtype, {NT, 2});
    for (int64_t i = 0; i < NT; ++i) {
      ci.set(2 * i, static_cast<double>(indices[static_cast<size_t>(i)].seq));
      ci.set(2 * i + 1, static_cast<double>(indices[static_cast<size_t>(i)].chunk));
    }
    hp->tensors["chunk_indices"] = std::move(ci);
  }
  return {cu.back(), NT};
}

}  // namespace kda::io
