#pragma once
// chunk_bwd_prep: the first pass of a KDA layer's backward. From the layer's raw inputs, the
// forward's Akk and Aqk and do it writes, per (chunk, value head), what the state scans read:
// gk, w, u, qg, kg and the intra-chunk dv (docs/design.md, "The backward's first pass").

#include <cstdint>
#include <span>
#include <string>

#include "kda/args.hpp"
#include "kda/backend.hpp"
#include "kda/ops/chunk_bwd_prep_args.h"
#include "kda/status.hpp"
#include "kda/tensor.hpp"

namespace kda {

// Sizes derived from a valid problem.
struct ChunkBwdPrepDims {
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
  DType x_dtype = DType::f32;  // X: q, k, v, A, Aqk, do and the outputs but gk
};

struct ChunkBwdPrepProblem {
  // One member per row of KDA_CHUNK_BWD_PREP_ARGS (shapes, dtypes and defaults there):
  //   inputs    q k v g beta (the layer's raw inputs), A (Akk), Aqk, do
  //   optional  A_log dt_bias (only with use_gate_in_kernel), cu_seqlens chunk_indices
  //   options   chunk_size and the layer's activation switches
  //   outputs   gk w u qg kg dv (written in full; contiguous, overlapping nothing)
  KDA_PROBLEM_TABLE_MEMBERS(CHUNK_BWD_PREP, ChunkBwdPrep)

  Status validate(ChunkBwdPrepDims* dims = nullptr) const;
};

}  // namespace kda
