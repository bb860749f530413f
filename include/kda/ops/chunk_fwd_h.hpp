#pragma once
// chunk_fwd_h: fla's chunk_gated_delta_rule_fwd_h, the forward state scan of a gated delta
// rule's chunked forward (docs/design.md, "The state scans"). Its first tensor, k, sets X. Its
// outputs' extents that no input has (the chunk count, the sequence count, the state's
// orientation) are the problem's named extents.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/ops/chunk_fwd_h_args.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkFwdHDims {
  int64_t B = 0;         // batch rows (1 when varlen)
  int64_t T = 0;         // tokens per batch row
  int64_t H = 0;         // key heads
  int64_t HV = 0;        // value heads; HV % H == 0
  int64_t K = 0;         // key head dim, 1..256
  int64_t V = 0;         // value head dim, 1..256
  int64_t BT = 0;        // chunk size: 16, 32 or 64
  int64_t NT = 0;        // chunks: per batch row (fixed length) or in total (varlen)
  int64_t num_seqs = 0;  // sequences (B when fixed length, len(cu_seqlens) - 1 when varlen)
  bool varlen = false;
  bool use_g = false;          // the per-head gate g is given
  bool use_gk = false;         // the per-channel gate gk is given
  DType x_dtype = DType::f32;  // X: k, w, u, h, v_new
};

struct ChunkFwdHProblem {
  // One member per row of KDA_CHUNK_FWD_H_ARGS (shapes, dtypes and defaults there):
  //   inputs    k w u
  //   optional  g gk (the gates; either, both or none), initial_state, cu_seqlens, chunk_indices
  //   options   output_final_state chunk_size save_new_value state_v_first (fla's two switches
  //             change nothing: every output is always written)
  //   outputs   h v_new final_state (written in full; contiguous, overlapping nothing)
  KDA_PROBLEM_TABLE_MEMBERS(CHUNK_FWD_H, ChunkFwdH)

  Status validate(ChunkFwdHDims* dims = nullptr) const;

  // The outputs' extents that no input has, by their names in the table's shape rules:
  // "chunks" (NT: ceil(T / BT) per batch row, or the chunks of every sequence: chunk_indices'
  // rows, else counted from host cu_seqlens), "seqs" (B, or len(cu_seqlens) - 1), "state_rows"
  // and "state_cols" (K, V, or V, K with state_v_first; K from k, V from u). -1 where the inputs
  // do not say.
  int64_t named_extent(std::string_view name) const;
};

}  // namespace kda
