#pragma once
// chunk_bwd_dhu: fla's chunk_gated_delta_rule_bwd_dhu, the reverse state scan of a gated delta
// rule's chunked backward (docs/design.md, "The state scans"). Its outputs' extents that no
// input has (the chunk count, the sequence count, the state's orientation) are the problem's
// named extents.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_dhu_args.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkBwdDhuDims {
  int64_t B = 0;         // batch rows (1 when varlen)
  int64_t T = 0;         // tokens per batch row
  int64_t H = 0;         // query/key heads
  int64_t HV = 0;        // value heads; HV % H == 0
  int64_t K = 0;         // key head dim, 1..256
  int64_t V = 0;         // value head dim, 1..256
  int64_t BT = 0;        // chunk size: 16, 32 or 64
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;  // sequences (B when fixed length, len(cu_seqlens) - 1 when varlen)
  bool varlen = false;
  bool use_g = false;          // the per-head gate g is given
  bool use_gk = false;         // the per-channel gate gk is given
  DType x_dtype = DType::f32;  // X: q, k, w, do, dv, dh, dv2
  double scale = 0.0;          // resolved: K ** -0.5 when the option is none
};

struct ChunkBwdDhuProblem {
  // One member per row of KDA_CHUNK_BWD_DHU_ARGS (shapes, dtypes and defaults there):
  //   inputs    q k w do dv
  //   optional  g gk (the gates; either, both or none), h0 (dh0's shape), dht, cu_seqlens,
  //             chunk_indices
  //   options   scale state_v_first chunk_size
  //   outputs   dh dh0 dv2 (written in full; contiguous, overlapping nothing; dh0 also without
  //             h0: the gradient by a zero initial state)
  KDA_PROBLEM_TABLE_MEMBERS(CHUNK_BWD_DHU, ChunkBwdDhu)

  Status validate(ChunkBwdDhuDims* dims = nullptr) const;

  // The outputs' extents that no input has, by their names in the table's shape rules:
  // "chunks" (NT: ceil(T / BT) per batch row, or the chunks of every sequence: chunk_indices'
  // rows, else counted from host cu_seqlens), "seqs" (B, or len(cu_seqlens) - 1), "state_rows"
  // and "state_cols" (K, V, or V, K with state_v_first). -1 where the inputs do not say.
  int64_t named_extent(std::string_view name) const;
};

}  // namespace kda
