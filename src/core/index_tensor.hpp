#pragma once
// Host-resident int32/int64 index tensors (cu_seqlens, chunk_indices): element access, and a walk
// over cu_seqlens that checks it and reports each sequence's chunk count.

#include <cstdint>
#include <string>
#include <vector>

#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Entry (row, col) of a rank-1 (col ignored) or rank-2 int32/int64 view on the host.
inline int64_t index_at(const TensorView& t, int64_t row, int64_t col = 0) {
  const int64_t off = row * t.strides[0] + (t.rank == 2 ? col * t.strides[1] : 0);
  return t.dtype == DType::i32 ? static_cast<const int32_t*>(t.data)[off]
                               : static_cast<const int64_t*>(t.data)[off];
}

// Row-major order over the view's shape, honouring its strides. The view must be on the host,
// int32 or int64, rank 1 or 2 (validated by the caller).
std::vector<int64_t> read_index_tensor(const TensorView& t);

// Checks `entries` cu_seqlens values read through entry_at(i) (at least one entry, the first 0,
// the last >= 0 before the others are read, non-decreasing) and calls on_sequence(seq, chunks) ->
// Status for each sequence, with its chunk count ceil(len / chunk_size). Allocates nothing, so it
// also serves host tensors whose descriptor claims more entries than would fit in memory.
template <typename EntryAt, typename OnSequence>
Status walk_cu_seqlens(int64_t entries, EntryAt entry_at, int64_t chunk_size,
                       OnSequence on_sequence) {
  if (chunk_size <= 0) return invalid_argument("argument 'chunk_size': expected > 0");
  if (entries < 1)
    return invalid_argument("argument 'cu_seqlens': expected at least one entry (0)");
  int64_t previous = entry_at(0);
  if (previous != 0) {
    return invalid_argument("argument 'cu_seqlens': expected cu_seqlens[0] == 0, got " +
                            std::to_string(previous));
  }
  // Cheap rejections first: with the first entry 0 and the entries non-decreasing, the last is
  // >= 0; a negative one is reported now rather than after a walk over every entry (10^9 of
  // them took 2.5 s).
  if (const int64_t last = entry_at(entries - 1); last < 0) {
    return invalid_argument(
        "argument 'cu_seqlens': expected non-decreasing values, got cu_seqlens[" +
        std::to_string(entries - 1) + "] = " + std::to_string(last) + " < cu_seqlens[0] = 0");
  }
  for (int64_t i = 1; i < entries; ++i) {
    const int64_t current = entry_at(i);
    if (current < previous) {
      return invalid_argument(
          "argument 'cu_seqlens': expected non-decreasing values, got cu_seqlens[" +
          std::to_string(i) + "] = " + std::to_string(current) + " < cu_seqlens[" +
          std::to_string(i - 1) + "] = " + std::to_string(previous));
    }
    const int64_t len = current - previous;  // >= 0, no overflow: both are >= 0
    if (Status s = on_sequence(i - 1, len / chunk_size + (len % chunk_size != 0)); !s.ok()) {
      return s;
    }
    previous = current;
  }
  return Status::Ok();
}

// The total chunk count of cu_seqlens (checked as walk_cu_seqlens does), without materializing a
// chunk list: a huge last entry costs a walk over the entries, not memory per chunk. The total
// is at most the last entry, so it cannot overflow.
template <typename EntryAt>
Status count_cu_seqlens_chunks(int64_t entries, EntryAt entry_at, int64_t chunk_size,
                               int64_t* total) {
  *total = 0;
  return walk_cu_seqlens(entries, entry_at, chunk_size, [&](int64_t, int64_t chunks) {
    *total += chunks;
    return Status::Ok();
  });
}

}  // namespace kda
